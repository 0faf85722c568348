"""DeepSeek-V4's hybrid attention: a sliding window plus compressed keys, either all of them
(heavily compressed attention, HCA) or the top-k an indexer selects (compressed sparse
attention, CSA), with one shared 512-wide K = V head, a low-rank query and a grouped low-rank
output projection (deepseek-ai/DeepSeek-V4-Flash inference/model.py: Attention, Compressor,
Indexer; config compress_ratios, sliding_window, index_topk, index_n_heads, index_head_dim,
q_lora_rank, o_lora_rank, o_groups, head_dim, qk_rope_head_dim).

Per layer with compress ratio r (0: window only), T = b·s tokens, H heads of d, window w,
heads and output groups split over tp (wq_b, wo_a column-parallel, wo_b row-parallel; the
rest replicated, as the reference shards them):
    query     [T, h] x [h, q_lora] -> q_norm -> [T, q_lora] x [q_lora, H·d/tp], per-head rms, RoPE
    kv        [T, h] x [h, d] -> kv_norm, RoPE: one K = V head (MQA)
    compress  (r > 0) two fp32 projections [T, h] x [h, c·d] (kv and gate, c = 2 for the
              overlapping r = 4 windows, else 1), softmax-gated pooling of every r tokens
    indexer   (r = indexed_ratio) q [T, q_lora] x [q_lora, I·e/tp], weights [T, h] x [h, I/tp], its
              own compressor at width e, scores of every query against the causally visible
              compressed keys (relu, weighted over the I heads; summed over tp), top-k
    attention each query against its window and its compressed keys: per visible key
              2·d (QK) + 2·d (PV) FLOPs per head
    output    grouped [T, g, H·d/g] x [H·d/g, o_lora] per group (g/tp groups), then
              [T, g·o_lora/tp] x [g·o_lora, h] summed over tp
Keys per query t (1-based position in its sequence), as the reference's index lists give them:
    window    min(t, w)
    HCA       floor(t / r)                     (blocks completed by t)
    CSA       min(k, floor(t / r))             (the indexer's top-k of those)
so sum_t min(K, floor(t/r)) = sum_{j=1}^{min(K, s//r)} (s - j·r + 1). The reference pads every
query to min(s, w) + min(k, s//r) (CSA) or + s//r (HCA) key slots: model FLOPs count the padded
slots (what a dense reference computes), executed FLOPs the visible keys (a sparse kernel skips
the padding). The indexer's score matmul is counted in full as model FLOPs and causally (half)
as executed, as causal attention is.
"""

from __future__ import annotations

from perfmodel import precision as registry
from perfmodel.errors import LayoutError
from perfmodel.workload.graph import ACT_BYTES, Comm, Op
from perfmodel.workload.spec import ModelSpec

FP32 = 4


def window_keys(s: int, w: int) -> tuple[float, int]:
    """(sum over queries of the keys in the window, slots per query)."""
    if s <= w:
        return s * (s + 1) / 2.0, s
    return w * (w + 1) / 2.0 + (s - w) * w, w


def compressed_keys(s: int, r: int, k: int | None) -> tuple[float, int]:
    """(sum over queries of the visible compressed keys, slots per query) for ratio r, top-k k
    (None: all compressed keys, HCA)."""
    if r <= 0:
        return 0.0, 0
    n = s // r
    top = n if k is None else min(k, n)
    return float(sum(s - j * r + 1 for j in range(1, top + 1))), top


def _linear(name: str, tokens: int, n: int, k: int, precision: str, saved: float | None = None,
            batch: int = 1) -> Op:
    el = registry.get(precision).weight_bytes
    return Op(name=name, kind="gemm", flop=2.0 * tokens * n * k * batch,
              bytes=batch * (tokens * k * ACT_BYTES + tokens * n * ACT_BYTES + k * n * el), m=tokens, n=n, k=k,
              batch=batch, precision=precision, weight_params=float(batch * k * n),
              saved_bytes=(tokens * k * ACT_BYTES * batch) if saved is None else saved, kernels=1, bwd_kernels=2)


def _elementwise(name: str, elems: float, flop_per_el: float = 2.0, saved: float = 0.0, kind: str = "elementwise",
                 params: float = 0.0, rw: float = 2.0) -> Op:
    return Op(name=name, kind=kind, flop=flop_per_el * elems, bytes=rw * elems * ACT_BYTES,  # type: ignore[arg-type]
              saved_bytes=saved, bwd_flop_factor=1.0, bwd_bytes_factor=2.0, weight_params=params)


def compressor_params(spec: ModelSpec, r: int, width: int) -> float:
    """ape [r, c·width] + kv and gate [h, c·width] + norm [width], c = 2 when r overlaps (r = 4)."""
    c = 2 if r == 4 else 1
    return float(r * c * width + 2 * spec.hidden * c * width + width)


