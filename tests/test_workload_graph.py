"""The builder's FLOP and activation counts against the closed forms they come from."""

from __future__ import annotations

import pytest

from perfmodel.errors import LayoutError
from perfmodel.parallel.shard import sharded_graph
from perfmodel.workload.builder import build_graph
from perfmodel.workload.catalog import load_workloads
from perfmodel.workload.graph import Graph, Layer

WL = load_workloads()
MATMUL = ("gemm", "bmm", "attention", "recurrence")


def matmul_model_flop(layers: tuple[Layer, ...]) -> float:
    """Forward matmul FLOPs (attention counted in full, the model-FLOP convention)."""
    return sum(layer.count * sum(o.mflop for o in layer.ops if o.kind in MATMUL) for layer in layers)


def layer_of(g: Graph, kind: str) -> Layer:
    return next(layer for layer in g.layers if layer.kind == kind)


def test_gpt_layer_forward_flop_is_narayanan_eq2() -> None:
    # one GPT-3 175B layer, b=2, s=2048: 24·b·s·h² + 4·b·s²·h (Narayanan et al. 2021)
    b, s, h = 2, 2048, 12288
    g = build_graph(WL["gpt3-175b"], micro_batch=b, seq_len=s)
    layer = layer_of(g, "transformer")
    per_layer = sum(o.mflop for o in layer.ops if o.kind in MATMUL)
    assert per_layer == 24 * b * s * h**2 + 4 * b * s**2 * h  # 1.5992e13
    # FlashAttention executes half of the causal score matrix: 2·b·s²·h less
    executed = sum(o.flop for o in layer.ops if o.kind in MATMUL)
    assert executed == 24 * b * s * h**2 + 2 * b * s**2 * h


def test_gpt_model_flop_is_megatron_eq3() -> None:
    # Megatron-LM Eq. 3 per sequence: 72·s·L·h²·(1 + s/(6h) + V/(12·L·h))
    #   = 72·s·L·h² + 12·s²·L·h + 6·s·V·h; our train model FLOPs (matmuls x 3) must equal it.
    spec = WL["gpt3-175b"]
    s, h, L, V = 2048, 12288, 96, 50257
    g = build_graph(spec, micro_batch=1, seq_len=s)
    eq3 = 72 * s * L * h**2 * (1 + s / (6 * h) + V / (12 * L * h))
    assert 3 * matmul_model_flop(g.layers) == pytest.approx(eq3, rel=1e-12)  # 3.5527e18 FLOP per sequence


@pytest.mark.parametrize("wid, lo, hi", [
    ("gpt3-175b", 1.0, 1.002), ("gpt3-125m", 1.0, 1.01), ("gpt2-124m", 1.0, 1.01), ("mpt-7b", 1.0, 1.003),
    ("llama3-8b", 1.0, 1.003), ("llama3-70b", 1.0, 1.002), ("llama2-7b", 1.0, 1.003), ("bloom-176b", 1.0, 1.002),
    ("mixtral-8x7b", 1.0, 1.003), ("deepseek-v3", 0.99, 1.01),
])
def test_train_flop_per_token_vs_6n_plus_attention(wid: str, lo: float, hi: float) -> None:
    """train model FLOP per token / (6·N' + 12·L·h_attn·s) lies in [lo, hi].

    N' = the parameters a token multiplies through: all (active) parameters except the input
    embedding table and position embeddings, with the LM head counted once (tied or not).
    The surplus over 1 is element-wise work (norms, activations, softmax, loss): about
    46/(24·h) per layer. DeepSeek-V3: MLA attention uses d_qk = 192, d_v = 128 per head rather
    than hidden/heads, so its 12·L·h·s term is written with (d_qk + d_v)/2 x heads."""
    spec = WL[wid]
    s = min(spec.seq_len, 4096)
    g = build_graph(spec, micro_batch=1, seq_len=s)
    emb = layer_of(g, "embedding").params_full
    V, h = spec.vocab or 0, spec.hidden
    n_prime = g.active_params_full() - emb + (V * h if spec.tied_embeddings else 0)
    if spec.mla:
        h_attn = (spec.num_heads or 0) * (spec.mla.qk_nope_head_dim + spec.mla.qk_rope_head_dim + spec.mla.v_head_dim) / 2
    else:
        h_attn = (spec.num_heads or 0) * spec.dhead
    closed = 6 * n_prime + 12 * spec.num_layers * h_attn * s
    ratio = g.train_model_flop() / g.tokens / closed
    assert lo <= ratio <= hi, ratio


