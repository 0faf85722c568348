"""The Mamba-2 mixer (Dao & Gu 2024, 'Transformers are SSMs', Sec. 6-7) as graph ops.

With T tokens on this rank, hidden h, H heads of P channels (d_inner = H·P), G groups of B / C
with state N, conv kernel K and chunk Q (all per tensor-parallel rank: H, G / tp):
    in_proj   [T, h] x [h, 2·d_inner + 2·G·N + H]       (z, x, B, C, dt)
    conv1d    depthwise causal over x, B, C: 2·T·(d_inner + 2·G·N)·K FLOP
    SSD scan  chunked state-space dual (Listing 1 of the paper; the mamba_ssm Triton kernels):
              CBᵀ per group and chunk          2·T·Q·N·G
              (L ∘ CBᵀ)·X per head (diagonal)  2·T·Q·P·H
              chunk states Bᵀ·X per head       2·T·N·P·H
              state -> output C·h per head     2·T·N·P·H
              the state passing between chunks is a scan of T/Q·H·N·P elements (no matmul)
    gated RMSNorm of y·silu(z), then out_proj [T, d_inner] x [d_inner, h].
Megatron-Core shards heads and groups over tensor parallelism (in_proj column-, out_proj
row-parallel), so a Mamba layer needs the same tp collectives as an attention block. Under context
parallelism (Megatron-Core's Mamba CP) the projections run on the local T = b·s/cp tokens and an
all-to-all over cp turns the sequence split into a head split around the conv and the scan (each
cp rank scans the whole sequence for H/(tp·cp) heads), and back before out_proj.
"""

from __future__ import annotations

from perfmodel.workload.graph import ACT_BYTES, Axes, Op
from perfmodel.workload.op_make import elementwise_op, gemm_op
from perfmodel.workload.spec import ModelSpec

SSD_FWD_KERNELS = 5  # mamba_ssm chunk_cumsum, bmm_chunk (CBᵀ), chunk_state, state_passing, chunk_scan
# mamba_ssm's backward (ops/triton/ssd_combined.py _mamba_chunk_scan_combined_bwd @ e9594ce) first
# recomputes chunk_cumsum, CBᵀ, the chunk states and their passing (4 kernels), then runs
# chunk_scan_bwd_dz, _dstates, state_passing_bwd, chunk_scan_chunk_state_bwd_dx, chunk_state_bwd_db,
# chunk_scan_bwd_dC, chunk_scan_bwd_dcb, bmm_chunk_bwd twice, chunk_scan_bwd_ddAcs_stable and
# chunk_cumsum_bwd (11)
SSD_BWD_KERNELS = 15


