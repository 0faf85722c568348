"""Forward FLOPs of the builder's graph against torch.utils.flop_counter.FlopCounterMode on the
equivalent torch module (tests/torch_reference.py).

FlopCounterMode counts matmuls and convolutions only (2·m·n·k; biases, norms, activations,
softmax count 0) and counts attention over the full score matrix, so each test compares the
graph's matmul ops under the model-FLOP convention (`Op.mflop`). The counts agree exactly.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch_reference as R  # noqa: E402  (pytest puts tests/ on sys.path: rootdir-relative import)

from perfmodel.workload.builder import build_graph  # noqa: E402
from perfmodel.workload.catalog import load_workloads  # noqa: E402
from perfmodel.workload.graph import Layer  # noqa: E402
from perfmodel.workload.spec import ModelSpec  # noqa: E402

WL = load_workloads()
MATMUL = ("gemm", "bmm", "attention", "recurrence")


def mm(layers: tuple[Layer, ...], skip: tuple[str, ...] = ()) -> float:
    return sum(layer.count * sum(o.mflop for o in layer.ops if o.kind in MATMUL and not o.name.startswith(skip))
               for layer in layers)


def one(g: object, kind: str) -> Layer:
    return next(layer for layer in g.layers if layer.kind == kind)  # type: ignore[attr-defined]


def test_whole_gpt2_model() -> None:
    # a 2-layer GPT-2 124M (full width, vocab and context): embeddings, blocks, tied head
    spec = WL["gpt2-124m"].with_(num_layers=2)
    b, s = 2, 1024
    with torch.device("meta"):
        model = R.GPT(2, 768, 12, 3072, 50257, 1024)
        idx = torch.zeros(b, s, dtype=torch.long)
    assert R.count_flop(model, idx) == mm(build_graph(spec, micro_batch=b, seq_len=s).layers)


def test_gpt_block_gpt3_175b_width() -> None:
    b, s = 1, 2048
    with torch.device("meta"):
        blk, x = R.GPTBlock(12288, 96, 49152), torch.zeros(b, s, 12288)
    g = build_graph(WL["gpt3-175b"], micro_batch=b, seq_len=s)
    assert R.count_flop(blk, x) == mm((one(g, "transformer"),)) / 96 == 24 * b * s * 12288**2 + 4 * b * s * s * 12288


def test_llama_block_gqa_swiglu() -> None:
    b, s = 1, 2048
    with torch.device("meta"):
        blk, x = R.LlamaBlock(4096, 32, 8, 14336), torch.zeros(b, s, 4096)
    g = build_graph(WL["llama3-8b"], micro_batch=b, seq_len=s)
    layer = one(g, "transformer")
    assert R.count_flop(blk, x) == mm((layer,)) / layer.count


@pytest.mark.parametrize("wid, shared", [("mixtral-8x7b", 0), ("deepseek-v3", 1)])
def test_moe_ffn_router_experts_shared(wid: str, shared: int) -> None:
    spec = WL[wid]
    h, E, k, f = spec.hidden, spec.num_experts, spec.top_k, spec.moe_ffn_hidden
    assert E and k and f
    b, s = 1, 1024  # T·k divisible by E: balanced dispatch is exact
    with torch.device("meta"):
        moe, x = R.MoEFFN(h, E, k, f, shared), torch.zeros(b, s, h)
    layer = one(build_graph(spec, micro_batch=b, seq_len=s), "moe")
    ffn = sum(o.mflop for o in layer.ops if o.kind in MATMUL and o.name.startswith(("router", "expert", "shared")))
    assert R.count_flop(moe, x) == ffn


def test_mla_attention() -> None:
    spec = WL["deepseek-v3"]
    m = spec.mla
    assert m is not None
    b, s = 1, 1024
    with torch.device("meta"):
        attn = R.MLAAttention(7168, 128, m.q_lora_rank, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim)
        x = torch.zeros(b, s, 7168)
    layer = one(build_graph(spec, micro_batch=b, seq_len=s), "moe")
    attn_ops = sum(o.mflop for o in layer.ops if o.kind in MATMUL
                   and o.name in ("q_down", "q_up", "kv_down", "kv_up", "flash_attention", "out_proj"))
    assert R.count_flop(attn, x) == attn_ops


def test_lstm_unrolled_matches_nn_lstm_and_graph() -> None:
    spec = WL["lstm-deepar"]
    b, s = 3, 24  # a short window keeps the unrolled reference fast; FLOPs scale with s exactly
    torch.manual_seed(0)
    ref = R.LSTMForecaster(spec.input_size, spec.hidden, spec.num_layers, spec.output_size)
    x = torch.randn(b, s, spec.input_size)
    unrolled = R.UnrolledLSTMForecaster(ref)
    with torch.no_grad():
        torch.testing.assert_close(unrolled(x), ref(x), rtol=1e-4, atol=1e-5)
    assert R.count_flop(unrolled, x) == mm(build_graph(spec, micro_batch=b, seq_len=s).layers)


def test_tcn() -> None:
    spec = WL["tcn-seqmnist"]
    b, s = 4, 784
    with torch.device("meta"):
        model = R.TCN(spec.input_size, spec.hidden, spec.num_layers, spec.kernel_size, spec.output_size)
        x = torch.zeros(b, spec.input_size, s)
    assert R.count_flop(model, x) == mm(build_graph(spec, micro_batch=b, seq_len=s).layers)


def test_mlp() -> None:
    spec = WL["mlp-mnist"]
    with torch.device("meta"):
        model, x = R.MLP(784, 512, 2, 10), torch.zeros(128, 784)
    assert R.count_flop(model, x) == mm(build_graph(spec, micro_batch=128).layers)


def test_patchtst() -> None:
    spec = WL["patchtst-electricity"]
    b = 2
    with torch.device("meta"):
        model = R.PatchTST(321, 336, 16, 8, 128, 16, 256, 3, 96)
        x = torch.zeros(b, 321, 336)
    assert R.count_flop(model, x) == mm(build_graph(spec, micro_batch=b).layers)


def test_reference_params_match_graph() -> None:
    # the torch modules hold the parameters the builder counts (LSTM: torch's two bias vectors)
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    with torch.device("meta"):
        assert n(R.GPT(12, 768, 12, 3072, 50257, 1024)) == build_graph(WL["gpt2-124m"]).total_params_full()
        assert n(R.LlamaBlock(4096, 32, 8, 14336)) == one(build_graph(WL["llama3-8b"], seq_len=128), "transformer").params_full
        assert n(R.TCN(1, 25, 8, 7, 10)) == build_graph(WL["tcn-seqmnist"]).total_params_full()
        patchtst = R.PatchTST(321, 336, 16, 8, 128, 16, 256, 3, 96)
        # + the graph's final norm (2·h), which the reference PatchTST does not have
        assert n(patchtst) + 2 * 128 == build_graph(WL["patchtst-electricity"]).total_params_full()
    assert n(R.LSTMForecaster(44, 40, 2, 24)) == build_graph(WL["lstm-deepar"]).total_params_full()


def _small_hybrid(**changes: object) -> ModelSpec:
    base = dict(id="t-hybrid", name="tiny hybrid", family="dense", source="test fixture", num_layers=4,
                layer_pattern="M*M-", hidden=256, ffn_hidden=512, num_heads=4, num_kv_heads=2, vocab=128,
                norm="rmsnorm", activation="squared_relu", position="none", bias=False, attention="gqa",
                mamba={"num_heads": 8, "head_dim": 64, "state_dim": 32, "num_groups": 2, "conv_kernel": 4, "chunk_size": 64})
    return ModelSpec.model_validate({**base, **changes})


def _mamba_mixer_flop(spec: ModelSpec, b: int, s: int) -> tuple[int, float, Layer]:
    """(FlopCounterMode on the reference Mamba-2 mixer, our mixer ops' FLOPs, our mamba layer)."""
    m = spec.mamba
    assert m is not None
    with torch.device("meta"):
        mixer = R.Mamba2Mixer(spec.hidden, m.num_heads, m.head_dim, m.state_dim, m.num_groups, m.conv_kernel, m.chunk_size)
        x = torch.zeros(b, s, spec.hidden)
    layer = one(build_graph(spec, micro_batch=b, seq_len=s), "mamba")
    ours = sum(o.flop for o in layer.ops if o.name in ("mamba_in_proj", "mamba_conv1d", "mamba_ssd", "mamba_out_proj"))
    return R.count_flop(mixer, x), ours, layer


def test_mamba2_mixer_flop_matches_flop_counter() -> None:
    # in_proj, depthwise conv1d (FlopCounterMode: 2·K per output), the four SSD matmul terms, out_proj
    spec = _small_hybrid()
    b, s = 2, 256
    theirs, ours, layer = _mamba_mixer_flop(spec, b, s)
    assert theirs == ours
    # by hand: SSD 2·b·s·(Q·N·G + Q·P·H + 2·N·P·H)
    ssd = next(o for o in layer.ops if o.kind == "ssd")
    assert ssd.flop == 2 * b * s * (64 * 32 * 2 + 64 * 64 * 8 + 2 * 32 * 64 * 8)


def test_nemotron_h_mamba_layer_at_full_size() -> None:
    theirs, ours, _ = _mamba_mixer_flop(WL["nemotron-h-8b"], 1, 1024)
    assert theirs == ours


@pytest.mark.parametrize("chunked", [False, True])
def test_local_attention_flop_matches_blocked_reference(chunked: bool) -> None:
    # model FLOPs of a local layer = FlopCounterMode on the blocked reference: window w -> query
    # block i against key blocks i-1, i: 2·s·w - w² score entries (chunk c: s·c); executed FLOPs
    # are half (the causal triangle inside the dense blocks is masked, as full causal counts s²/2)
    h, heads, kvh, s, b, w = 256, 4, 2, 512, 2, 128
    local = {"attention_chunk": w} if chunked else {"sliding_window": w}
    spec = ModelSpec(id="t-local", name="t", family="dense", source="test fixture", num_layers=2, hidden=h,
                     ffn_hidden=512, num_heads=heads, num_kv_heads=kvh, vocab=128, norm="rmsnorm", activation="swiglu",
                     position="none", bias=False, attention="gqa", global_every=2, **local)  # type: ignore[arg-type]
    g = build_graph(spec, micro_batch=b, seq_len=s)
    assert [(layer.name, layer.count) for layer in g.body] == [("layers_local", 1), ("layers", 1)]
    with torch.device("meta"):
        attn, x = R.LocalGQAAttention(h, heads, kvh, w, chunked), torch.zeros(b, s, h)
    layer = one(g, "transformer")  # the first body layer: the local one
    ops = {o.name: o for o in layer.ops}
    assert R.count_flop(attn, x) == sum(ops[n].mflop for n in ("qkv_proj", "flash_attention", "out_proj"))
    d = h // heads
    entries = s * w if chunked else 2 * s * w - w * w
    assert ops["flash_attention"].mflop == 2 * b * heads * entries * 2 * d
    assert ops["flash_attention"].flop == ops["flash_attention"].mflop / 2
    assert ops["flash_attention"].seq_kv == w  # keys per query: what the kernel's rate depends on
