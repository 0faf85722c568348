"""What Transformer Engine's userbuffers tensor-parallel overlap costs (ParallelPlan.overlap_tp_comm).

Under sequence parallelism every column -> row GEMM pair of a layer all-gathers its input before
the column-parallel GEMM and reduce-scatters the row-parallel GEMM's output; the backward mirrors
both and re-gathers the column GEMM's input for its weight gradient (TransformerEngine @ d0067d0
pytorch/module/layernorm_linear.py:473-475 ln_out_needs_gather, :773-792). Userbuffers
(Megatron-Core tp_comm_overlap, which needs sequence parallelism: Megatron-LM
megatron/training/arguments.py:1441-1442) runs each collective beside the GEMM that consumes or
produces it, one of four ways per GEMM (TE pytorch/module/base.py:349-360 `methods`, defaults
:375-394 get_default_config):

  GEMM (TE name)                    method         comm SMs   SM margin   chunks
  qkv_fprop, fc1_fprop              ring_exchange  1, copy    no          tp
                                                   engines
  proj_dgrad, fc2_dgrad             ring_exchange  as above   no          tp
  proj_fprop, fc2_fprop             pipeline (RS)  16         yes         4
  qkv_dgrad, fc1_dgrad              bulk (AG)      16         yes         -
  qkv_wgrad, fc1_wgrad              bulk (RS)      16         yes         -
  proj_wgrad, fc2_wgrad             external       -          -           - (reuses proj_dgrad's gathered buffer)

and the cost of each, t_c the isolated collective (comm/collectives.py), G the isolated GEMM
(compute/ops.gemm_cost), S the SM count (Accelerator.compute_units), f = num_sm / S:

  SM margin      `_math_sms = set_sm_margin ? sm_count - num_comm_sm : sm_count`
                 (common/comm_gemm_overlap/comm_gemm_overlap.cpp:143): a GEMM with a margin runs
                 on S - num_sm SMs, at (S - num_sm) / S of its rate for its whole duration.
  no margin      a comm kernel on num_sm SMs shares them with the GEMM while it runs: the GEMM
                 loses f of its rate for t_c. The ring exchange sends with the copy engines
                 (use_ce: userbuffers/userbuffers.cu:2335-2337 cudaMemcpyAsync, the kernel only
                 signals), so it takes no SMs.
  ring_exchange  (comm_gemm_overlap.cpp:1044-1217 split_overlap_ag, loop :1161) tp steps: the
                 GEMM runs on the chunk it holds (m / tp rows) while the next chunk moves to the
                 neighbour; chunk i starts when chunk i-1 is done and has arrived. One step moves
                 1/tp of the buffer,
                 c = t_ag / (tp - 1) (the ring all-gather's tp - 1 steps), g = one chunk's GEMM:
                     T = max(tp·g, (tp - 1)·c + g)
  pipeline       (comm_gemm_overlap.cpp:611-760 split_overlap_rs) num_splits GEMM chunks of the
                 output columns (m_chunk = m / num_splits, :634, m the weight's output rows),
                 each reduce-scattered on the comm stream after it is done while the next chunk
                 computes (:719-750); the last chunk's reduce-scatter runs alone (on up to
                 UB_MAX_SM = 32 SMs, :23, :736). g the chunk GEMM at the margin's rate, r = t_rs / n:
                     T = g + r + (n - 1)·max(g, r)        (r <= g: n·g + r, the tail t_rs / n exposed)
  bulk           (comm_gemm_overlap.cpp:444-498 bulk_overlap) the whole collective beside the
                 whole GEMM: T = max(t_c, G·S/(S - num_sm)) with a margin, max(t_c, G + f·t_c)
                 without (the GEMM does G of full-rate work, at 1 - f of its rate while the
                 collective runs).

The seconds a layer shows beyond its GEMMs' isolated time, T - G summed over its overlapped
GEMMs, are its exposed TP communication. A chunked GEMM is costed at its own shape (fill/drain per
kernel, the weight read again per chunk: compute/ops.gemm_cost), so tp·g >= G even when nothing
waits. T never falls as t_c or num_sm grows.

Configuration: Transformer Engine's defaults (TE_DEFAULTS). Megatron-Bridge passes TE a tuned
table only where a recipe names one (NVIDIA-NeMo/Megatron-Bridge @ 067f987
src/megatron/bridge/training/comm_overlap.py:98-350 `userbuffers_*`, used by the Llama 3 / 3.1
performance recipes, e.g. perf_recipes/llama/h100/llama3.py:133, :175); otherwise TE's defaults
(comm_overlap.py:619-625: "No overlap config provided. Initializing TP comm overlap with the
default config": the SFT / PEFT and Qwen3-MoE recipes). The tuned tables are not one
configuration: bulk num_sm 2-32 without a margin, proj_fprop / fc2_fprop pipelined (num_sm 8-32,
margin) in most bf16 tables but ring exchange with a margin in most fp8 ones (userbuffers_fp8_h100_
h8192_tp4_mbs1_seqlen8192 :111-122) and pipelined in userbuffers_fp8_h100_h6144 (:245-256), each
keyed by model width, tp and chip. Keying the table by model would be a per-model parameter, so
the defaults stand, and `UbConfig` takes any of these rows.

All-gather buffers: under an fp8 / fp4 recipe the gathered tensors (the column GEMM's input, the
row GEMM's output gradient, the re-gathered input) are quantized, 1 B per element plus the
recipe's scales (base.py:334-345, :391 fp8_buf); reduce-scatters move bf16.

Not modelled: the MXFP8 wgrad all-gather of the output gradient beside the dgrad GEMM
(layernorm_linear.py:950-972, the only `external` use), atomic GEMMs and `aggregate` ring steps
(off by default), HBM traffic of the copy-engine sends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from perfmodel.compute.fp8_recipes import recipe_for
from perfmodel.compute.ops import gemm_cost
from perfmodel.hardware.specs import Accelerator
from perfmodel.workload.graph import ACT_BYTES, Layer, Op

UbMethod = Literal["ring_exchange", "pipeline", "bulk"]


@dataclass(frozen=True, slots=True)
class UbConfig:
    """One GEMM's userbuffers setting (TE initialize_ub's ub_cfgs entry)."""

    method: UbMethod
    num_sm: int  # SMs the communication kernel runs on
    set_sm_margin: bool  # the GEMM leaves num_sm SMs to the communication kernel
    num_splits: int = 0  # pipeline chunks; 0 = tp (ring exchange always runs tp steps)
    use_ce: bool = True  # ring exchange: copy-engine sends, no SMs taken

    def comm_sms(self) -> int:
        """SMs the communication occupies while it runs (a copy-engine send takes none)."""
        return 0 if self.method == "ring_exchange" and self.use_ce else self.num_sm


_RING = UbConfig("ring_exchange", 1, False)
_BULK = UbConfig("bulk", 16, True)
# TransformerEngine @ d0067d0 pytorch/module/base.py:349-360 (methods), :375-394 (get_default_config)
TE_DEFAULTS: dict[str, UbConfig] = {
    "qkv_fprop": _RING, "fc1_fprop": _RING, "proj_dgrad": _RING, "fc2_dgrad": _RING,
    "proj_fprop": UbConfig("pipeline", 16, True, 4), "fc2_fprop": UbConfig("pipeline", 16, True, 4),
    "qkv_dgrad": _BULK, "fc1_dgrad": _BULK, "qkv_wgrad": _BULK, "fc1_wgrad": _BULK,
}
UB_GEMMS = tuple(TE_DEFAULTS)


@dataclass(frozen=True, slots=True)
class TpOverlap:
    """Seconds a layer's overlapped TP collectives add beyond its GEMMs' isolated time, per pass,
    and how many column -> row pairs carried them."""

    fwd_s: float
    bwd_s: float
    pairs: int


def rate_fraction(cfg: UbConfig, sms: int) -> float:
    """The GEMM's share of its full rate under an SM margin: (S - num_sm) / S; 1 without one."""
    if not cfg.set_sm_margin:
        return 1.0
    if cfg.num_sm >= sms:
        raise ValueError(f"userbuffers num_sm {cfg.num_sm} leaves no SMs of {sms} to the GEMM; num_sm < {sms}")
    return (sms - cfg.num_sm) / sms


