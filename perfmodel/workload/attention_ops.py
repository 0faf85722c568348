"""One transformer layer's attention block on a rank: Q/K/V projections (or MLA's down / up
projections), RoPE, the attention core (a fused kernel, or the unfused batched matmuls with their
softmax and dropout) and the output projection, with the saved bytes of each; and the causal pairs
of local (sliding-window, chunked) attention. The builder (workload/builder.py) calls it per layer,
with the sizes `Axes` gives a rank."""

from __future__ import annotations

from perfmodel.workload.graph import ACT_BYTES, Axes, Op
from perfmodel.workload.op_make import elementwise_op, gemm_op, replace_op
from perfmodel.workload.spec import ModelSpec


def attention_ops(spec: ModelSpec, b: int, s: int, T: int, ax: Axes, precision: str, attn_impl: str,
                   saved_in: float | None = None, scope: str = "global") -> tuple[list[Op], float]:
    """Q/K/V projections, attention core and output projection; returns (ops, params of the block).

    `saved_in` is what the input projections keep for their weight gradient: the whole input
    (T·h) without sequence parallelism, the local T/tp shard with it (Megatron-LM re-gathers the
    input in the backward pass instead of storing it)."""
    h = spec.hidden
    hl, kvl = ax.heads(spec.num_heads or 1, spec.kv_heads, spec.id)
    ops: list[Op] = []
    bias = spec.bias
    params = 0.0
    if spec.attention == "mla" and spec.mla:
        m = spec.mla
        dqk = m.qk_nope_head_dim + m.qk_rope_head_dim
        dv = m.v_head_dim
        if m.q_lora_rank is None:
            # no compressed query (DeepSeek-V2-Lite): one column-parallel projection to the heads
            ops.append(gemm_op("q_proj", T, hl * dqk, h, precision, saved=saved_in, split="column"))
        else:
            ops += [
                gemm_op("q_down", T, m.q_lora_rank, h, precision, saved=saved_in),
                elementwise_op("q_norm", T * m.q_lora_rank, 1, 1, 5, saved=T * m.q_lora_rank * ACT_BYTES, kind="norm",
                               params=m.q_lora_rank),
                gemm_op("q_up", T, hl * dqk, m.q_lora_rank, precision, split="column"),
            ]
        ops += [
            # same input as the query's projection, kept once
            gemm_op("kv_down", T, m.kv_lora_rank + m.qk_rope_head_dim, h, precision, saved=0.0),
            elementwise_op("kv_norm", T * m.kv_lora_rank, 1, 1, 5, saved=T * m.kv_lora_rank * ACT_BYTES, kind="norm",
                           params=m.kv_lora_rank),
            gemm_op("kv_up", T, hl * (m.qk_nope_head_dim + dv), m.kv_lora_rank, precision, split="column"),
        ]
        params = m.input_params(h, hl)
        d_qk, d_v, q_out = dqk, dv, hl * dv
        rope_el = T * (hl + 1) * m.qk_rope_head_dim  # rope on the q heads' rope part and the one shared k_pe
    else:
        d = spec.dhead
        qkv_n = (hl + 2 * kvl) * d
        ops.append(replace_op(gemm_op("qkv_proj", T, qkv_n, h, precision, bias=bias, saved=saved_in, split="column"),
                            norm_input=True, mm_parts=(hl * d, kvl * d, kvl * d)))
        params = h * qkv_n + (qkv_n if bias else 0)
        d_qk, d_v, q_out = d, d, hl * d
        rope_el = T * (hl + kvl) * d
    if spec.position == "rope":
        ops.append(elementwise_op("rope", rope_el, 1, 1, 3))
    sq, skv = ax.query_len(s), s
    full_fwd = 2.0 * b * hl * sq * skv * (d_qk + d_v)  # QK^T and PV
    causal = spec.causal
    exec_fwd = full_fwd / 2 if causal else full_fwd
    if scope == "local":
        pairs, keys = local_attention_pairs(spec, s)
        # model FLOPs count the dense blocks a blocked local kernel computes (2x the visible
        # causal pairs, as full causal attention counts s² for s²/2 visible pairs); executed half
        full_fwd = 2.0 * b * hl * (2.0 * pairs / ax.cp) * (d_qk + d_v)
        exec_fwd = full_fwd / 2
        skv = keys  # keys one query sees: what the kernel's efficiency depends on
    # one learned logit per local head, added to the softmax denominator (gpt-oss)
    params_sinks = float(hl) if spec.attention_sink_logits else 0.0
    if attn_impl != "unfused":
        # saves Q (q heads), K and V (kv heads) and the fp32 log-sum-exp per row; its output O is
        # the out-proj input, counted there
        saved = b * sq * (hl * d_qk + kvl * (d_qk + d_v)) * ACT_BYTES + b * hl * sq * 4
        io = b * sq * hl * (d_qk + d_v) * ACT_BYTES + b * min(skv, s) * kvl * (d_qk + d_v) * ACT_BYTES
        ops.append(Op("flash_attention", "attention", flop=exec_fwd, bytes=io, model_flop=full_fwd,
                      saved_bytes=saved, bwd_flop_factor=2.5, bwd_bytes_factor=2.5, kernels=1, bwd_kernels=3,
                      attn_core=True, causal=causal, heads=hl, head_dim=d_qk, seq_q=sq, seq_kv=skv, precision=precision,
                      split="heads", attention_kernel=attn_impl,
                      out_bytes=b * sq * hl * d_v * ACT_BYTES + b * hl * sq * 4))
    else:
        # unfused (Megatron before FlashAttention): baddbmm, fused scale-mask-softmax, dropout, bmm
        scores = b * hl * sq * skv
        ops += [
            replace_op(gemm_op("attn_scores", sq, skv, d_qk, precision, weight=False, batch=b * hl, split="heads",
                           saved=b * sq * hl * d_qk * ACT_BYTES * 2), attn_core=True, model_flop=2.0 * b * hl * sq * skv * d_qk),
            elementwise_op("scale_mask_softmax", scores, 1, 1, 5, saved=scores * ACT_BYTES, attn_core=True),
            elementwise_op("attn_dropout", scores, 1, 1.5, 1, saved=scores * (ACT_BYTES + 1), attn_core=True),
            replace_op(gemm_op("attn_values", sq, d_v, skv, precision, weight=False, batch=b * hl, split="heads",
                           saved=b * sq * hl * d_v * ACT_BYTES), attn_core=True, model_flop=2.0 * b * hl * sq * skv * d_v),
        ]
    ops.append(gemm_op("out_proj", T, h, q_out, precision, bias=bias, split="row"))
    params += q_out * h + (h if bias else 0) + params_sinks
    return ops, params


def local_attention_pairs(spec: ModelSpec, s: int) -> tuple[float, int]:
    """(visible causal query-key pairs of one local-attention sequence, keys per query).

    Sliding window w (each query sees itself and the w - 1 keys before it), s >= w:
        pairs = s·w - w²/2  (the continuous count that gives s²/2 at w = s, as full causal does);
    chunked attention, chunk c (queries see their own chunk only, causally):
        pairs = s·c/2;
    k sink tokens (StreamingLLM) add s·k pairs to a sliding window."""
    if spec.attention_chunk is not None:
        c = min(spec.attention_chunk, s)
        return s * c / 2.0, c
    w = min(spec.sliding_window or s, s)
    k = min(spec.sink_tokens, s)
    return s * w - w * w / 2.0 + s * k, w + k


__all__ = ["attention_ops", "local_attention_pairs"]
