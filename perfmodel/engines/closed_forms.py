"""The closed forms that turn stage costs into a step, written once for floats and NumPy columns
alike (np.maximum / np.where, no branches on values): the analytic engine calls them with
scalars, the planner with one entry per layout, the DES for what it does not simulate.

Pipeline (stages taking t_s per micro-batch, hops included; bubble from the schedule):
    T_pipe = m · max_s t_s + bubble(Σ t_s − max_s t_s, ...)
Data-parallel exposure, per step, on the slowest stage with f, b its forward / backward seconds
per micro-batch and L its layer instances (one bucket = one layer's share):
    ZeRO 0-2, overlap    max(G − b, G·s_1) + max(P − f, P/L)   (G grad reduction, P param gather; s_1
                         the first layer's share of the parameters, the last bucket to be ready:
                         1/L where unnamed)
    ZeRO 0-2, no overlap G + P
    ZeRO 3 (FSDP): one unit per layer instance, each its own collectives (per-unit latency and
    the busbw of a unit-sized message): a all-gather, r reduce-scatter per unit; per unit on the
    compute stream f = f_stage/L, b = b_stage/L and the copy kernels k_f, k_b (FSDP2's
    copy-out after each gather, chunk_cat before each reduce-scatter; 0 for a flat buffer):
      prefetch: unit i+1's gather is issued when unit i starts, unit i's reduce-scatter when its
      backward ends; gathers and reduce-scatters queue on one NCCL stream in issue order. Every
      unit is re-gathered for its backward (reshard after forward) except the one whose backward
      comes first: the root unit (FSDP1's root FlatParameter, FSDP2's root state) is not
      resharded after forward, nor is torchtitan's last block. Per micro-batch, with
      f' = f + k_f and b' = b + k_b,
        forward   a + (L−1)·max(0, a − f')                    the first gather, then the excess
        backward  max(0, a − b') + (L−2)·max(0, a + r − b') + max(0, r − b') + r   (L >= 2; r for
                  one unit): the second unit's gather (issued before any reduce-scatter), the
                  steady state (a gather and a reduce-scatter per unit), the last two
                  reduce-scatters
        plus L·(k_f + k_b) of copy kernels
      The rank's first unit (its first layer: the embedding on the first stage, 4x a layer in
      Llama-3.2-1B) takes its own a1, r1, the others their mean a, r: the forward opens with a1,
      the backward's last steady term is max(0, a1 + r − b') and its close r1.
      no prefetch          m · (L·(2a + r) − a + L·(k_f + k_b))
    With a pipeline (pp > 1; torch.distributed.pipelining with FSDP2, as torchtitan runs it:
    reshard_after_forward off when pp is on, and stage.backward_maybe_with_nosync keeps every
    micro-batch's backward unsharded and unsynced, then runs each unit's post-backward after the
    last one) each unit is gathered once per step and reduce-scattered once, after the stage's
    last backward. A stage gathers its first unit lazily, in the pre-forward hook of its first
    micro-batch, once that micro-batch's activation has arrived (torch's PipelineScheduleSingle
    issues no early unshard), so the pipeline fill crosses every virtual stage's first forward
    wait (each chunk's units are first used there): n = pp ranks' worth whatever vp; the
    reduce-scatters run after each stage's last send (perform_reduce_grad), only the last
    stage to finish exposing its own:
      n·(a + (L−1)·max(0, a − f')) + L·r   (no prefetch: n·L·a + L·r)
    plus copies: each rank's copy-outs in its first forward, on the fill (n·L·k_f), and its
    copy-ins in its last backward, on the drain (L·(k_b − k_f) for the first rank, 1/vp of it
    for each later one, as the interleaved bubble takes a chunk).
    Both are exact for L equal units: the makespan of the two-stream schedule minus its compute;
    des_costs.fsdp_unit_schedule plays the same schedule out over the unequal units of a real stage.
On a CPU nothing overlaps (the collective runs on the cores that compute). The part that hides
slows the compute beside it by the NCCL contention fraction c:
    T_dp = exposed + (total − exposed) · c
(with a pipeline, the gathers hidden behind each rank's first forward slow it on the fill: n
times their hidden part; the reduce-scatters are exposed).
Optimizer: local parameters (after ZeRO sharding over dp·cp, expert ones over dp·cp/ep) times
seconds per parameter, plus the tied-embedding sync.
Memory per rank: static bytes + activations per micro-batch · in flight + working set + runtime.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from perfmodel.parallel.schedules.base import Num

_SCALARS = (float, int, bool, np.floating, np.integer, np.bool_)


def _maximum(a: Any, b: Any) -> Any:
    """np.maximum, without NumPy's dispatch cost when both are plain numbers."""
    if isinstance(a, _SCALARS) and isinstance(b, _SCALARS):
        return a if a >= b else b
    return np.maximum(a, b)


