"""Optimizers: the state each keeps per parameter and the time of one step (pure functions).

State bytes per parameter, beyond the bf16 weights and the gradients (mixed precision keeps an
fp32 master copy, 4 B, in every case):

optimizer  state                                   B/param  source
adam(w)    master + m + v (fp32)                   12       Kingma & Ba 2015; Loshchilov & Hutter 2019
                                                            (decoupled decay: same tensors); ZeRO §3
adamw-bf16 master + bf16 m and v                   8       DeepSeek-V3 report §3.3.3 (BF16 moments, FP32
                                                            master weights and gradients); Megatron-Core
                                                            --use-precision-aware-optimizer --exp-avg-dtype
                                                            bf16 --exp-avg-sq-dtype bf16
adam8bit   master + 8-bit m and v (+ block scales)  6       Dettmers et al. 2022, bitsandbytes
sgd        master + momentum (fp32)                 8       torch.optim.SGD(momentum=...)
adafactor  master + factored second moment          4       Shazeer & Stern 2018: an [r, c] matrix keeps
                                                            r + c row/column statistics (4(r+c) B, under
                                                            0.1 % of 4rc for r, c >= 4096: counted 0);
                                                            no first moment (beta1 = None, the paper's default)
muon       master + momentum (fp32)                 8       Jordan 2024 (KellerJordan/Muon); embeddings,
                                                            the head and 1-D parameters run AdamW (12 B):
                                                            counted at 8 B, under 2 % of a large model

Step time, element-wise part: bytes per parameter through HBM at the achieved bandwidth (a
calibrated per-parameter AdamW time where the accelerator has one, which the Adam variants with
narrower moments scale by their bytes over AdamW's 38):
    adam(w) 38 = grad 4 read, master 4 + 4, m and v 8 + 8, bf16 weight 2 write, grad-norm pass 4,
                 zero_grad 4
    adamw-bf16 30 = the same with 2-byte moments (4 + 4 instead of 8 + 8)
    adam8bit 26 = the same with 1-byte moments (2 + 2 instead of 8 + 8)
    sgd 30 = grad 4, master 4 + 4, momentum 4 + 4, weight 2, grad norm 4, zero_grad 4
    adafactor 30 = grad 4 for the row/column statistics, grad 4 again for the update, master 4 + 4,
                 weight 2, the update-RMS clipping pass 4, grad norm 4, zero_grad 4
    muon 30 = as sgd (momentum, then the orthogonalised update)
Muon also orthogonalises the update of every 2-D weight with 5 Newton-Schulz iterations
(KellerJordan/Muon zeropower_via_newtonschulz5): for X of shape [r, c], r <= c,
    A = X Xᵀ (2r²c FLOP), B = bA + cA² (2r³), X = aX + BX (2r²c)   -> 5 (4r²c + 2r³) FLOP,
as bf16 GEMMs. Newton-Schulz needs whole matrices, and each is orthogonalised once per
data-parallel group: the reference implementation splits the parameters over the ranks and
all-gathers the updates (KellerJordan/Muon), "Distributed Muon" gathers each ZeRO-1 partition's
matrices over the data-parallel group (Liu et al. 2025, "Muon is Scalable for LLM Training",
Alg. 1). Per rank, on the matrices of its pipeline stage:
    Newton-Schulz   sum over matrices / (dp x cp)
    dp all-gather   the stage's matrices / tp, grad_bytes per element, over the dp x cp group
    tp all-gather   a tensor-parallel shard is gathered whole: its share / (dp x cp), over tp
The element-wise part and the state are sharded by ZeRO-1 like any optimizer's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfmodel.compute.ops import gemm_cost
from perfmodel.hardware.specs import Accelerator
from perfmodel.workload.graph import Layer

if TYPE_CHECKING:
    from perfmodel.hardware.system import System
    from perfmodel.parallel.plan import ParallelPlan

STATE_BYTES_PER_PARAM = {"adam": 12.0, "adamw": 12.0, "adamw-bf16": 8.0, "adam8bit": 6.0, "sgd": 8.0, "adafactor": 4.0,
                         "muon": 8.0}
ADAM_FAMILY = ("adam", "adamw", "adamw-bf16", "adam8bit")  # the same update, its moments held at other widths
STEP_BYTES_PER_PARAM = {"adam": 38.0, "adamw": 38.0, "adamw-bf16": 30.0, "adam8bit": 26.0, "sgd": 30.0, "adafactor": 30.0,
                        "muon": 30.0}
NEWTON_SCHULZ_STEPS = 5


@dataclass(frozen=True)
class Matrix:
    """`count` weight matrices of shape [rows, cols] (unsharded)."""

    rows: int
    cols: int
    count: float


def state_bytes_per_param(optimizer: str) -> float:
    """Optimizer state bytes per parameter, fp32 master copy included (see the module table)."""
    try:
        return STATE_BYTES_PER_PARAM[optimizer]
    except KeyError:
        raise ValueError(f"optimizer {optimizer!r}: expected one of {sorted(STATE_BYTES_PER_PARAM)}") from None


def elementwise_step_s(acc: Accelerator, optimizer: str, local_params: float) -> float:
    """The element-wise update of `local_params` parameters: the measured AdamW step time per
    parameter where calibrated, else STEP_BYTES_PER_PARAM through HBM at achieved bandwidth."""
    measured = acc.calibration.optimizer_step_per_param
    if measured is not None and optimizer in ADAM_FAMILY:
        # the measured AdamW step, scaled by the bytes the variant moves (bf16 moments 30 of its 38 B
        # per parameter, 8-bit ones 26)
        share = STEP_BYTES_PER_PARAM[optimizer] / STEP_BYTES_PER_PARAM["adamw"]
        return local_params * measured.si("seconds", "calibration.optimizer_step_per_param") * share
    return local_params * STEP_BYTES_PER_PARAM[optimizer] / acc.hbm_achieved_Bps


def newton_schulz_flop(rows: int, cols: int, steps: int = NEWTON_SCHULZ_STEPS) -> float:
    """FLOPs of `steps` quintic Newton-Schulz iterations on an [rows, cols] matrix."""
    r, c = sorted((rows, cols))
    return steps * (4.0 * r * r * c + 2.0 * r**3)


def newton_schulz_s(acc: Accelerator, m: Matrix, steps: int = NEWTON_SCHULZ_STEPS) -> float:
    """Seconds of Newton-Schulz on `m.count` matrices: three bf16 GEMMs per iteration."""
    r, c = sorted((m.rows, m.cols))
    per_step = (gemm_cost(acc, r, r, c, "bf16").time_s + gemm_cost(acc, r, r, r, "bf16").time_s
                + gemm_cost(acc, r, c, r, "bf16").time_s)
    return steps * per_step * m.count


def weight_matrices(layers: Iterable[tuple[Layer, float]]) -> list[Matrix]:
    """The 2-D weights Muon orthogonalises: GEMM weights of body layers (embedding and head run
    AdamW), one matrix per batch entry (an expert), from an unsharded graph."""
    out = []
    for layer, n in layers:
        if layer.kind in ("embedding", "head"):
            continue
        for op in layer.ops:
            if op.kind == "gemm" and op.weight_params > 0:
                out.append(Matrix(op.k, op.n, n * op.batch))
    return out


def optimizer_step_s(system: System, plan: ParallelPlan, local_params: float, matrices: Iterable[Matrix] = ()) -> float:
    """One optimizer step on one rank: the element-wise update of its `local_params` (after
    ZeRO sharding) and, for Muon, its share of Newton-Schulz on the full `matrices` of its
    stage plus the gathers that implies (see the module docstring)."""
    acc = system.accelerator
    t = elementwise_step_s(acc, plan.optimizer, local_params)
    if plan.optimizer != "muon":
        return t
    from perfmodel.comm.collectives import collective_time_s
    from perfmodel.parallel.ranks import group_stride

    mats = list(matrices)
    dp, dp_stride = group_stride(plan, "dp")  # dp x cp ranks
    tp, tp_stride = group_stride(plan, "tp")
    t += sum(newton_schulz_s(acc, m) for m in mats) / dp
    full_bytes = sum(m.rows * m.cols * m.count for m in mats) * plan.grad_bytes
    # the groups where Megatron's rank order puts them (perfmodel/parallel/ranks.py)
    if dp > 1:
        t += collective_time_s(system, "all_gather", full_bytes / tp, dp, dp_stride)
    if tp > 1:
        t += collective_time_s(system, "all_gather", full_bytes / dp, tp, tp_stride)
    return t


__all__ = [
    "Matrix", "elementwise_step_s", "newton_schulz_flop", "newton_schulz_s", "optimizer_step_s",
    "state_bytes_per_param", "weight_matrices",
]