def test_attention_executed_vs_model_flop() -> None:
    # model convention: full s x s square, backward 2x forward. FlashAttention executes the causal
    # half, backward 2.5x forward (recomputes QK^T: 5 matmuls against 2).
    s, h_attn = 8192, 4096
    g = build_graph(WL["llama3-8b"], micro_batch=1, seq_len=s)
    attn = next(o for o in layer_of(g, "transformer").ops if o.kind == "attention")
    assert 3 * attn.mflop == 3 * 4 * s * s * h_attn
    assert attn.flop * (1 + attn.bwd_flop_factor) == 3.5 * 2 * s * s * h_attn


def test_activation_memory_is_korthikanti_table2() -> None:
    # GPT-3 175B layer, unfused attention, b=1, s=2048, a=96: saved = s·b·h·(34 + 5·a·s/h) bytes
    b, s, h, a = 1, 2048, 12288, 96
    spec = WL["gpt3-175b"]
    base = build_graph(spec, b, s, attention_impl="unfused")
    assert layer_of(base, "transformer").saved_bytes == s * b * h * (34 + 5 * a * s / h)
    for t in (2, 8):
        tp = sharded_graph(spec, b, s, tp=t, attention_impl="unfused")
        assert layer_of(tp, "transformer").saved_bytes == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)))
        sp = sharded_graph(spec, b, s, tp=t, sp=True, attention_impl="unfused")
        assert layer_of(sp, "transformer").saved_bytes == pytest.approx(s * b * h * (34 / t + 5 * a * s / (h * t)))


def test_flash_attention_saves_no_score_matrix() -> None:
    # flash keeps Q, K, V (6·s·b·h bytes at 2 B, what the unfused QK^T and PV keep too) and an
    # fp32 log-sum-exp per row (4·a·s·b) instead of the 5·a·s²·b of scores, softmax and dropout
    b, s, h, a = 1, 2048, 12288, 96
    g = build_graph(WL["gpt3-175b"], b, s)
    layer = layer_of(g, "transformer")
    assert layer.saved_bytes == s * b * h * 34 + 4 * b * a * s
    assert layer.attn_core_saved_bytes == s * b * h * 6 + 4 * b * a * s
    # GQA: K and V at the kv-head count. Llama-3-8B: Q 32·128, K+V 2·8·128 per token
    g = build_graph(WL["llama3-8b"], 1, 4096)
    attn = next(o for o in layer_of(g, "transformer").ops if o.kind == "attention")
    assert attn.saved_bytes == 4096 * (32 * 128 + 2 * 8 * 128) * 2 + 32 * 4096 * 4


def test_gemm_shapes_llama_gqa() -> None:
    g = build_graph(WL["llama3-8b"], micro_batch=2, seq_len=4096)
    ops = {o.name: o for o in layer_of(g, "transformer").ops}
    T = 2 * 4096
    assert (ops["qkv_proj"].m, ops["qkv_proj"].n, ops["qkv_proj"].k) == (T, (32 + 2 * 8) * 128, 4096)
    assert (ops["out_proj"].m, ops["out_proj"].n, ops["out_proj"].k) == (T, 4096, 4096)
    assert (ops["mlp_fc1"].n, ops["mlp_fc2"].k) == (2 * 14336, 14336)
    assert ops["flash_attention"].heads == 32 and ops["flash_attention"].head_dim == 128


