"""from_torch: any nn.Module traced on the meta device into a Graph, checked against FlopCounterMode
and against the builder's graph of the equivalent ModelSpec."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from perfmodel.workload.builder import build_graph
from perfmodel.workload.spec import ModelSpec
from perfmodel.workload.torch_import import (
    TorchImportError,
    UnsupportedOpWarning,
    estimate_module_cli,
    flop_counter_flop,
    from_torch,
    matmul_model_flop,
    trace_module,
)

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import torch_import_models as M  # noqa: E402

CASES = {
    "gpt": (lambda: M.GPT(layers=2, h=64, heads=4, vocab=512, seq=128), torch.zeros(2, 128, dtype=torch.long)),
    "lstm": (lambda: M.LSTMForecaster(features=8, hidden=32, layers=2), torch.zeros(4, 16, 8)),
    "tcn": (lambda: M.TCN(features=8, channels=32, levels=3, k=3), torch.zeros(4, 64, 8)),
    "mlp": (M.build_mlp, torch.zeros(32, 16)),
    "llama": (M.Llama, torch.zeros(2, 64, dtype=torch.long)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_flops_match_flop_counter_and_params_match_module(case: str) -> None:
    factory, x = CASES[case]
    graph = from_torch(factory, x)
    ref = flop_counter_flop(factory, x)
    assert ref > 0
    assert matmul_model_flop(graph) == pytest.approx(ref, rel=0.01)
    with torch.device("meta"):
        n_params = sum(p.numel() for p in factory().parameters())
    assert graph.total_params_full() == n_params
    assert all(layer.fwd_flop >= 0 and all(o.bytes > 0 for o in layer.ops) for layer in graph.layers)


def test_gpt_layers_and_ops() -> None:
    h, s, b, V = 64, 128, 2, 512
    graph = from_torch(lambda: M.GPT(layers=3, h=h, heads=4, vocab=V, seq=s), torch.zeros(b, s, dtype=torch.long))
    kinds = [layer.kind for layer in graph.layers]
    assert kinds[0] == "embedding" and kinds[-1] == "head"
    body = graph.body
    assert len(body) == 1 and body[0].count == 3 and body[0].kind == "transformer"  # blocks.0..2 collapsed
    ops = {o.name: o for o in body[0].ops}
    T = b * s
    qkv = ops["qkv.addmm"]
    assert (qkv.kind, qkv.m, qkv.n, qkv.k) == ("gemm", T, 3 * h, h)
    assert qkv.weight_params == h * 3 * h + 3 * h
    attn = ops["scaled_dot_product_attention"]
    # QK^T and PV: 4·b·s²·h in full, half executed under the causal mask
    assert attn.model_flop == 4 * b * s * s * h and attn.flop == 2 * b * s * s * h
    assert attn.causal and attn.heads == 4 and attn.head_dim == 16 and attn.seq_q == s
    assert ops["ln1.native_layer_norm"].kind == "norm" and ops["ln1.native_layer_norm"].weight_params == 2 * h
    # 2 bytes per bf16 element: gelu reads and writes [T, 4h]
    assert ops["gelu"].bytes == 2 * T * 4 * h * 2
    lookup = [o for layer in graph.layers for o in layer.ops if o.kind == "embedding"]
    assert len(lookup) == 2 and lookup[0].weight_params == V * h
    # saved activations of a GPT layer without dropout are about 34·s·b·h bytes (Korthikanti Table 2)
    assert 30 * s * b * h < body[0].saved_bytes < 38 * s * b * h


def test_gpt_matches_builder_graph_of_equivalent_spec() -> None:
    L, h, heads, V, s, b = 2, 256, 4, 512, 128, 2
    spec = ModelSpec(id="tiny-gpt", name="tiny GPT", family="dense", source="test fixture", num_layers=L, hidden=h,
                     ffn_hidden=4 * h, num_heads=heads, vocab=V, seq_len=s)
    native = build_graph(spec, micro_batch=b, seq_len=s)
    idx = torch.zeros(b, s, dtype=torch.long)
    traced = from_torch(lambda: M.GPT(L, h, heads, V, s), (idx, idx))  # with targets: the loss too
    assert traced.total_params_full() == native.total_params_full()
    native_mm = sum(layer.count * o.mflop for layer in native.layers for o in layer.ops
                    if o.kind in ("gemm", "bmm", "attention"))
    assert matmul_model_flop(traced) == pytest.approx(native_mm, rel=1e-9)
    # element-wise FLOP conventions differ a little; the totals agree within 2%
    assert traced.fwd_model_flop() == pytest.approx(native.fwd_model_flop(), rel=0.02)
    assert traced.fwd_flop() == pytest.approx(native.fwd_flop(), rel=0.02)
    assert traced.train_flop() == pytest.approx(native.train_flop(), rel=0.02)
    assert traced.tokens == native.tokens and traced.micro_batch == b and traced.seq_len == s


def test_lstm_is_one_fused_recurrence() -> None:
    b, s, f, H = 4, 16, 8, 32
    graph = from_torch(lambda: M.LSTMForecaster(features=f, hidden=H, layers=1), torch.zeros(b, s, f))
    lstm = graph.layers[0]
    # the input projections of all steps: one GEMM [b·s, f] x [f, 4H]
    (proj,) = (o for o in lstm.ops if o.kind == "gemm")
    assert (proj.m, proj.n, proj.k, proj.repeat, proj.kernels) == (b * s, 4 * H, f, 1, 1)
    # h_{t-1} [b, H] x [H, 4H] s times, one fused call: one kernel of host time, weights counted once
    (rec,) = (o for o in lstm.ops if o.kind == "recurrence")
    assert (rec.m, rec.n, rec.k, rec.repeat, rec.kernels) == (b, 4 * H, H, s, 1)
    assert rec.flop == 2 * b * 4 * H * H * s and rec.weight_params == 4 * H * H + 4 * H
    # the per-step gate math is fused into the recurrence: no launches of its own
    assert all(o.kernels == 0 for o in lstm.ops if o.kind == "elementwise" and o.repeat == s)
    assert graph.layers[-1].name == "head"
    assert (graph.micro_batch, graph.seq_len, graph.tokens) == (b, s, b * s)


def test_tcn_conv_as_implicit_gemm() -> None:
    b, s, f, C, k = 4, 64, 8, 32, 3
    graph = from_torch(lambda: M.TCN(features=f, channels=C, levels=2, k=k), torch.zeros(b, s, f))
    first = graph.layers[0]
    assert first.name == "network.0"
    conv1 = next(o for o in first.ops if o.name == "conv1.convolution")
    pad = (k - 1) * 1
    assert (conv1.m, conv1.n, conv1.k) == (b * (s + pad), C, f * k)  # padded output, sliced to s after
    down = next(o for o in first.ops if o.name == "down.convolution")
    assert (down.m, down.n, down.k) == (b * s, C, f)


def test_llama_gqa_rmsnorm_swiglu_match_builder() -> None:
    L, h, heads, kvh, f, V, s, b = 2, 128, 8, 2, 352, 512, 64, 2
    spec = ModelSpec(id="tiny-llama", name="tiny Llama", family="dense", source="test fixture", num_layers=L,
                     hidden=h, ffn_hidden=f, num_heads=heads, num_kv_heads=kvh, vocab=V, seq_len=s, norm="rmsnorm",
                     activation="swiglu", position="none", bias=False, attention="gqa")
    native = build_graph(spec, micro_batch=b, seq_len=s)
    traced = from_torch(lambda: M.Llama(L, h, heads, kvh, f, V), torch.zeros(b, s, dtype=torch.long))
    assert traced.total_params_full() == native.total_params_full()
    native_mm = sum(layer.count * o.mflop for layer in native.layers for o in layer.ops
                    if o.kind in ("gemm", "bmm", "attention"))
    assert matmul_model_flop(traced) == pytest.approx(native_mm, rel=1e-9)
    norms = [o for layer in traced.body for o in layer.ops if o.kind == "norm"]
    assert [o.name for o in norms] == ["norm1.rms_norm", "norm2.rms_norm"]  # one op each, not decomposed
    attn = next(o for layer in traced.body for o in layer.ops if o.kind == "attention")
    assert attn.bytes == 2 * b * s * (heads + kvh) * 2 * (h // heads)  # Q, O and K, V of the kv heads


def test_mlp_has_no_sequence() -> None:
    graph = from_torch(M.build_mlp, torch.zeros(32, 16))
    assert (graph.micro_batch, graph.seq_len, graph.tokens) == (32, 1, 32)


def test_unknown_op_is_kept_and_warned() -> None:
    with pytest.warns(UnsupportedOpWarning, match="topk"):
        graph = from_torch(M.WithTopK, torch.zeros(4, 16))
    ops = [o for layer in graph.layers for o in layer.ops]
    topk = [o for o in ops if "unsupported.topk" in o.name]
    assert len(topk) == 1 and topk[0].kind == "elementwise" and topk[0].bytes > 0
    res = trace_module(M.WithTopK, torch.zeros(4, 16))
    assert res.unsupported == {"topk": 1} and any("topk" in n for n in res.notes)


def test_real_module_is_not_touched() -> None:
    mlp = M.build_mlp()
    graph = from_torch(mlp, torch.randn(32, 16))
    assert all(p.device.type == "cpu" for p in mlp.parameters())
    assert graph.total_params_full() == sum(p.numel() for p in mlp.parameters())


def test_7b_traces_on_meta() -> None:
    res = trace_module(lambda: M.GPT(layers=32, h=4096, heads=32, vocab=50304, seq=2048),
                       torch.zeros(1, 2048, dtype=torch.long))
    L, h, V, s = 32, 4096, 50304, 2048
    assert res.graph.total_params_full() == L * (12 * h * h + 13 * h) + 2 * V * h + s * h + 2 * h
    assert [layer.count for layer in res.graph.body] == [32]


def test_cli_hook_file_and_module_specs() -> None:
    g = estimate_module_cli(f"{HERE / 'torch_import_models.py'}:build_gpt")
    assert g.model_id == "build_gpt" and g.tokens == 2 * 128
    g2 = estimate_module_cli("torch_import_models:build_mlp", example_shape=(32, 16))
    assert g2.total_params_full() == 16 * 64 + 64 + 64 * 64 + 64 + 64 + 1
    with pytest.raises(TorchImportError, match="example shape"):
        estimate_module_cli("torch_import_models:build_mlp")
    with pytest.raises(TorchImportError, match="has no 'nope'"):
        estimate_module_cli("torch_import_models:nope")
    with pytest.raises(TorchImportError, match=r"package\.module:factory"):
        estimate_module_cli("torch_import_models")


def test_data_dependent_forward_raises_a_clear_error() -> None:
    class Branchy(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if x.sum() > 0 else x

    with pytest.raises(TorchImportError, match="data-dependent"):
        from_torch(Branchy(), torch.zeros(2, 2))


def test_hf_style_module() -> None:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=512, n_positions=128)

    def factory() -> nn.Module:
        return transformers.GPT2LMHeadModel(cfg)

    x = torch.zeros(2, 128, dtype=torch.long)
    graph = from_torch(factory, x)
    assert matmul_model_flop(graph) == pytest.approx(flop_counter_flop(factory, x), rel=0.01)