def ring_exchange_s(chunk_s: float, step_s: float, steps: int) -> float:
    """`steps` GEMM chunks of chunk_s, chunk i available after i ring steps of step_s:
    max over the chunk k that waits last of k·step + (steps - k)·chunk = max(steps·chunk,
    (steps - 1)·step + chunk)."""
    return max(steps * chunk_s, (steps - 1) * step_s + chunk_s)


def pipelined_rs_s(chunk_s: float, comm_chunk_s: float, splits: int) -> float:
    """Two-stage flow of `splits` GEMM chunks then their reduce-scatters on one comm stream:
    g + r + (n - 1)·max(g, r)."""
    return chunk_s + comm_chunk_s + (splits - 1) * max(chunk_s, comm_chunk_s)


def bulk_s(gemm_s: float, comm_s: float, cfg: UbConfig, sms: int) -> float:
    """A whole GEMM beside a whole collective (module docstring)."""
    if cfg.set_sm_margin:
        return max(comm_s, gemm_s / rate_fraction(cfg, sms))
    return max(comm_s, gemm_s + cfg.comm_sms() / sms * comm_s)


def _gemm_s(acc: Accelerator, op: Op, m: int, n: int, scale: float) -> float:
    return gemm_cost(acc, m, n, op.k, op.precision, op.batch * op.repeat, scale).time_s if scale > 0 else 0.0


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def overlapped_gemm_s(acc: Accelerator, cfg: UbConfig, ops: tuple[Op, ...], scale: str, tp: int,
                      comm_s: float) -> tuple[float, float]:
    """(makespan, isolated seconds) of the GEMMs `ops` (the dgrad or wgrad part with `scale`
    'dgrad' / 'wgrad', else the forward) run with their collective of comm_s seconds under `cfg`."""
    sms = acc.num_compute_units
    if cfg.comm_sms() >= sms:
        raise ValueError(f"userbuffers num_sm {cfg.num_sm} leaves no SMs of {sms} to the GEMM; num_sm < {sms}")
    whole = sum(_gemm_s(acc, o, o.m, o.n, _part_scale(o, scale)) for o in ops)
    if cfg.method == "bulk":
        return bulk_s(whole, comm_s, cfg, sms), whole
    if cfg.method == "ring_exchange":
        chunk = sum(_gemm_s(acc, o, _ceil_div(o.m, tp), o.n, _part_scale(o, scale)) for o in ops)
        chunk /= rate_fraction(cfg, sms)
        step = comm_s / (tp - 1)
        f = cfg.comm_sms() / sms
        if f and not cfg.set_sm_margin:
            # a send kernel (no copy engines) takes f of the SMs while its step runs: the chunk
            # does its work at 1 - f of its rate for min(step, its whole time)
            chunk += f * min(step, chunk / (1.0 - f))
        return ring_exchange_s(chunk, step, tp), whole
    splits = cfg.num_splits or tp
    chunk = sum(_gemm_s(acc, o, o.m, _ceil_div(o.n, splits), _part_scale(o, scale)) for o in ops)
    return pipelined_rs_s(chunk / rate_fraction(cfg, sms), comm_s / splits, splits), whole