def csa_params(spec: ModelSpec, r: int, tp: int = 1) -> float:
    """Parameters of one DeepSeek-V4 attention block with compress ratio r on one of tp ranks."""
    a = spec.csa
    assert a is not None
    h, H, d = spec.hidden, spec.num_heads or 1, a.head_dim
    p = (H / tp  # attn_sink
         + h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * H * d / tp  # wq_a, q_norm, wq_b
         + h * d + d  # wkv, kv_norm
         + (H * d // a.o_groups) * a.o_groups * a.o_lora_rank / tp + a.o_groups * a.o_lora_rank * h / tp)  # wo_a, wo_b
    if r:
        p += compressor_params(spec, r, d)
    if r and r == a.indexed_ratio:
        p += (a.q_lora_rank * a.index_heads * a.index_head_dim + h * a.index_heads) / tp
        p += compressor_params(spec, r, a.index_head_dim)
    return float(p)


def csa_attention_ops(spec: ModelSpec, r: int, b: int, s: int, T: int, tp: int, cp: int, precision: str,
                      saved_in: float | None) -> tuple[list[Op], float, list[Comm]]:
    """(ops, parameters on this rank, collectives) of one attention block with ratio r."""
    a = spec.csa
    assert a is not None
    if cp > 1:
        raise LayoutError(f"cp {cp}: context parallelism of DeepSeek-V4's compressed sparse attention ({spec.id}) "
                          "is not modelled; valid cp: 1")
    h, H, d = spec.hidden, spec.num_heads or 1, a.head_dim
    for what, n in (("num_heads", H), ("csa.o_groups", a.o_groups), ("csa.index_heads", a.index_heads)):
        if n % tp:
            raise LayoutError(f"tp {tp} must divide {what} {n} of {spec.id}; "
                              f"valid tp: {', '.join(str(t) for t in range(1, n + 1) if n % t == 0)}")
    hl, gl, il = H // tp, a.o_groups // tp, a.index_heads // tp
    ql, rd = a.q_lora_rank, a.rope_head_dim
    ops: list[Op] = [
        _linear("q_down", T, ql, h, precision, saved=saved_in),
        _elementwise("q_norm", T * ql, 5, saved=T * ql * ACT_BYTES, kind="norm", params=ql),
        _linear("q_up", T, hl * d, ql, precision),
        _elementwise("q_head_norm_rope", T * hl * d, 5, saved=T * hl * d * ACT_BYTES),
        _linear("kv_proj", T, d, h, precision, saved=0.0),  # same input as q_down, kept once
        _elementwise("kv_norm_rope", T * d, 5, saved=T * d * ACT_BYTES, kind="norm", params=d),
    ]
    comms: list[Comm] = []
    if r:
        c = 2 if r == 4 else 1
        ops += [_linear("compress_kv", T, c * d, h, "fp32", saved=0.0),
                _linear("compress_gate", T, c * d, h, "fp32", saved=0.0),
                # softmax over each block's r (or 2r overlapping) rows, weighted sum, norm, RoPE
                _elementwise("compress_pool", T * c * d, 6, saved=T * c * d * FP32)]
    if r and r == a.indexed_ratio:
        e, n = a.index_head_dim, s // r
        c = 2 if r == 4 else 1
        full = 2.0 * b * s * n * il * e  # the reference's einsum over every compressed key
        visible, _ = compressed_keys(s, r, None)
        ops += [_linear("idx_q", T, il * e, ql, precision, saved=0.0),
                _linear("idx_weights", T, il, h, "bf16", saved=0.0),
                _linear("idx_compress_kv", T, c * e, h, "fp32", saved=0.0),
                _linear("idx_compress_gate", T, c * e, h, "fp32", saved=0.0),
                _elementwise("idx_compress_pool_rotate", T * (c * e + il * e), 8),
                # relu(q·k) weighted over the index heads, one fp32 score per (query, compressed key)
                Op("idx_score", "bmm", flop=2.0 * b * visible * il * e, model_flop=full,
                   bytes=(T * il * e + b * n * e) * ACT_BYTES + b * s * n * FP32, m=s, n=n, k=e, batch=b * il,
                   saved_bytes=(T * il * e + b * n * e) * ACT_BYTES, kernels=1, bwd_kernels=2),
                _elementwise("idx_topk", b * s * n, 4, rw=2 * FP32 / ACT_BYTES)]
        # top-k passes no gradient: the indexer learns through its own loss (DeepSeek-V3.2's
        # KL objective against the attention distribution); its backward is the score matmul's
        # (dq, dk), the target distribution it needs is not modelled
        if tp > 1:
            comms.append(Comm("idx_score_allreduce", "all_reduce", "tp", b * s * n * FP32, 1, 0))
    win_pairs, win_slots = window_keys(s, a.window)
    top = a.index_topk if (r and r == a.indexed_ratio) else None
    cmp_pairs, cmp_slots = compressed_keys(s, r, top)
    per_key = 2.0 * 2 * d * hl  # QK and PV over the head dim, every local head
    slots = win_slots + cmp_slots
    io = b * s * hl * d * ACT_BYTES * 2 + b * (s + (s // r if r else 0)) * d * ACT_BYTES
    saved = b * s * (hl * d + d) * ACT_BYTES + b * hl * s * FP32
    ops.append(Op("sparse_attention", "attention", flop=per_key * b * (win_pairs + cmp_pairs),
                  model_flop=per_key * b * s * slots, bytes=io, saved_bytes=saved, bwd_flop_factor=2.5,
                  bwd_bytes_factor=2.5, kernels=1, bwd_kernels=3, attn_core=True, causal=False, heads=hl,
                  head_dim=d, seq_q=s, seq_kv=slots, precision=precision,
                  out_bytes=b * s * hl * d * ACT_BYTES + b * hl * s * FP32))
    ops += [_elementwise("o_rope", T * hl * rd, 3),
            _linear("o_group_proj", T, a.o_lora_rank, H * d // a.o_groups, precision, batch=gl),
            _linear("out_proj", T, h, gl * a.o_lora_rank, precision)]
    return ops, csa_params(spec, r, tp), comms


__all__ = ["compressed_keys", "compressor_params", "csa_attention_ops", "csa_params", "window_keys"]