def test_moe_layer_flop_and_layout() -> None:
    # Mixtral, T = 4096 tokens: router 2·T·h·E, experts top_k copies of a SwiGLU FFN: 2·T·k·3·h·f
    T, h, f, E, k = 4096, 4096, 14336, 8, 2
    g = build_graph(WL["mixtral-8x7b"], micro_batch=1, seq_len=T)
    layer = layer_of(g, "moe")
    ops = {o.name: o for o in layer.ops}
    assert ops["router"].flop == 2 * T * h * E
    assert ops["expert_fc1"].flop + ops["expert_fc2"].flop == 2 * T * k * 3 * h * f
    assert ops["expert_fc1"].batch == E and ops["expert_fc1"].m == T * k // E
    # every expert has its own weights: the weight traffic is E·h·2f·2 bytes
    fc1 = ops["expert_fc1"]
    assert fc1.bytes == E * (fc1.m * h * 2 + fc1.m * 2 * f * 2) + E * h * 2 * f * 2
    assert layer.expert_params == E * 3 * h * f


def test_deepseek_layers() -> None:
    g = build_graph(WL["deepseek-v3"], micro_batch=1, seq_len=4096)
    assert layer_of(g, "transformer").count == 3 and layer_of(g, "moe").count == 58
    names = [o.name for o in layer_of(g, "moe").ops]
    assert "shared_fc1" in names and "q_down" in names and "kv_up" in names


def test_encoder_is_bidirectional() -> None:
    g = build_graph(WL["bert-large"], micro_batch=1, seq_len=512)
    attn = next(o for o in layer_of(g, "transformer").ops if o.kind == "attention")
    assert not attn.causal and attn.flop == attn.mflop == 4 * 512 * 512 * 1024


def test_lstm_tcn_mlp_flop_by_hand() -> None:
    b = 8
    # LSTM: per layer 2·b·s·4H·(in + H); head 2·b·H·out
    g = build_graph(WL["lstm-deepar"], micro_batch=b)
    s, H = 360, 40
    assert matmul_model_flop(g.layers) == 2 * b * s * 4 * H * (44 + H) + 2 * b * s * 4 * H * (2 * H) + 2 * b * H * 24
    recurrent = next(o for o in g.layers[0].ops if o.name.endswith("recurrent"))
    # s sequential small GEMMs, issued as one fused call (cuDNN / ATen lstm): one kernel of host time
    assert recurrent.kind == "recurrence" and recurrent.repeat == s and recurrent.kernels == 1
    # MLP 784-512-512-10: 2·b·669,696 multiply-adds (weights only; biases are not FLOPs here)
    g = build_graph(WL["mlp-mnist"], micro_batch=b)
    assert matmul_model_flop(g.layers) == 2 * b * (784 * 512 + 512 * 512 + 512 * 10)
    # TCN: 2·b·s·(k·C_in·C + k·C·C) per level + 1x1 downsample at level 0
    g = build_graph(WL["tcn-seqmnist"], micro_batch=b)
    s, C, k = 784, 25, 7
    expect = 2 * b * s * (k * 1 * C + k * C * C + 1 * C) + 7 * 2 * b * s * (2 * k * C * C) + 2 * b * C * 10
    assert matmul_model_flop(g.layers) == expect


def test_patchtst_tokens_are_channel_patches() -> None:
    g = build_graph(WL["patchtst-electricity"], micro_batch=2)
    assert g.tokens == 2 * 321 * 41  # (336 - 16) // 8 + 1 = 41 patches per variable
    head = next(o for o in g.layers[-1].ops if o.name == "forecast_head")
    assert (head.m, head.n, head.k) == (2 * 321, 96, 41 * 128)


def test_graph_sums() -> None:
    g = build_graph(WL["gpt2-124m"], micro_batch=4)
    assert g.fwd_flop() == sum(layer.fwd_flop * layer.count for layer in g.layers)
    assert g.train_model_flop() == 3 * g.fwd_model_flop()
    assert g.fwd_flop() < g.train_flop() < 3.5 * g.fwd_flop()
    assert [layer.kind for layer in g.body] == ["transformer"]
    assert g.tokens == 4 * 1024