def _part_scale(op: Op, part: str) -> float:
    """FLOPs of the forward ('fwd'), data-gradient or weight-gradient GEMM as a multiple of the forward's."""
    return 1.0 if part == "fwd" else op.dgrad_factor if part == "dgrad" else op.wgrad_factor


def all_gather_bytes_per_element(layer: Layer, fp8_recipe: str | None) -> float:
    """Bytes per element of the userbuffers all-gathers: under an fp8 / fp4 recipe TE gathers the
    quantized tensor and its scales ("AllGather buffers use fp8 when using fp8 recipe", base.py:334-345
    layers_all_gather_overlap, :391 fp8_buf; the reduce-scatter buffers stay bf16), else bf16."""
    recipe = next((r for op in layer.ops if op.kind == "gemm" and op.split == "column"
                   and (r := recipe_for(op.precision, fp8_recipe)) is not None), None)
    return ACT_BYTES if recipe is None else recipe.element_bytes + recipe.scale_bytes_per_element


def tp_pairs(layer: Layer) -> list[tuple[tuple[Op, ...], Op]]:
    """The layer's column -> row GEMM pairs in op order: the column-parallel GEMMs since the last
    row-parallel one, and that row-parallel GEMM (grouped expert GEMMs are not TP-split)."""
    pairs: list[tuple[tuple[Op, ...], Op]] = []
    cols: list[Op] = []
    for op in layer.ops:
        if op.kind != "gemm" or op.grouped:
            continue
        if op.split == "column":
            cols.append(op)
        elif op.split == "row" and cols:
            pairs.append((tuple(cols), op))
            cols = []
    return pairs