def _where(cond: Any, a: Any, b: Any) -> Any:
    """np.where, without NumPy's dispatch cost when the condition is a plain truth value."""
    if isinstance(cond, _SCALARS):
        return a if cond else b
    return np.where(cond, a, b)


def _and(a: Any, b: Any) -> Any:
    if isinstance(a, _SCALARS) and isinstance(b, _SCALARS):
        return bool(a) and bool(b)
    return np.logical_and(a, b)


def pipeline_s(t_max_s: Num, m: Num, bubble_s: Num) -> Num:
    """Seconds from the first forward to the last backward of one step."""
    return m * t_max_s + bubble_s


def pipeline_hops_s(vp: Num, p2p_s: Num, fwd_s: Num, bwd_s: Num, overlap: Num) -> Num:
    """p2p seconds per micro-batch on a rank: activation out and gradient back, per chunk. With
    overlap (Megatron-Core's overlap_p2p_comm in the interleaved schedule: isend / irecv posted
    beside the next chunk's forward or backward, waited on only before the chunk that needs them)
    the steady state alternates forward and backward chunks, so one transfer of each pair is
    exposed only by what one of the rank's forward chunks (fwd_s / vp) does not cover and the
    other by what one of its backward chunks (bwd_s / vp) does not. Charging both against
    the forward made a faster tp link slower: it shortens the forward, which narrows both windows,
    while the step gains only the forward's share once."""
    hidden = _maximum(0.0, p2p_s - fwd_s / vp) + _maximum(0.0, p2p_s - bwd_s / vp)
    return vp * _where(overlap, hidden, 2 * p2p_s)


def dp_exposed_s(zero: Num, m: Num, fwd_s: Num, bwd_s: Num, layers: Num, all_reduce_s: Num, reduce_scatter_s: Num,
                 all_gather_s: Num, overlap_dp_comm: Num, overlap_fsdp_prefetch: Num, can_overlap: Num,
                 contention: Num, unit_all_gather_s: Num = 0.0, unit_reduce_scatter_s: Num = 0.0,
                 unit_copy_fwd_s: Num = 0.0, unit_copy_bwd_s: Num = 0.0, fill: Num = 1.0,
                 first_all_gather_s: Num | None = None, first_reduce_scatter_s: Num | None = None,
                 first_share: Num | None = None, grad_window_s: Num | None = None, chunks: Num = 1.0,
                 run_share: Num = 1.0) -> Num:
    """Exposed data-parallel seconds of one step plus the compute slowed by the hidden part.
    The unit_* arguments are one FSDP unit's collectives and copy kernels, `fill` the stage
    forward waits a pipeline's fill crosses (ZeRO 3 only: fsdp_fill) and `chunks` the model chunks
    per rank (vp). `grad_window_s`: the last micro-batch's phase during which ZeRO 0-2 gradient
    buckets become final (default its whole backward; the weight-gradient phase under a schedule
    that defers it). `run_share`: the share of a rank's units one micro-batch passes (the
    schedule's run_share: DualPipe's two directions each cross one of a rank's two stages)."""
    L = _maximum(1.0, layers)
    ag, rs = all_gather_s, reduce_scatter_s
    grad = _where(zero == 0, all_reduce_s, _where(zero < 3, rs, 0.0))
    param = _where(_and(zero >= 1, zero <= 2), ag, 0.0)
    over = _and(overlap_dp_comm, can_overlap)
    # the last gradient bucket is the rank's first layer's (the embedding on the first stage): its
    # share of the parameters where the caller names it, else one L-th of the gradients
    last = grad / L if first_share is None else grad * first_share
    window = bwd_s if grad_window_s is None else grad_window_s
    z012 = _where(over, _maximum(grad - window, last), grad) + param_gather_exposed_s(param, fwd_s, L, over)
    pre = _and(overlap_fsdp_prefetch, can_overlap)
    z3_wait, _, z3_copies, z3_beside = fsdp_exposed_s(m, fwd_s, bwd_s, L, unit_all_gather_s, unit_reduce_scatter_s,
                                                      unit_copy_fwd_s, unit_copy_bwd_s, pre, fill,
                                                      first_all_gather_s, first_reduce_scatter_s, chunks, run_share)
    exposed = _where(zero == 3, z3_wait, z012)
    beside = _where(zero == 3, z3_beside, _maximum(0.0, grad + param - exposed))
    return exposed + beside * contention + _where(zero == 3, z3_copies, 0.0)