def test_mamba_layers_under_tp_and_cp() -> None:
    # Nemotron-H 8B Mamba layer: tp shards heads; cp splits tokens for the projections and heads for
    # the scan (an all-to-all each way), so the mixer's per-rank FLOPs are 1 / (tp·cp) of the whole
    # (the pre-norm and residual stay replicated over tp without sequence parallelism)
    spec = WL["nemotron-h-8b"]

    def mixer_flop(layer: Layer) -> float:
        return sum(o.flop for o in layer.ops if o.name.startswith("mamba_") and o.name != "mamba_residual")

    base = mixer_flop(next(layer for layer in build_graph(spec, seq_len=4096).body if layer.kind == "mamba"))
    for tp, cp in ((2, 1), (1, 2), (2, 2)):
        g = sharded_graph(spec, seq_len=4096, tp=tp, cp=cp)
        m = next(layer for layer in g.body if layer.kind == "mamba")
        assert mixer_flop(m) == pytest.approx(base / (tp * cp), rel=1e-9)
        a2a = [c for c in m.comms if c.group == "cp"]
        assert len(a2a) == (2 if cp > 1 else 0) and all(c.kind == "all_to_all" for c in a2a)
        tp_comms = [c for c in m.comms if c.group == "tp"]
        assert all(c.fwd == 1 for c in tp_comms) and len(tp_comms) == (1 if tp > 1 else 0)  # one sub-layer
    with pytest.raises(LayoutError, match=r"mamba\.num_heads"):
        sharded_graph(spec, tp=3)


def test_mamba_mixer_layout_copies_by_hand() -> None:
    """Megatron-Core's mixer copies the in_proj output to batch-major and the scan output back
    (mamba_mixer.py _ssm_training), a copy only when the micro-batch is over 1. Nemotron-H 8B
    (d_inner 8192, 8 groups of state 128, 128 heads: in_proj width 2*8192 + 2*8*128 + 128 = 18560),
    micro-batch 2 of 4096 tokens: 8192 x (18560 + 8192) elements read and written once in bf16,
    2 x 2 x 8192 x 26752 = 876.6 MB forward and the same backward, in two kernels each."""
    spec = WL["nemotron-h-8b"]

    def copies(mb: int) -> list:
        g = build_graph(spec, seq_len=4096, micro_batch=mb)
        return [o for layer in g.body if layer.kind == "mamba" for o in layer.ops if o.name == "mamba_layout_copies"]

    assert copies(1) == []
    (op, *_) = copies(2)
    assert op.bytes == 2 * 2 * 8192 * (18560 + 8192) and op.bwd_bytes_factor == 1.0
    assert op.flop == 0 and op.kernels == op.bwd_kernels == 2


def test_local_global_alternation_and_sink_tokens() -> None:
    # gpt-oss: sliding (window 128) and full attention alternate, starting with sliding
    g = build_graph(WL["gpt-oss-20b"], seq_len=4096)
    assert [(layer.name, layer.count) for layer in g.body] == [("moe_layers_local", 12), ("moe_layers", 12)]
    local = next(o for o in g.body[0].ops if o.kind == "attention")
    full = next(o for o in g.body[1].ops if o.kind == "attention")
    s, w = 4096, 128
    assert local.flop / full.flop == pytest.approx((s * w - w * w / 2) / (s * s / 2))
    # StreamingLLM: k sink tokens stay visible to every query of a window: + s·k pairs
    spec = WL["gpt-oss-20b"].with_(sink_tokens=4)
    sunk = next(o for o in build_graph(spec, seq_len=4096).body[0].ops if o.kind == "attention")
    assert sunk.flop / local.flop == pytest.approx((s * w - w * w / 2 + s * 4) / (s * w - w * w / 2))
    # Llama 4: chunked attention (8192) on three of every four layers, the fourth global
    g = build_graph(WL["llama4-scout"], seq_len=16384)
    assert [(layer.name, layer.count) for layer in g.body] == [("moe_layers_local", 36), ("moe_layers", 12)]
    chunk = next(o for o in g.body[0].ops if o.kind == "attention")
    glob = next(o for o in g.body[1].ops if o.kind == "attention")
    assert chunk.flop / glob.flop == pytest.approx(8192 / 16384)


