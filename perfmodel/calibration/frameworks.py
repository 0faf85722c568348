"""Training stacks select mechanisms; they never carry a fitted factor.

A runs file's `framework` column (or `--framework`) names the stack. Each stack sets the
mechanisms the cost models distinguish, each with the evidence from that stack's code:

    attention      `flash` (fused FlashAttention-style kernel) or `unfused` (baddbmm + fused
                   scale-mask-softmax + bmm, with the s x s score matrix through HBM)
    host_dispatch  `eager` (Python framework issues every kernel: the host-per-kernel cost
                   applies), `native` (C/CUDA program, no framework dispatch: host cost 0 beyond
                   the kernel launch the GPU side already pays) or `compiled` (XLA / CUDA graphs:
                   one launch for the step)
    tp_overlap     tensor-parallel collectives hidden behind GEMMs (ParallelPlan.overlap_tp_comm)
    moe_dispatcher the MoE token dispatcher when the plan names none (ParallelPlan.moe_dispatcher):
                   `alltoall` (NCCL all-to-all, a row per routed copy) or `flex` (DeepEP / HybridEP,
                   a row once per destination node over the network)
    fsdp           ZeRO-3 parameter layout (ParallelPlan.fsdp_impl): `flat` (FSDP1's
                   FlatParameter, DeepSpeed ZeRO-3: gathered into the buffer the weights view)
                   or `per-param` (FSDP2 fully_shard: copy-out after every all-gather, chunk_cat
                   before every reduce-scatter; engines/stages.DpCollectives)

An empty framework means `pytorch` (the documented default stack, today's behaviour).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from perfmodel.errors import PerfmodelError
from perfmodel.parallel.plan import ParallelPlan


class FrameworkError(PerfmodelError):
    """An unknown framework name; the message lists the known ones."""


@dataclass(frozen=True)
class Framework:
    name: str
    attention: Literal["flash", "unfused"]
    host_dispatch: Literal["eager", "native", "compiled"]
    tp_overlap: bool
    evidence: str
    moe_dispatcher: Literal["alltoall", "flex"] = "alltoall"
    moe_evidence: str = ("the stack's MoE layers exchange tokens with one all-to-all per dispatch and combine "
                         "(torch all_to_all_single / Megatron-Core's alltoall dispatcher)")
    fsdp: Literal["flat", "per-param"] = "flat"


FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (
    Framework("megatron-lm", "unfused", "eager", False,
              "Megatron-LM / Megatron-DeepSpeed before Megatron-Core: attention is baddbmm + "
              "FusedScaleMaskSoftmax + bmm (megatron/model/transformer.py CoreAttention; vTrain @ f8dda84 "
              "src/model/fused_softmax.py); FlashAttention only behind the later opt-in --use-flash-attn."),
    Framework("megatron-core", "flash", "eager", False,
              "Megatron-Core / NeMo with Transformer Engine: DotProductAttention picks the fused flash "
              "backend; tp-comm-overlap (userbuffers) is opt-in (--tp-comm-overlap), so off by default.",
              "flex",
              "Megatron-Bridge perf recipes (NVIDIA-NeMo/Megatron-Bridge @ 067f987, src/megatron/bridge/perf_recipes/) "
              "set moe_token_dispatcher_type flex for the MoE benchmarks: HybridEP on GB200 / GB300 / B300 (qwen/*/"
              "qwen3_moe.py, gpt_oss/common.py, deepseek/common.py _enable_deepseek_full_iteration_mxfp8), DeepEP for "
              "DeepSeek-V3 MXFP8 on B200 (deepseek/b200/deepseek_v3.py); alltoall is the model bridges' default "
              "(models/*/..._bridge.py) and stays in the H100 and B200 64-GPU Qwen3-235B recipes: --moe-dispatcher "
              "alltoall for those"),
    Framework("deepspeed", "flash", "eager", False,
              "DeepSpeed with Hugging Face models: attention through torch SDPA (flash backend), eager."),
    Framework("torchtitan", "flash", "eager", False,
              "torchtitan: SDPA flash attention, eager unless --compile; FSDP2: fully_shard per transformer "
              "block and on the root (torchtitan/distributed/fsdp.py, parallelize.apply_fsdp), whose all-gather "
              "copy-out and reduce-scatter chunk_cat run on the compute stream (torch/distributed/fsdp/"
              "_fully_shard/_fsdp_collectives.py).", fsdp="per-param"),
    Framework("composer", "flash", "eager", False,
              "llm-foundry (Composer): MPT attn_config attn_impl flash in its training yamls, eager; FSDP1 "
              "(FullyShardedDataParallel, FlatParameter) with limit_all_gathers and BACKWARD_POST prefetch "
              "(composer FSDPConfig defaults)."),
    Framework("pytorch", "flash", "eager", False,
              "plain PyTorch DDP / FSDP: F.scaled_dot_product_attention (flash backend), eager dispatch."),
    Framework("llm.c", "flash", "native", False,
              "karpathy/llm.c train_gpt2.cu: cuDNN flash attention (USE_CUDNN), fused classifier, and every "
              "kernel launched from C with no framework dispatch."),
    Framework("jax", "flash", "compiled", False,
              "JAX / XLA (MaxText, Pax): the step is one compiled XLA program; attention is a fused kernel "
              "(Pallas flash / splash attention on TPU, cuDNN on GPU)."),
)}
DEFAULT_FRAMEWORK = "pytorch"


def framework(name: str | None) -> Framework:
    """The named stack (empty or None: the default stack)."""
    key = (name or DEFAULT_FRAMEWORK).strip().lower()
    if key not in FRAMEWORKS:
        raise FrameworkError(f"framework {name!r}; allowed values: {', '.join(FRAMEWORKS)} (empty = {DEFAULT_FRAMEWORK})")
    return FRAMEWORKS[key]


def apply_framework(plan: ParallelPlan, fw: Framework) -> ParallelPlan:
    """The plan with the stack's attention kernel, tp overlap, FSDP layout and (where the plan
    names none) MoE dispatcher (other plan fields untouched)."""
    update: dict[str, object] = {}
    if plan.moe_dispatcher is None:
        update["moe_dispatcher"] = fw.moe_dispatcher
    if plan.fsdp_impl != fw.fsdp:
        update["fsdp_impl"] = fw.fsdp
    if plan.attention_impl != fw.attention:
        update["attention_impl"] = fw.attention
    if fw.tp_overlap and not plan.overlap_tp_comm:
        update["overlap_tp_comm"] = True
    return plan.model_copy(update=update) if update else plan


# a native or compiled step pays per kernel only the launch gap (2.5 us, compute/ops.DEFAULT_LAUNCH_S)
# instead of the eager 44.5 us per graph kernel (engines/costs.HOST_FWD_S_PER_KERNEL = 8.1 ms / 182)
NATIVE_HOST_FACTOR = 2.5e-6 / (8.1e-3 / 182)


def host_dispatch_factor(fw: Framework) -> float:
    """Multiplier on the eager host seconds per kernel: 1 for eager stacks; for a native C/CUDA
    program or a compiled step the launch gap over the eager cost (NATIVE_HOST_FACTOR, 0.056)."""
    return 1.0 if fw.host_dispatch == "eager" else NATIVE_HOST_FACTOR
