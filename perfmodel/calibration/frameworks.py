"""Training stacks select mechanisms; they never carry a fitted factor.

A runs file's `framework` column (or `--framework`) names the stack. Each stack sets the
mechanisms the cost models distinguish, each with the evidence from that stack's code (repos at
the commits in EVIDENCE_COMMITS):

    attention      `flash` (FlashAttention-2), `fused` (cuDNN's fused attention where the generation
                   measured it, Hopper; else the newest FlashAttention generation measured on the chip:
                   FA4 on Blackwell, an upper bound for cuDNN there), `flash1` (a FlashAttention-1-era
                   fused kernel: the 2022-23 Triton kernel's measured curve, 0.42-0.68 of FA2)
                   or `unfused` (baddbmm + fused scale-mask-softmax + bmm, with the s x s score
                   matrix through HBM)
    host_dispatch  `eager` (Python framework issues every kernel: the host-per-kernel cost
                   applies), `native` (C/CUDA program, no framework dispatch: host cost 0 beyond
                   the kernel launch the GPU side already pays) or `compiled` (XLA / CUDA graphs:
                   one launch for the step)
    tp_overlap     tensor-parallel collectives run beside the GEMMs by Transformer Engine's userbuffers
                   (ParallelPlan.overlap_tp_comm), at what TE's default configuration costs
                   (engines/userbuffers.py), where the stack can: tp > 1 with sequence parallelism,
                   except in the precisions the stack turns it off for (tp_overlap_off_precisions):
                   megatron-core's NVFP4 runs, whose fp4_param_gather path is incompatible with TP
                   comm overlap (Megatron-Bridge sets tp_comm_overlap = False for nvfp4 in every release
                   of the published tables: scripts/performance/configs/llama3/llama3_llm_pretrain.py:78
                   at v0.2.0 = 25.11, configs/llama/llama31_llm_pretrain.py:87 at v0.4.2 = 26.04.01 and
                   v0.5.0 = 26.06, and the perf_recipes at HEAD, e.g. qwen/gb300/qwen3_moe.py:605)
    moe_dispatcher the MoE token dispatcher when the plan names none (ParallelPlan.moe_dispatcher):
                   `alltoall` (NCCL all-to-all, a row per routed copy) or `flex` (DeepEP / HybridEP,
                   a row once per destination node over the network)
    fsdp           ZeRO-3 parameter layout (ParallelPlan.fsdp_impl): `flat` (FSDP1's
                   FlatParameter, DeepSpeed ZeRO-3: gathered into the buffer the weights view)
                   or `per-param` (FSDP2 fully_shard: copy-out after every all-gather, chunk_cat
                   before every reduce-scatter; engines/stages.DpCollectives)
    p2p_overlap    pipeline sends / receives beside the next chunk's compute under the
                   interleaved schedule (ParallelPlan.overlap_p2p_comm; vp > 1)
    fused_casts    fp8 / fp4 quantize casts fused as Transformer Engine does: into the norm before
                   QKV / FC1, weights once per step, one cast-transpose per output gradient
                   (ParallelPlan.fp8_fused_casts; compute/fp8_recipes.py)
    cross_entropy_impl  the loss over the vocabulary (ParallelPlan.cross_entropy_impl;
                   engines/costs.cross_entropy_op): `fused` Transformer Engine's kernels for
                   megatron-core, `classifier` llm.c's one-kernel fused classifier, else `unfused`
    vocab_multiple the vocabulary padded to a multiple of vocab_multiple x tp rows (ParallelPlan.vocab_multiple,
                   engines/stages.stack_spec): 128 for megatron-lm and megatron-core (Megatron-LM
                   arguments.py --make-vocab-size-divisible-by default 128, which _vocab_size_with_padding
                   multiplies by the tensor-parallel size: GPT-2's 50257 rows run as 50304 at tp 1 or 2),
                   128 for llm.c (its checkpoints carry padded_vocab_size 50304 for GPT-2's 50257, 'padded
                   to 128', train_gpt2.cu); the others run the model's own vocabulary (Hugging Face
                   models ship their vocabulary as the tokenizer has it: GPT-2's 50257 unpadded)
    fp8_recipe     the scaling recipe of plain fp8 GEMMs when the plan names none (None: the
                   plan's default, delayed, Transformer Engine's and Megatron-Core's default)
    grad_reduce_bytes  bytes per gradient element held and reduced over data parallelism when the
                   plan names none (ParallelPlan.grad_reduce_bytes): 2 for megatron-core (Megatron-
                   Bridge's performance recipes set ddp.grad_reduce_in_fp32 = False), else the
                   precision's (4 B fp32 main grads)

    selective      what recompute 'selective' reruns (ParallelPlan.selective_recompute,
                   workload/op_checkpoint.py): `core_attn`, Megatron's attention core (Megatron-Core
                   recompute_modules default ["core_attn"]), for every stack but torchtitan; `op` for
                   torchtitan, whose selective AC in its Llama recipes is the per-op policy
                   (train_configs/llama3_8b.toml:55 selective_ac_option = 'op' @ 6b03ffa3, Dec 2024, and
                   models/llama3/train_configs/llama3_8b.toml:57 @ e7c0cae, Jun 2025; at HEAD the
                   only selective policy, SelectiveAC in torchtitan/distributed/activation_checkpoint.py
                   :185-287): matmul outputs saved but every second matmul of a block, SDPA and the
                   tp reduce-scatter saved, everything else rerun. The torchtitan default of Dec 2024
                   to Jun 2025 without a toml ('2': full AC of every second layer, config_manager.py:524
                   @ 6b03ffa3, :440 @ e7c0cae) is not modelled: the runs name 'op'.

    cp_ring        how context-parallel attention gets the other ranks' K/V (ParallelPlan.cp_ring,
                   engines/torch_ring.py). `p2p` (Transformer Engine's AttnFuncWithCPAndKVP2P, which
                   Megatron-Core runs): K/V chunks of the kv heads passed rank to rank, each hidden behind
                   the attention on the previous chunk; every stack but torchtitan. torchtitan runs
                   PyTorch's experimental context_parallel (torchtitan @ 9dec370, the Dec-2024
                   benchmarks' commit: train.py:269-277 create_context_parallel_ctx per step, utils.py:171-217
                   set_rotate_method + sdpa_kernel([FLASH, EFFICIENT]); config_manager.py:364-376 rotate method
                   'allgather' by default; at HEAD distributed/context_parallel/api.py, torch's default rotation): K/V
                   all-gathered and waited after the first chunk's attention, again in the backward, fp32
                   output merges per step and fp32 dK/dV sent on at every backward step (torch
                   _ContextParallelOptions convert_to_f32, enable_load_balance, ALL_GATHER; the dK/dV
                   rotater ALL_TO_ALL). Its Llama repeats K/V to the query heads before SDPA (models/llama/
                   model.py:201-209 @ 9dec370, keys = repeat_kv(xk, n_rep)) until "GQA without kv repeats"
                   (ff0829c, 2026-01-27), which passes enable_gqa and keeps the kv heads: the stack selects
                   `allgather-repeat-kv`, the code of its published CP benchmarks; a plan for torchtitan
                   after Jan 2026 states `--cp-ring allgather`.
    context_parallel  whether the stack splits one sequence over ranks the way perfmodel models it
                   (a ring of K/V chunks, `cp_ring`): Megatron-Core (--context-parallel-size,
                   Transformer Engine's CP attention), torchtitan (PyTorch's context_parallel), JAX
                   (MaxText's context axis) and plain PyTorch (torch.distributed context_parallel).
                   Not `megatron-lm` (context parallelism arrived with Megatron-Core: its
                   --context-parallel-size and TE's CP attention have no counterpart in the pre-Core
                   megatron/model/transformer.py), `deepspeed` (it splits sequences with DeepSpeed-Ulysses,
                   an all-to-all over attention heads before and after attention: deepspeed/sequence/
                   layer.py DistributedAttention, which perfmodel does not model) and `llm.c` (data
                   parallel and ZeRO only). A cp > 1 plan under those stacks is refused
                   (apply_framework), and the layout search keeps cp 1 for them.
    elementwise    how norms, activations and rotary embeddings run (ParallelPlan.elementwise,
                   compute/eager.py): `fused` (one kernel each) where the stack ships fused kernels or
                   compiles: Megatron-LM (Apex FusedLayerNorm / fused bias-GeLU / bias-dropout-add),
                   Megatron-Core (Transformer Engine's norms, fused SwiGLU and RoPE: apply_rope_fusion,
                   bias_activation_fusion in Megatron-Bridge's recipes), llm.c, JAX / XLA, and torchtitan,
                   whose published runs compiled (every Float8 row and six of eight bf16 rows of
                   benchmarks/llama3_h100_202412_torchtitan.md ran torch.compile; a plan for an eager
                   torchtitan run states `--elementwise eager`). `eager` for the stacks that run a model
                   written in PyTorch ops: pytorch and deepspeed (Hugging Face transformers'
                   LlamaRMSNorm, apply_rotary_pos_emb, act_fn(gate) * up), composer (eager; MPT's
                   LayerNorm and GELU are torch's own single kernels, so only RMSNorm / SwiGLU / RoPE
                   models change). Measured on an H200 (validation/device/h200-2026-12-04): the three
                   chains cost 2.66 ms more per Llama-3-8B layer at 8k tokens than compiled (2.53
                   predicted), and a transformers LlamaDecoderLayer runs at the eager prediction.
    autocast_weights  fp32 parameters cast to bf16 by torch.autocast inside each matmul, every
                   micro-batch (ParallelPlan.autocast_weights, compute/autocast.py): `pytorch` only,
                   the plain loop of nanoGPT, Lightning's bf16-mixed (the FlashAttention training
                   scripts) and Hugging Face Trainer with DDP. DeepSpeed's bf16 mode, FSDP with a
                   bf16 param dtype (composer, torchtitan), Megatron and llm.c hold 16-bit weights.
    expert_gemm    how an MoE layer's expert GEMMs are issued (ParallelPlan.expert_gemm):
                   `per-expert` for megatron-core, whose TEGroupedMLP runs Transformer Engine's
                   GroupedLinear: on its default path nvte_multi_tensor_gemm loops over the local experts
                   and issues one cuBLASLt GEMM each, round-robin over 4 compute streams
                   (TransformerEngine @ d0067d0 common/gemm/cublaslt_gemm.cu multi_stream_cublas_gemm; the
                   CUTLASS grouped kernel is opt-in, NVTE_USE_CUTLASS_GROUPED_GEMM, Hopper only), so the
                   host pays per expert (engines/costs.EXPERT_GEMM_HOST_S). `grouped` (one kernel for
                   all local experts) for the rest: torchtitan's torch._grouped_mm, JAX's ragged_dot.
                   Megatron-Bridge's MXFP8 recipes since 26.06 run the fused grouped MLP of TE's op fuser
                   under full-iteration CUDA graphs (perf_recipes/qwen/common.py
                   _enable_hybridep_full_iteration_mxfp8): a plan states cuda_graphs, which issues the
                   layer as one launch. Hugging Face / DeepSpeed-MoE expert loops in Python (an eager
                   module per expert) are costlier than either and not modelled: `grouped` is a lower
                   bound for them.
    moe_probs_in_activation  where an MoE layer weights the expert outputs by their router
                   probabilities (ParallelPlan.moe_probs_in_activation, workload/moe.py): megatron-core
                   in the experts' activation (TEGroupedMLP weighted_bias_swiglu_impl with permuted_probs;
                   both dispatchers unpermute without probabilities, token_dispatcher.py @ d98e8a64),
                   so the un-permutation keeps no copy of the expert outputs; the others at the
                   combine (Hugging Face's index_add_ of expert_output * routing_weights), which keeps
                   one (C·h bf16 per layer and micro-batch).
    recompute_early_stop  full recompute reruns a block only until the tensors its backward needs are
                   rebuilt (ParallelPlan.recompute_early_stop, workload/early_stop.py): the block's last
                   GEMM and residual add do not rerun. `torchtitan`, which wraps each block in
                   checkpoint_wrapper, NO_REENTRANT by default (torchtitan/distributed/
                   activation_checkpoint.py), on PyTorch releases whose non-reentrant checkpoint stops
                   early by default; under torch.compile the partitioner likewise reruns only what the
                   backward reads. Megatron's full recompute (tensor_parallel.checkpoint, an
                   autograd.Function), DeepSpeed's and Hugging Face's default (use_reentrant=True) rerun the
                   whole block. `composer` is not selected, though llm-foundry checkpoints its bf16 runs
                   non-reentrant (yamls/pretrain/mpt-*.yaml activation_checkpointing_reentrant: false @
                   b2a43a147; its fp8 runs, TE layers, are forced reentrant by scripts/train/train.py there)
                   and its tables ran the mosaicml/pytorch:2.1.0 image (benchmarking/sweep.sh @ b2a43a147),
                   whose checkpoint most likely stops early: the flag that came in off (pytorch/pytorch
                   #90105) was made the default by #96866 (March 2023, between 2.0's and 2.1's branch
                   cuts). Selected and refitted (eleventh session), it takes the public held-out error 9.7
                   -> 9.4 % (llm-foundry 15.5 -> 13.9 %) but the Hopper GEMM factor 0.931 -> 0.912, and
                   NVIDIA's judged DGX Cloud rows (Megatron-Core on H100) 10.4 -> 11.6 % with their
                   interval holding 88 -> 70 %: llm-foundry's H100 rows without checkpointing, 3-14 %
                   optimistic for a reason not found, then set the Hopper factor alone. Left off until
                   that mechanism is found. A plan states it (--recompute-early-stop) where the run's
                   release has it.
    cuda_graphs    the transformer layers captured in CUDA graphs: one host launch per layer and
                   pass (ParallelPlan.cuda_graphs). No stack turns it on by default: Megatron-Bridge's
                   recipes set cuda_graph_impl "none" in 219 of 229 places (src/megatron/bridge/recipes,
                   "transformer_engine" only in some Qwen3-MoE / Nemotron-H recipes); a plan may
                   (--cuda-graphs; a Megatron job's --cuda-graph-impl, workload/megatron_args.py). A
                   stack that compiles its whole step is `host_dispatch` compiled.

MoE settings of Megatron-Bridge's performance recipes (NVIDIA-NeMo/Megatron-Bridge; the releases of
the published tables read at tags v0.2.0 = 25.11, v0.4.2 = 26.04.01, v0.5.0 = 26.06 and HEAD 067f987
= 26.08; scripts/performance/configs/*/..._workload_base_configs.py before 26.08,
src/megatron/bridge/perf_recipes/ at HEAD) and what megatron-core selects from them:

    dispatcher     flex (HybridEP on GB200 / GB300 / B300, DeepEP for DeepSeek-V3 MXFP8 on B200) in most
                   MoE recipes: selected (moe_dispatcher above). alltoall remains where a recipe names no
                   backend: Qwen3 on B200 / H100 and GPT-OSS in 25.11 (v0.2.0 configs), Qwen3-235B on B200
                   at HEAD (perf_recipes/qwen/b200/qwen3_moe.py:105-106); a plan says --moe-dispatcher
                   alltoall for those.
    shared-expert  moe_shared_expert_overlap: the DeepSeek-V3 base recipe sets it (recipes/deepseek/h100/
      overlap      deepseek_v3.py:232) and apply_flex_dispatcher_backend clears it whenever the dispatcher
                   is flex (training/flex_dispatcher_backend.py:85); Megatron-Core forbids it beside the
                   1F1B overlap (transformer_config.py:3040-3041). Not selected (ParallelPlan's default, off).
    fp8 dispatch   no: HybridEP asserts it off (Megatron-LM megatron/core/transformer/moe/fused_a2a.py:327,
                   :402) and no recipe sets moe_dispatch_fwd_dtype (default bf16). Not selected.
    1F1B a2a       overlap_moe_expert_parallel_comm with delay_wgrad_compute (ParallelPlan.moe_a2a_overlap).
      overlap      Selected for MXFP8 MoE layouts that Megatron-Core accepts (ep > 1, no full recompute,
                   pp 1 or the interleaved schedule; transformer_config.py:3007-3032) of a GPT model, not
                   a hybrid (ParallelPlan.hybrid_a2a_refusal: the combined 1F1B needs GPTModel's
                   build_schedule_plan; the Nemotron-H / Nemotron 3 recipes never set it), where the plan
                   does not say: at HEAD (26.08) the MXFP8 MoE recipes turn it on through their full-iteration
                   helpers (perf_recipes/deepseek/common.py:76-77 _enable_deepseek_full_iteration_mxfp8,
                   qwen/common.py:58 _enable_hybridep_full_iteration_mxfp8, gpt_oss/common.py:48-49) or
                   directly (deepseek/b200/deepseek_v3.py:147 DeepSeek-V3 256-GPU B200, qwen/b200 and b300
                   qwen3_moe.py Qwen3-30B 8-GPU, qwen/gb200 and gb300 Qwen3-235B and Qwen3-30B), and
                   26.06 (v0.5.0 ..._FP8_MX_V1/V2 moe_a2a_overlap=True) did the same. The exceptions at
                   HEAD: Qwen3-235B 64-GPU on B200 / B300 (qwen/b200/qwen3_moe.py:154) and DeepSeek-V4
                   (deepseek/gb200/deepseek_v4.py:105). Other precisions: not selected; it is a per-recipe
                   choice there (on for Qwen3 FP8-CS on H100, qwen/h100/qwen3_moe.py:41, :160; off in the
                   BF16 / FP8-CS recipes on Blackwell) and was off in older MXFP8 releases (v0.4.2
                   DeepSeek GB300 / GB200 / B300 V1), so a plan says --moe-a2a-overlap or
                   --no-moe-a2a-overlap where its recipe differs. Measured on the judged-only
                   Megatron-Bridge tables (validation/report/extra): the 26.06 / 26.08 MXFP8 MoE rows
                   went from +37 / +41 % median (pessimistic) to +4 / +5 %.
    CUDA graphs    per recipe: transformer_engine scope attn / moe_router / moe_preprocess in many, full
                   iteration in the 26.06+ MXFP8 ones (together with the 1F1B overlap), none in others.
    forced load    moe_router_force_load_balancing=True in every MoE performance recipe of every release
      balance      (v0.2.0 configs/deepseek/deepseek_llm_pretrain.py:43, qwen3/qwen3_llm_pretrain.py:47,
                   gpt_oss/gpt_oss_llm_pretrain.py:37; HEAD perf_recipes/deepseek/common.py:37): a benchmark
                   choice, not a mechanism of the stack, so moe_imbalance stays at its default; the runs
                   format has no column for it (docs/VALIDATION.md), a plan says --moe-imbalance 1.
    also per recipe  recompute_modules (mla_up_proj, mlp, moe_act, layernorm: a plan names them,
                   --recompute-modules, workload/module_recompute.py; the runs format cannot), the DeepSeek pipeline
                   layout ("Et*4|(t*4|)*14tmL"), paged stash and expert-rank capacity factor 1.5 with full-
                   iteration graphs; moe_permute_fusion and moe_grouped_gemm are on everywhere (the
                   builder's permute and grouped expert GEMMs already assume them).

A mechanism a plan already sets stays set: the framework only turns on what the stack does by
default. FSDP prefetch is ParallelPlan.overlap_fsdp_prefetch, on by default for every stack.

An empty framework applies no stack: the plan's own settings, which are `pytorch`'s but for the
element-wise ops, left fused as the builder makes them (the CPU runs, whose harness writes its own
eager RMSNorm / RoPE without Hugging Face's fp32 upcast, are predicted this way), and the weights,
held in 16 bits (no autocast casts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from perfmodel.calibration.stack_names import stack_id
from perfmodel.compute.eager import ElementwiseImpl
from perfmodel.errors import LayoutError, PerfmodelError
from perfmodel.parallel.plan import ParallelPlan
from perfmodel.precision import recipe_precision
from perfmodel.workload.graph import AttentionImpl, CpRing, CrossEntropyImpl, ExpertGemm
from perfmodel.workload.spec import ModelSpec

# the commits the evidence strings cite (fetched from GitHub)
EVIDENCE_COMMITS = {
    "NVIDIA-NeMo/Megatron-Bridge": "067f987df03b",
    "NVIDIA/Megatron-LM": "d98e8a64ddf3",
    "NVIDIA/TransformerEngine": "d0067d0da6cb",
    "pytorch/torchtitan": "b5bcd76c66d0",
}


class FrameworkError(PerfmodelError):
    """An unknown framework name; the message lists the known ones."""


@dataclass(frozen=True)
class Framework:
    name: str
    attention: AttentionImpl
    host_dispatch: Literal["eager", "native", "compiled"]
    tp_overlap: bool
    evidence: str
    moe_dispatcher: Literal["alltoall", "flex"] = "alltoall"
    moe_evidence: str = ("the stack's MoE layers exchange tokens with one all-to-all per dispatch and combine "
                         "(torch all_to_all_single / Megatron-Core's alltoall dispatcher)")
    fsdp: Literal["flat", "per-param"] = "flat"
    p2p_overlap: bool = False
    fused_casts: bool = False
    cross_entropy_impl: CrossEntropyImpl = "unfused"  # the loss kernels (module docstring)
    fp8_recipe: str | None = None
    cuda_graphs: bool = False
    # precisions whose MoE layouts get the 1F1B all-to-all overlap unless the plan says (module docstring)
    moe_a2a_overlap_precisions: tuple[str, ...] = ()
    # precisions the stack runs without its tp overlap (module docstring, tp_overlap)
    tp_overlap_off_precisions: tuple[str, ...] = ()
    grad_reduce_bytes: int | None = None  # bytes per gradient element held and reduced (None: the precision's)
    selective: str = "core_attn"  # what recompute 'selective' reruns (module docstring)
    vocab_multiple: int = 1  # vocabulary padded to a multiple of this x tp (module docstring)
    cp_ring: CpRing = "p2p"  # how context-parallel attention exchanges K/V (module docstring)
    elementwise: ElementwiseImpl = "fused"  # norms / activations / RoPE fused or as eager ATen chains
    autocast_weights: bool = False  # fp32 parameters cast by torch.autocast every micro-batch (module docstring)
    expert_gemm: ExpertGemm = "grouped"  # MoE expert GEMMs as one kernel or one per local expert (module docstring)
    moe_probs_in_activation: bool = False  # router probabilities applied in the experts' activation (docstring)
    recompute_early_stop: bool = False  # full recompute through PyTorch's non-reentrant checkpoint (docstring)

    @property
    def context_parallel(self) -> bool:
        """Whether the stack runs ring context parallelism (module docstring; NO_CONTEXT_PARALLEL
        names the stacks that do not, with the reason)."""
        return self.name not in NO_CONTEXT_PARALLEL


# the mechanisms a Framework and a ParallelPlan name alike: the stack's value holds where the plan
# does not set the field itself (apply_framework)
STACK_FIELDS = ("cp_ring", "elementwise", "moe_probs_in_activation", "expert_gemm", "autocast_weights", "recompute_early_stop",
                "cross_entropy_impl", "vocab_multiple")

# why a stack without ring context parallelism refuses cp > 1 (module docstring, context_parallel)
NO_CONTEXT_PARALLEL = {
    "megatron-lm": "Megatron-LM before Megatron-Core has no context parallelism (--context-parallel-size and "
                   "Transformer Engine's CP attention came with Megatron-Core; name the megatron-core stack)",
    "deepspeed": "DeepSpeed splits a sequence with DeepSpeed-Ulysses, an all-to-all over attention heads "
                 "(deepspeed/sequence/layer.py DistributedAttention), which perfmodel does not model",
    "llm.c": "llm.c trains data parallel (and ZeRO) only",
}


def context_parallel_refusal(fw: Framework, cp: int) -> LayoutError:
    """The error of a cp > 1 plan under a stack without ring context parallelism (NO_CONTEXT_PARALLEL)."""
    return LayoutError(f"cp {cp} under the {fw.name} stack: {NO_CONTEXT_PARALLEL[fw.name]}; perfmodel models ring "
                       "context parallelism (stacks megatron-core, torchtitan, jax, pytorch)")


# PyTorch's context-parallel ring on K/V repeated to the query heads (module docstring, cp_ring)
TORCHTITAN_CP_RING: CpRing = "allgather-repeat-kv"

FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (
    Framework("megatron-lm", "unfused", "eager", False,
              "Megatron-LM / Megatron-DeepSpeed before Megatron-Core: attention is baddbmm + "
              "FusedScaleMaskSoftmax + bmm (megatron/model/transformer.py CoreAttention; vTrain @ f8dda84 "
              "src/model/fused_softmax.py); FlashAttention only behind the later opt-in --use-flash-attn. "
              "No userbuffers TP overlap, blocking p2p, the vocab-parallel cross-entropy in PyTorch ops "
              "(megatron/core/tensor_parallel/cross_entropy.py), bf16 / fp16 only.", vocab_multiple=128),
    Framework("megatron-core", "fused", "eager", True,
              "Megatron-Core with Transformer Engine as NeMo / Megatron-Bridge's performance recipes run it: "
              "TE DotProductAttention, which runs cuDNN's FusedAttention on Hopper and later whenever it supports "
              "the shape, in preference to flash-attn (TransformerEngine @ d0067d0 transformer_engine/pytorch/"
              "attention/dot_product_attention/utils.py get_attention_backend: 'Disabling FlashAttention to give "
              "FusedAttention preference on Hopper+ for performance reasons'): cuDNN's measured rate on H100 (the "
              "FA3 paper's cuDNN bars, 0.88 of FA3 at 8k causal fwd+bwd), FA4's on Blackwell, where no cuDNN rate "
              "is published (an upper bound); "
              "tp_comm_overlap=True (userbuffers) in the recipes "
              "that run TP > 1 (Megatron-Bridge src/megatron/bridge/recipes/llama/h100/llama3.py 70B / 405B, "
              "gpt/h100/gpt3_175b.py, qwen/h100/qwen3_moe.py), disabled without sequence parallelism "
              "(training/comm_overlap.py); overlap_p2p_comm=True whenever pp > 1 and vp > 1 "
              "(training/comm_overlap.py, 'PP overlap'); cross_entropy_loss_fusion=True with "
              "cross_entropy_fusion_impl 'te' (llama3.py; scripts/performance/utils/overrides.py sets it for every "
              "performance run); TE Linear / LayerNormLinear fp8 casts: norm-fused input "
              "(TransformerEngine module/layernorm_linear.py with_quantized_norm), the fp8 weight reused after the "
              "first micro-batch (module/linear.py update_ws = is_first_microbatch ...), Megatron-Bridge fp8 "
              "recipes keep parameters in fp8 (training/mixed_precision.py fp8_param_gather=True). Megatron-Core's "
              "own defaults are off (megatron/core/model_parallel_config.py overlap_p2p_comm=False, "
              "cross_entropy_loss_fusion=False); CUDA graphs stay off in the recipes (cuda_graph_impl 'none'). "
              "Gradients held and reduced in bf16: every performance recipe sets ddp.grad_reduce_in_fp32 = False "
              "(perf_recipes/_common.py; scripts/performance/configs/*_llm_pretrain.py at v0.2.0), Megatron-Core's "
              "default is fp32. "
              "fp8 recipe: Megatron-Core's default (delayed); the Megatron-Bridge fp8 rows use current scaling "
              "(scripts/performance/utils/precision.py fp8_cs), which a plan states with fp8_recipe.",
              "flex",
              "Megatron-Bridge perf recipes (NVIDIA-NeMo/Megatron-Bridge @ 067f987, src/megatron/bridge/perf_recipes/) "
              "set moe_token_dispatcher_type flex for the MoE benchmarks: HybridEP on GB200 / GB300 / B300 (qwen/*/"
              "qwen3_moe.py, gpt_oss/common.py, deepseek/common.py _enable_deepseek_full_iteration_mxfp8), DeepEP for "
              "DeepSeek-V3 MXFP8 on B200 (deepseek/b200/deepseek_v3.py); alltoall is the model bridges' default "
              "(models/*/..._bridge.py) and stays in the H100 and B200 64-GPU Qwen3-235B recipes: --moe-dispatcher "
              "alltoall for those",
              p2p_overlap=True, fused_casts=True, cross_entropy_impl="fused", grad_reduce_bytes=2,
              moe_a2a_overlap_precisions=("mxfp8",), tp_overlap_off_precisions=("nvfp4",), expert_gemm="per-expert",
              moe_probs_in_activation=True, vocab_multiple=128),
    Framework("deepspeed", "flash", "eager", False,
              "DeepSpeed with Hugging Face models: attention through torch SDPA (flash backend), eager; the "
              "models' norms, SwiGLU and RoPE as written in transformers (LlamaRMSNorm upcasts to fp32, "
              "apply_rotary_pos_emb with rotate_half), one ATen kernel per call.",
              elementwise="eager"),
    Framework("torchtitan", "flash", "eager", False,
              "torchtitan: SDPA flash attention, eager unless --compile (the default); FSDP2: fully_shard per "
              "transformer block and on the root (torchtitan/distributed/fsdp.py, parallelize.apply_fsdp), whose "
              "all-gather copy-out and reduce-scatter chunk_cat run on the compute stream (torch/distributed/fsdp/"
              "_fully_shard/_fsdp_collectives.py); async TP is opt-in; the loss upcasts the logits and runs "
              "F.cross_entropy (torchtitan/components/loss.py pred.float()); float8 through torchao Float8Linear "
              "with dynamic scaling from the current tensor's amax (components/quantization/float8.py; tensorwise "
              "in the Dec-2024 benchmarks, rowwise now); its float8 runs compiled: 'torch.compile fuses the float8 "
              "scaling/casting kernels ... required for competitive performance' (components/quantization/"
              "float8.md:33; mx.py:73-75 warns without it), and every published Float8 row ran torch.compile "
              "(benchmarks/llama3_h100_202412_torchtitan.md tables 1-5), so its fp8 / fp4 casts are fused. "
              "Context parallelism through PyTorch's context_parallel (all-gather rotation, fp32 merges and dK/dV "
              "rotation) on K/V repeated to the query heads (models/llama/model.py repeat_kv @ 9dec370).",
              fsdp="per-param", fp8_recipe="current", selective="op", fused_casts=True, cp_ring=TORCHTITAN_CP_RING,
              recompute_early_stop=True),
    Framework("composer", "flash1", "eager", False,
              "llm-foundry (Composer) as its published benchmark tables ran it: MPT with attn_config attn_impl "
              "'triton' (scripts/train/benchmarking/submit_benchmarks.py --attn_impl default 'triton' and "
              "yamls/pretrain/mpt-*.yaml at b2a43a147 / 5e85bd62d; sweep.sh never overrides it), i.e. "
              "llmfoundry/models/layers/flash_attn_triton.py, the 2022-23 Triton FlashAttention kernel on "
              "triton_pre_mlir: `flash1`. llm-foundry moved its yamls to attn_impl 'flash' in March 2024 "
              "(c26309de5); a plan that names `--attention flash` models that. Eager; FSDP1 "
              "(FullyShardedDataParallel, FlatParameter) with limit_all_gathers and BACKWARD_POST prefetch "
              "(composer FSDPConfig defaults); MPT's LayerNorm and GELU are torch's fused kernels; activation "
              "checkpointing non-reentrant (yamls/pretrain/mpt-*.yaml activation_checkpointing_reentrant: false), "
              "its early stop not selected (module docstring, recompute_early_stop).",
              elementwise="eager"),
    Framework("pytorch", "flash", "eager", False,
              "plain PyTorch DDP / FSDP: F.scaled_dot_product_attention (flash backend), eager dispatch; a "
              "model in PyTorch ops (Hugging Face transformers, nanoGPT-style code): RMSNorm, SwiGLU and RoPE "
              "as chains of ATen kernels; fp32 parameters under torch.autocast (model.float(), autocast(bf16): "
              "nanoGPT, Lightning's bf16-mixed / 16-mixed, Hugging Face Trainer with DDP), each weight cast in "
              "its matmul every micro-batch.",
              elementwise="eager", autocast_weights=True),
    Framework("llm.c", "fused", "native", False,
              "karpathy/llm.c train_gpt2.cu: cuDNN flash attention (USE_CUDNN), and every kernel launched from C "
              "with no framework dispatch; the loss is llm.c's fused classifier (llmc/fused_classifier.cuh @ "
              "0c4b1e1: 'Forwards the Cross Entropy Loss ... Also kicks off the backward pass', one kernel that "
              "overwrites the bf16 logits with their gradient). Its descendants keep that kernel: IST-DASLab/llmq "
              "src/kernels/fused_classifier.cu opens '// Based on llm.c'. llm.c itself trains in bf16; its fp8 "
              "descendant LLMQ casts as Transformer Engine does: the norm writes the GEMM input quantized "
              "(src/models/llama_model.cpp 'Use fused kernel: RMSNorm + quantization in one pass', "
              "rmsnorm_forward_quant), each tensor's abs-max comes from the kernel that produces it, and the "
              "quantized weights are kept across micro-batches (--offload-quants moves them), so fp8 casts are fused.",
              fused_casts=True, cross_entropy_impl="classifier", vocab_multiple=128),
    Framework("jax", "fused", "compiled", False,
              "JAX / XLA (MaxText, Pax): the step is one compiled XLA program; attention is a fused kernel "
              "(Pallas flash / splash attention on TPU, cuDNN on GPU)."),
)}
DEFAULT_FRAMEWORK = "pytorch"
def framework_id(name: str) -> str | None:
    """The stack `name` means (calibration/stack_names.stack_id over FRAMEWORKS); None if none."""
    return stack_id(name, FRAMEWORKS)


def framework(name: str | None) -> Framework:
    """The named stack (empty or None: the default stack)."""
    key = framework_id(name or DEFAULT_FRAMEWORK)
    if key is None:
        raise FrameworkError(f"framework {name!r}; allowed values: {', '.join(FRAMEWORKS)} (empty = {DEFAULT_FRAMEWORK})")
    return FRAMEWORKS[key]


def apply_framework(plan: ParallelPlan, fw: Framework, spec: ModelSpec | None = None) -> ParallelPlan:
    """The plan with the stack's mechanisms (see the module docstring), its FSDP layout and, where
    the plan names none, its MoE dispatcher; a mechanism the plan already turned on stays on, and a
    recipe the plan names stays. The attention kernel, the element-wise ops, the context-parallel
    ring and the meaning of selective recompute are the stack's unless the plan names them."""
    if plan.cp > 1 and not fw.context_parallel:
        raise context_parallel_refusal(fw, plan.cp)
    update: dict[str, object] = {}
    if plan.moe_dispatcher is None:
        update["moe_dispatcher"] = fw.moe_dispatcher
    if plan.fsdp_impl != fw.fsdp:
        update["fsdp_impl"] = fw.fsdp
    if "attention_impl" not in plan.model_fields_set and plan.attention_impl != fw.attention:
        update["attention_impl"] = fw.attention
    if (fw.tp_overlap and plan.tp > 1 and plan.sequence_parallel and not plan.overlap_tp_comm
            and plan.precision not in fw.tp_overlap_off_precisions):
        update["overlap_tp_comm"] = True
    if fw.p2p_overlap and plan.pp > 1 and plan.vp > 1 and not plan.overlap_p2p_comm:
        update["overlap_p2p_comm"] = True
    if fw.fused_casts and not plan.fp8_fused_casts:
        update["fp8_fused_casts"] = True
    if fw.grad_reduce_bytes and plan.grad_reduce_bytes is None:
        update["grad_reduce_bytes"] = fw.grad_reduce_bytes
    if "selective_recompute" not in plan.model_fields_set and plan.selective_recompute != fw.selective:
        update["selective_recompute"] = fw.selective
    for name in STACK_FIELDS:  # the stack's own choice unless the plan names one
        if name not in plan.model_fields_set and getattr(plan, name) != getattr(fw, name):
            update[name] = getattr(fw, name)
    if ("moe_a2a_overlap" not in plan.model_fields_set and plan.precision in fw.moe_a2a_overlap_precisions
            and not plan.moe_a2a_overlap and plan.a2a_overlap_refusal() is None
            and (spec is None or plan.hybrid_a2a_refusal(spec) is None)):
        update["moe_a2a_overlap"] = True
    if fw.cuda_graphs and not plan.cuda_graphs:
        update["cuda_graphs"] = True
    if fw.fp8_recipe and plan.fp8_recipe is None and recipe_precision(fw.fp8_recipe) == plan.precision:
        update["fp8_recipe"] = fw.fp8_recipe
    return plan.model_copy(update=update) if update else plan


# a native or compiled step pays per kernel only the launch gap (2.5 us, compute/ops.DEFAULT_LAUNCH_S)
# instead of the eager 44.5 us per graph kernel (engines/costs.HOST_FWD_S_PER_KERNEL = 8.1 ms / 182)
NATIVE_HOST_FACTOR = 2.5e-6 / (8.1e-3 / 182)


def host_dispatch_factor(fw: Framework) -> float:
    """Multiplier on the eager host seconds per kernel: 1 for eager stacks; for a native C/CUDA
    program or a compiled step the launch gap over the eager cost (NATIVE_HOST_FACTOR, 0.056)."""
    return 1.0 if fw.host_dispatch == "eager" else NATIVE_HOST_FACTOR