def fsdp_exposed_s(m: Num, fwd_s: Num, bwd_s: Num, units: Num, unit_all_gather_s: Num, unit_reduce_scatter_s: Num,
                   unit_copy_fwd_s: Num, unit_copy_bwd_s: Num, prefetch: Num,
                   fill: Num = 1.0, first_all_gather_s: Num | None = None,
                   first_reduce_scatter_s: Num | None = None, chunks: Num = 1.0,
                   run_share: Num = 1.0) -> tuple[Num, Num, Num, Num]:
    """(seconds the compute stream waits for the per-unit collectives, seconds of those
    collectives in all, seconds of the copy kernels, seconds of collectives running beside the
    step's critical compute, which they slow by the contention fraction) over m micro-batches of
    `units` equal units (module docstring). Gradient accumulation re-gathers and reduce-scatters
    every micro-batch; a pipelined stage (pp > 1: fill > 1, fsdp_fill) gathers and
    reduce-scatters each unit once per step, and the fill waits for `fill` stages' forward
    gathers in turn: their hidden part slows each of those first forwards, fill times. `chunks`:
    the model chunks per rank (vp), over which the drain spreads the last backwards' copies.
    `run_share`: the share of the rank's units a micro-batch passes; each fill step waits for that
    share's gathers only (DualPipe, 1/2: its two directions fill at once, each through one of the
    rank's two stages, as the simulation plays them)."""
    L = _maximum(1.0, units)
    a, r, kf, kb = unit_all_gather_s, unit_reduce_scatter_s, unit_copy_fwd_s, unit_copy_bwd_s
    # the first unit (the embedding on the first stage): its gather opens the forward, its
    # re-gather is the last of the backward's steady state, its reduce-scatter closes it
    a1 = a if first_all_gather_s is None else first_all_gather_s
    r1 = r if first_reduce_scatter_s is None else first_reduce_scatter_s
    f, b = fwd_s / L + kf, bwd_s / L + kb
    fwd = a1 + (L - 1) * _maximum(0.0, a - f)
    steady = _where(L >= 3, _maximum(0.0, a - b) + (L - 3) * _maximum(0.0, a + r - b) + _maximum(0.0, a1 + r - b),
                    _maximum(0.0, a1 - b))
    bwd = _where(L >= 2, steady + _maximum(0.0, r - b) + r1, r1)
    total_a, total_r = a1 + (L - 1) * a, r1 + (L - 1) * r
    comm = m * (2 * total_a + total_r - a)
    once_comm = total_a + total_r
    # gathered once per step, a unit's copy-out follows its gather on the first micro-batch's
    # forward, which the fill crosses rank after rank (fill·L·kf); its copy-in precedes its
    # reduce-scatter in the last backward (L·(kb - kf) beyond the copy-outs, as
    # des_costs._fsdp_waits plays them), which the drain crosses as it does a rank's backward:
    # the first rank's whole and (fill - 1)/chunks of the others' (the interleaved bubble's 1/vp)
    crossed = fill * run_share  # rank-units of gathers the fill waits for in turn
    once_wait = _where(prefetch, crossed * fwd + total_r, crossed * total_a + total_r)
    once = (once_wait, once_comm, crossed * L * kf + (1.0 + (fill - 1) / chunks) * L * (kb - kf),
            crossed * _where(prefetch, _maximum(0.0, total_a - fwd), 0.0))
    pipelined = fill > 1
    every_wait = _where(prefetch, m * (fwd + bwd), comm)
    every = every_wait, comm, m * L * (kf + kb), _maximum(0.0, comm - every_wait)
    return (_where(pipelined, once[0], every[0]), _where(pipelined, once[1], every[1]),
            _where(pipelined, once[2], every[2]), _where(pipelined, once[3], every[3]))