def ssd_flop(b: int, s: int, heads: int, head_dim: int, state: int, groups: int, chunk: int) -> float:
    """Forward matmul FLOPs of the chunked SSD scan on b sequences of length s (padded to whole
    chunks): 2·b·s'·(Q·N·G + Q·P·H + 2·N·P·H), s' = ceil(s / Q)·Q."""
    q = min(chunk, s)
    s_pad = -(-s // q) * q
    return 2.0 * b * s_pad * (q * state * groups + q * head_dim * heads + 2 * state * head_dim * heads)


def ssd_bwd_flop(b: int, s: int, heads: int, head_dim: int, state: int, groups: int, chunk: int) -> float:
    """Backward matmul FLOPs of the chunked SSD scan as mamba_ssm runs it (SSD_BWD_KERNELS): the
    recomputed CBᵀ (2·Q·N·G) and chunk states (2·N·P·H), then dstates = Cᵀ·dout, dx (intra-chunk
    (CBᵀ)ᵀ·dout and B·dstates), dB = x·dstatesᵀ, dC = dout·statesᵀ (2·N·P·H each), dCB =
    dout·xᵀ (2·Q·P·H), its two bmm backward passes (2 x 2·Q·N·G) and ddA (2·Q·P·H), per token:
    2·s'·(3·Q·N·G + 3·Q·P·H + 5·N·P·H), about 2.7x the forward at Nemotron's shapes."""
    q = min(chunk, s)
    s_pad = -(-s // q) * q
    return 2.0 * b * s_pad * (3 * q * state * groups + 3 * q * head_dim * heads + 5 * state * head_dim * heads)


def ssd_bytes(b: int, s: int, heads: int, head_dim: int, state: int, groups: int, chunk: int) -> tuple[float, float]:
    """(forward, backward) HBM bytes of the chunked SSD scan, pass by pass over the kernels above:
    bf16 x / z / out / their gradients (X = b·s·H·P·2 B each), B and C (BC = b·s·G·N·2 each), fp32
    chunk states and their gradients (S = b·(s/Q)·H·P·N·4), fp32 CBᵀ blocks (CB = b·(s/Q)·G·Q²·4).
    Forward: x twice, z once, out and the pre-gate out_x written, B and C twice each, S written by
    chunk_state, read and written by the passing, read by chunk_scan (4 S), CB written and read.
    Backward: the recompute (x, B twice, C, S three times, CB once), then dout, z, out read and dz,
    dout written by bwd_dz, dS written by dstates, read and written by its passing with S (3 S-sized
    passes), read by dx and db, S read by dC, x read by dx, db, dcb and ddA, CB by dx and ddA, dCB
    written and read twice, dx, dB, dC written: 12 X, 10 BC, 10 S, 6 CB."""
    q = min(chunk, s)
    chunks = b * -(-s // q)
    X = b * s * heads * head_dim * ACT_BYTES
    BC = b * s * groups * state * ACT_BYTES
    S = chunks * heads * head_dim * state * 4.0
    CB = chunks * groups * q * q * 4.0
    return 5 * X + 4 * BC + 4 * S + 2 * CB, 12 * X + 10 * BC + 10 * S + 6 * CB


def mamba2_params(spec: ModelSpec) -> float:
    """Unsharded parameters of one Mamba-2 mixer (without its pre-norm): in_proj, conv1d weight
    and bias, dt_bias, A_log and D per head, the gated norm's weight, out_proj."""
    m = spec.mamba
    assert m is not None
    h = spec.hidden
    in_n = 2 * m.d_inner + 2 * m.num_groups * m.state_dim + m.num_heads
    return h * in_n + m.conv_dim * m.conv_kernel + m.conv_dim + 3 * m.num_heads + m.d_inner + m.d_inner * h


def layout_copies(b: int, tokens: int, in_width: int, out_width: int) -> list[Op]:
    """Megatron-Core's mixer runs the scan batch-major: it copies the in_proj output [s, b, .] to
    [b, s, .] and the scan output back (megatron/core/ssm/mamba_mixer.py _ssm_training:
    rearrange(zxBCdt, "l b d -> b l d").contiguous(), rearrange(y, "b l d -> l b d").contiguous()),
    and autograd copies both gradients back the same way. At micro-batch 1 each rearrange is a view
    that is already contiguous: no copy. One read and one write per element, two kernels each pass."""
    if b <= 1:
        return []
    return [elementwise_op("mamba_layout_copies", tokens * (in_width + out_width), 1, 1, 0,
                           bwd_bytes_factor=1.0, kernels=2)]


def mamba2_ops(spec: ModelSpec, b: int, s: int, T: int, ax: Axes, precision: str,
               saved_in: float | None) -> tuple[list[Op], float, tuple[tuple[str, float], ...]]:
    """Forward ops of one Mamba-2 mixer on a rank holding `ax` (heads and groups per tp rank and
    per scan after the cp all-to-all: parallel/shard.py), the parameters it holds and the
    (name, bytes) of the all-to-alls a cp split needs (parallel/shard.py emits them at cp > 1)."""
    m = spec.mamba
    assert m is not None
    h = spec.hidden
    # heads H and groups G on this tp rank (groups replicate when tp > G); the conv and scan run after
    # the cp all-to-all on the whole sequence (b·s tokens) and Hs heads, Gs groups
    H, G, Hs, Gs = ax.ssm_heads(m.num_heads, m.num_groups, spec.id)
    P, N, K = m.head_dim, m.state_dim, m.conv_kernel
    d_in = H * P
    conv_dim = d_in + 2 * G * N
    in_n = 2 * d_in + 2 * G * N + H
    Ts, d_s = b * s, Hs * P
    conv_s = d_s + 2 * Gs * N
    flop_ssd = ssd_flop(b, s, Hs, P, N, Gs, m.chunk_size)
    bytes_f, bytes_b = ssd_bytes(b, s, Hs, P, N, Gs, m.chunk_size)
    ssd_in = Ts * conv_s * ACT_BYTES + Ts * Hs * 4  # x, B, C and fp32 dt, kept for the backward
    ops = [
        gemm_op("mamba_in_proj", T, in_n, h, precision, saved=saved_in, split="column"),
        *layout_copies(b, Ts, conv_s + d_s + Hs, d_s),  # in_proj's z, x, B, C and dt on the scan's heads
        # depthwise causal conv1d: K multiply-adds per output element (FlopCounterMode counts 2·K), its
        # SiLU applied in the same kernel (causal_conv1d_fwd's activation argument, as
        # mamba_split_conv1d_scan_combined calls it); the backward recomputes the convolution before
        # causal_conv1d_bwd (reads x and dout, writes dx): 5 passes against the forward's 2
        elementwise_op("mamba_conv1d", Ts * conv_s, 1, 1, 2 * K, saved=Ts * conv_s * ACT_BYTES, bwd_bytes_factor=2.5),
        Op("mamba_ssd", "ssd", flop=flop_ssd, bytes=bytes_f, saved_bytes=ssd_in,
           bwd_flop_factor=ssd_bwd_flop(b, s, Hs, P, N, Gs, m.chunk_size) / flop_ssd,
           bwd_bytes_factor=bytes_b / bytes_f, kernels=SSD_FWD_KERNELS, bwd_kernels=SSD_BWD_KERNELS,
           heads=Hs, head_dim=P, seq_q=s, seq_kv=min(m.chunk_size, s), precision=precision),
        # y·silu(z) then RMSNorm over each group's channels: y and z kept for the backward
        elementwise_op("mamba_gated_norm", T * d_in, 2, 1, 8, saved=2 * T * d_in * ACT_BYTES, kind="norm", params=d_in),
        gemm_op("mamba_out_proj", T, h, d_in, precision, split="row"),
    ]
    # under cp: sequence split -> head split before the conv and scan, and back before out_proj
    a2a = (("mamba_cp_a2a_in", T * (conv_dim + H) * ACT_BYTES), ("mamba_cp_a2a_out", T * d_in * ACT_BYTES))
    params = h * in_n + conv_dim * K + conv_dim + 3 * H + d_in + d_in * h
    return ops, float(params), a2a