def _names(row: Op) -> tuple[str, str]:
    """TE's ub names of a pair: the attention block's (qkv, proj), every other pair's (fc1, fc2),
    as Megatron-Core names them (transformer/attention.py:422, :1701; mlp.py:228, :251;
    ssm/mamba_mixer.py:291, :447)."""
    return ("qkv", "proj") if row.name == "out_proj" else ("fc1", "fc2")


def tp_overlap_s(acc: Accelerator, layer: Layer, tp: int, all_gather_s: float, reduce_scatter_s: float,
                 max_pairs: int, table: dict[str, UbConfig] | None = None) -> TpOverlap:
    """The exposed seconds of up to `max_pairs` column -> row pairs of `layer` under userbuffers
    (module docstring), each pair with one all-gather of all_gather_s and one reduce-scatter of
    reduce_scatter_s seconds per pass (their isolated times), on `tp` ranks:

        forward   ring(col fprop, AG) + pipeline(row fprop, RS)
        backward  ring(row dgrad, AG of the output gradient) + bulk(col dgrad, AG of the input
                  re-gathered for the weight gradient) + bulk(col wgrad, RS of the input gradient)

    each term its makespan minus the GEMMs' isolated seconds."""
    cfgs = TE_DEFAULTS if table is None else table
    fwd = bwd = 0.0
    pairs = tp_pairs(layer)[:max_pairs]
    for cols, row in pairs:
        c, r = _names(row)
        for cfg, ops, part, t, into_fwd in (
            (cfgs[c + "_fprop"], cols, "fwd", all_gather_s, True),
            (cfgs[r + "_fprop"], (row,), "fwd", reduce_scatter_s, True),
            (cfgs[r + "_dgrad"], (row,), "dgrad", all_gather_s, False),
            (cfgs[c + "_dgrad"], cols, "dgrad", all_gather_s, False),
            (cfgs[c + "_wgrad"], cols, "wgrad", reduce_scatter_s, False),
        ):
            span, alone = overlapped_gemm_s(acc, cfg, ops, part, tp, t)
            if into_fwd:
                fwd += max(0.0, span - alone)
            else:
                bwd += max(0.0, span - alone)
    return TpOverlap(fwd, bwd, len(pairs))


__all__ = ["TE_DEFAULTS", "UB_GEMMS", "TpOverlap", "UbConfig", "all_gather_bytes_per_element", "bulk_s",
           "overlapped_gemm_s", "pipelined_rs_s", "rate_fraction", "ring_exchange_s", "tp_overlap_s", "tp_pairs"]