def drain_leads(bwd_s: Sequence[float] | np.ndarray, hops_s: Sequence[float] | np.ndarray, vp: int,
                defers_wgrad: bool) -> np.ndarray:
    """Per pipeline rank, how long before the first rank (the one a pipeline ends on: its last
    backward chunk waits for every later rank's) its compute ends: the last micro-batch's
    backward chunk (bwd_s / vp) and one send (hops_s / 2vp) on each rank before it. None under a
    schedule that defers weight gradients (ZB-H1, DualPipe): its W phases fill that drain."""
    lead = np.zeros(len(bwd_s))
    if len(bwd_s) > 1 and not defers_wgrad:
        lead[1:] = np.cumsum(np.asarray(bwd_s[:-1], dtype=float) / vp + np.asarray(hops_s[:-1], dtype=float) / (2 * vp))
    return lead


def grad_window_s(defers_wgrad: bool, bwd_s: Num, wgrad_s: Num, hops_s: Num) -> Num:
    """The last micro-batch's phase during which a rank's gradients become final (dp_exposed_s):
    its backward with its p2p wait, or its weight-gradient phase under a schedule that defers it
    (ZB-H1, DualPipe: the DES's buckets wait for W)."""
    return wgrad_s if defers_wgrad else bwd_s + hops_s / 2


def fsdp_fill(pp: Num) -> Num:
    """The ZeRO-3 forward waits a pipeline's fill crosses: the first micro-batch's forward is the
    first use of every virtual stage's units, pp·vp chunks of a vp-th of a rank's units each, so
    pp ranks' worth whatever vp (a chunk's gathers wait for its activation to arrive; the
    simulation agrees); 1 without a pipeline (fsdp_exposed_s)."""
    return pp


def param_gather_exposed_s(param_s: Num, fwd_s: Num, layers: Num, overlap: Num) -> Num:
    """ZeRO-1/2 all-gather of the updated weights: hides behind the next forward except one
    layer's share when overlapped."""
    return _where(overlap, _where(param_s > 0, _maximum(param_s - fwd_s, param_s / _maximum(1.0, layers)), 0.0),
                    param_s)


def _sharded_params(zero: Num, from_stage: int, dense_params: Num, expert_params: Num, dpcp: Num, edp: Num) -> Num:
    """Dense parameters over the dp·cp ranks and expert ones over their expert-data-parallel group
    (edp, MoE parallel folding) from ZeRO stage `from_stage` on, else all of them."""
    sharded = zero >= from_stage
    return dense_params / _where(sharded, dpcp, 1.0) + expert_params / _where(sharded, _maximum(1.0, edp), 1.0)


def grad_params(zero: Num, dense_params: Num, expert_params: Num, dpcp: Num, edp: Num) -> Num:
    """Parameters whose gradient this rank holds between micro-batches: ZeRO >= 2 shards them."""
    return _sharded_params(zero, 2, dense_params, expert_params, dpcp, edp)


def local_params(zero: Num, dense_params: Num, expert_params: Num, dpcp: Num, edp: Num) -> Num:
    """Parameters whose optimizer state this rank updates: ZeRO >= 1 shards them."""
    return _sharded_params(zero, 1, dense_params, expert_params, dpcp, edp)


def optimizer_step_s(local: Num, s_per_param: Num, tied_embedding_s: Num = 0.0) -> Num:
    return local * s_per_param + tied_embedding_s


def in_flight(pp: Num, flight_when_pipelined: Num) -> Num:
    """Micro-batches in flight: 1 without a pipeline, else what the schedule holds."""
    return _where(pp == 1, 1.0, flight_when_pipelined)


def rank_memory_bytes(static_bytes: Num, act_per_mb_bytes: Num, flight: Num, working_bytes: Num,
                      runtime_bytes: Num) -> Num:
    return static_bytes + act_per_mb_bytes * flight + working_bytes + runtime_bytes


__all__ = ["dp_exposed_s", "drain_leads", "fsdp_exposed_s", "fsdp_fill", "grad_params", "grad_window_s", "in_flight",
           "local_params", "optimizer_step_s", "param_gather_exposed_s", "pipeline_hops_s", "pipeline_s",
           "rank_memory_bytes"]