def test_local_attention_under_cp_exchanges_only_the_window() -> None:
    # gpt-oss window 128 at s 8192 over cp 4: a rank needs the previous rank's last 128 K/V rows,
    # not the whole sequence; Llama 4 chunks of 8192 aligned to cp 2 at s 16384 need nothing
    g = sharded_graph(WL["gpt-oss-20b"], seq_len=8192, cp=4)
    local, full = g.body[0], g.body[1]
    (halo,) = [c for c in local.comms if c.group == "cp"]
    (ring,) = [c for c in full.comms if c.group == "cp"]
    assert (halo.kind, ring.kind) == ("send_recv", "all_gather")
    assert halo.bytes == 2 * 128 * 8 * 64 * 2 and ring.bytes == 2 * 8192 * 8 * 64 * 2
    g = sharded_graph(WL["llama4-scout"], seq_len=16384, cp=2)
    assert not [c for c in g.body[0].comms if c.group == "cp"]
    assert [c.kind for c in g.body[1].comms if c.group == "cp"] == ["all_gather"]


@pytest.mark.parametrize("acc", ["v100-sxm2-32gb", "h100-sxm5-80gb", "host-cpu"])
def test_ssd_and_recurrence_cost_on_every_kind_of_chip(acc: str) -> None:
    # the SSD scan and the fused recurrence run in a format the chip has (V100: no bf16)
    from perfmodel.compute.ops import op_cost
    from perfmodel.hardware.catalog import load_catalog

    chip = load_catalog().accelerator(acc)
    prec = "fp16" if acc == "v100-sxm2-32gb" else "bf16"
    ssd = next(o for o in build_graph(WL["nemotron-h-8b"], seq_len=1024, precision=prec).body[0].ops if o.kind == "ssd")
    rec = next(o for o in build_graph(WL["cpu-lstm"], seq_len=64, precision=prec).layers[0].ops if o.kind == "recurrence")
    for op in (ssd, rec):
        assert 0 < op_cost(chip, op, "fwd").time_s < op_cost(chip, op, "bwd").time_s


def test_ssd_streams_its_bytes_at_the_triton_kernels_rate_by_hand() -> None:
    """Nemotron 3 Nano's scan on one 8K sequence (64 heads of 64, state 128, 8 groups, chunk 128):
    fp32 chunk states S = 64 chunks x 64 x 64 x 128 x 4 B, x / z X = 8192 x 64 x 64 x 2 B, B / C
    BC = 8192 x 8 x 128 x 2 B, CB blocks = 64 x 8 x 128^2 x 4 B; forward 5 X + 4 BC + 4 S + 2 CB =
    1.0066 GB, streamed on B200 at 0.39 of its measured 6.72 TB/s (mamba_ssm's Triton kernels,
    Megatron-LM PR #5829's profile): 384 us plus five launches; a CPU streams at its full rate."""
    from perfmodel.compute.ops import SSD_TRITON_BANDWIDTH, launch_s, op_cost
    from perfmodel.hardware.catalog import load_catalog

    S, X, BC, CB = 64 * 64 * 64 * 128 * 4, 8192 * 64 * 64 * 2, 8192 * 8 * 128 * 2, 64 * 8 * 128**2 * 4
    fwd_bytes = 5 * X + 4 * BC + 4 * S + 2 * CB
    assert fwd_bytes == 1_006_632_960
    ssd = next(o for layer in build_graph(WL["nemotron3-nano"], seq_len=8192).body for o in layer.ops if o.kind == "ssd")
    assert ssd.bytes == fwd_bytes
    b200 = load_catalog().accelerator("b200")
    cost = op_cost(b200, ssd, "fwd")
    assert SSD_TRITON_BANDWIDTH == 0.39
    assert cost.memory_s == pytest.approx(fwd_bytes / (0.39 * b200.hbm_achieved_Bps), rel=1e-12)
    assert cost.memory_s == pytest.approx(384e-6, rel=0.01)
    assert cost.time_s == pytest.approx(cost.memory_s + 5 * launch_s(b200), rel=1e-12)
    cpu = load_catalog().accelerator("host-cpu")
    assert op_cost(cpu, ssd, "fwd").memory_s == pytest.approx(fwd_bytes / cpu.hbm_achieved_Bps, rel=1e-12)
