"""ParallelPlan: the layout and training settings of one job, validated against model and GPUs."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from perfmodel import precision as registry
from perfmodel.errors import LayoutError, SpecError
from perfmodel.parallel.partial_recompute import window_label, window_notes
from perfmodel.parallel.schedules import get_schedule
from perfmodel.parallel.split import pipeline_split
from perfmodel.validators import reject_bool_ints
from perfmodel.workload.graph import AttentionImpl, CpRing, CrossEntropyImpl, ElementwiseImpl, ExpertGemm
from perfmodel.workload.module_recompute import DEFAULT_SELECTIVE, parse_selective, recompute_module_notes
from perfmodel.workload.spec import ModelSpec

Recompute = Literal["none", "selective", "full"]
Optimizer = Literal["adam", "adamw", "adamw-bf16", "adam8bit", "sgd", "adafactor", "muon"]  # compute/optimizers.py
OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
# 'op' or Megatron-Core recompute modules, canonical (workload/module_recompute.py)
SelectiveRecompute = Annotated[str, BeforeValidator(parse_selective)]

# Tokens on the busiest expert-parallel rank over the mean, as trained MoEs route: on GLM-5's MoE
# layers (128 experts, ep 8, H100, no auxiliary loss) the wait for the busiest rank wastes 18.6 %
# of the GPU time of each MoE layer on average (Qi, Liu, Zhao 2026, "FEPLB", arXiv 2604.19654,
# Fig. 1b), i.e. 1 - mean/max = 0.186 -> max/mean = 1 / (1 - 0.186) = 1.23. Benchmarks that
# force-balance the routing (the NeMo / Megatron-Bridge performance tables say they do) set 1.
MOE_IMBALANCE_DEFAULT = 1.0 / (1.0 - 0.186)


class ParallelPlan(BaseModel):
    """Degrees multiply to the GPU count: dp·tp·pp·cp. Expert layers fold onto the same ranks
    (Megatron-Core MoE parallel folding, Liu et al. 2025 "MoE Parallel Folding", arXiv 2504.14960):
    each pipeline stage's tp·cp·dp ranks are laid out as etp x ep x edp for the experts (etp
    fastest in rank order, then ep, then edp), so ep·etp must divide tp·cp·dp."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dp: int = Field(1, gt=0)
    tp: int = Field(1, gt=0)
    pp: int = Field(1, gt=0)
    cp: int = Field(1, gt=0)
    ep: int = Field(1, gt=0, description="expert-parallel degree (experts split over ep ranks)")
    etp: int = Field(1, gt=0, description="expert tensor-parallel degree (each expert's FFN width split etp ways)")
    vp: int = Field(1, gt=0, description="virtual stages per pipeline rank (interleaving)")
    sequence_parallel: bool = False
    zero_stage: Literal[0, 1, 2, 3] = 0
    micro_batch: int = Field(1, gt=0, description="sequences per micro-batch")
    global_batch: int = Field(1, gt=0, description="sequences per optimizer step")
    seq_len: int | None = Field(None, gt=0, description="defaults to the workload's")
    recompute: Recompute = "none"
    selective_recompute: SelectiveRecompute = Field(DEFAULT_SELECTIVE, description=(
        "what recompute 'selective' reruns: Megatron-Core recompute modules, comma-separated, from core_attn, "
        "moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts (workload/module_recompute.py; default "
        "core_attn, the attention core), or op (torchtitan's per-op policy, workload/op_checkpoint.py: saves "
        "matmul outputs but every second one, attention and reduce-scatters; reruns the rest); the training "
        "stack selects core_attn or op where the plan does not say"))
    recompute_early_stop: bool = Field(False, description=(
        "full recompute as PyTorch's non-reentrant checkpoint reruns a block: it stops once the tensors the "
        "backward needs are rebuilt, so the block's last GEMM and its residual add do not rerun "
        "(workload/early_stop.py); the training stack selects it where the plan does not say"))
    recompute_method: Literal["uniform", "block"] = Field("uniform", description=(
        "which layers recompute 'full' reruns (Megatron-Core recompute_method, parallel/partial_recompute.py): "
        "uniform (every layer, checkpointed in runs of recompute_num_layers, default 1) or block (only the first "
        "recompute_num_layers layers of each model chunk; the rest keep their activations)"))
    recompute_num_layers: int | None = Field(None, gt=0, description=(
        "with recompute 'full' (Megatron-Core recompute_num_layers): layers per checkpointed run (uniform) or "
        "layers recomputed per model chunk (block); unset: 1 (uniform); block needs it"))
    offload_activations: int = Field(0, ge=0, description=(
        "transformer layers whose saved activations go to host memory in the forward and come back for the "
        "backward (Megatron-Core cpu_offloading_num_layers over Transformer Engine's offload scheduler; "
        "engines/offload.py): the first N layers, over the node's host link; needs pp 1, no recompute and no "
        "per-layer CUDA graphs"))
    precision: registry.PrecisionName = Field(registry.DEFAULT_PRECISION, description=(
        "GEMM precision, one of perfmodel/precision.py PRECISIONS (or an alias)"))
    optimizer: Optimizer = Field(
        "adam", description="state and step cost: perfmodel/compute/optimizers.py (adam and adamw cost the same; "
        "adamw-bf16 keeps bf16 moments beside the fp32 master; sgd has momentum; muon orthogonalises 2-D weights "
        "by Newton-Schulz)")
    fp8_recipe: registry.RecipeName | None = Field(
        None, description="scaling recipe of fp8 / fp4 GEMMs (perfmodel/precision.py RECIPES): delayed, current, "
        "blockwise (fp8), mxfp8, nvfp4; default: the precision's first (fp8 delayed, Transformer Engine's default)")
    schedule: str | None = Field(None, description="a pipeline schedule of perfmodel/parallel/schedules/; "
                                 "default: 1f1b, interleaved when vp > 1")
    attention_impl: AttentionImpl = "flash"
    overlap_dp_comm: bool = Field(True, description="DP gradient reduction overlaps backward")
    overlap_fsdp_prefetch: bool = Field(True, description="FSDP all-gathers prefetched")
    fsdp_impl: Literal["flat", "per-param"] = Field("flat", description=(
        "ZeRO-3 parameter layout: flat (FSDP1 FlatParameter, DeepSpeed ZeRO-3: gathered into the buffer the "
        "weights view) or per-param (FSDP2 fully_shard: a copy-out kernel after every all-gather and chunk_cat "
        "before every reduce-scatter, engines/stages.DpCollectives)"))
    cp_ring: CpRing = Field("p2p", description=(
        "how context-parallel attention gets the other ranks' K/V: p2p (Transformer Engine's ring: K/V chunks of "
        "the kv heads passed rank to rank, each hidden behind the attention on the previous chunk), allgather "
        "(PyTorch's context_parallel: K/V all-gathered behind the first chunk's attention only, again in the "
        "backward, fp32 merges per step and fp32 dK/dV rotated each backward step; engines/torch_ring.py) or "
        "allgather-repeat-kv (the same with K/V repeated to the query heads before the attention call); the "
        "training stack selects it"))
    elementwise: ElementwiseImpl = Field("fused", description=(
        "how norms, activations and rotary embeddings run: fused (one kernel each: Megatron-Core / Transformer "
        "Engine / Apex kernels or a compiled step) or eager (a model written in PyTorch ops run eagerly, as "
        "Hugging Face transformers or torchtitan without --compile: RMSNorm, SwiGLU and RoPE as chains of "
        "ATen kernels over whole tensors; perfmodel/compute/eager.py); the training stack selects it"))
    expert_gemm: ExpertGemm = Field("grouped", description=(
        "how an MoE layer's expert GEMMs are issued: grouped (one kernel for all local experts: torch._grouped_mm, "
        "DeepGEMM, a fused grouped MLP) or per-expert (Transformer Engine's GroupedLinear on its default cuBLAS "
        "path: one cuBLASLt GEMM per local expert, round-robin over 4 streams, each issued by the host; "
        "engines/costs.EXPERT_GEMM_HOST_S); the training stack selects it"))
    autocast_weights: bool = Field(False, description=(
        "parameters held in fp32 and cast to 16 bits by torch.autocast inside every matmul, each micro-batch "
        "(a plain PyTorch loop: model.float() + torch.autocast), instead of 16-bit weights with the fp32 master "
        "copy in the optimizer; 6 B per weight forward, 6 B backward, 2 B kept, and 12 B per parameter for each "
        "micro-batch after the first, accumulating fp32 gradients (perfmodel/compute/autocast.py); 16-bit "
        "precisions only; the training stack selects it"))
    overlap_tp_comm: bool = Field(False, description=(
        "Transformer Engine userbuffers: the sequence-parallel all-gathers / reduce-scatters run beside the "
        "GEMMs that consume or produce them, at the cost engines/userbuffers.py gives (needs sequence_parallel)"))
    overlap_p2p_comm: bool = Field(False, description=(
        "pipeline sends / receives run asynchronously beside the next chunk's compute (Megatron-Core "
        "overlap_p2p_comm, interleaved schedule) instead of blocking the compute stream"))
    cuda_graphs: bool = Field(False, description=(
        "the transformer layers' kernels are captured in CUDA graphs (Megatron-Core cuda_graph_impl local / "
        "transformer_engine): one host launch per layer and pass instead of one eager dispatch per kernel"))
    fp8_fused_casts: bool = Field(False, description=(
        "fp8 / fp4 quantize casts fused as Transformer Engine does: into the norm before QKV / FC1, weights "
        "cast once per step, one cast-transpose per output gradient (perfmodel/compute/fp8_recipes.py)"))
    cross_entropy_impl: CrossEntropyImpl = Field("unfused", description=(
        "the softmax cross-entropy over the vocabulary: 'unfused' fp32 softmax, loss and gradient kernels; "
        "'fused' Transformer Engine's kernels that write the logits' gradient in the forward (Megatron-Core "
        "cross_entropy_loss_fusion); 'classifier' llm.c's fused classifier, one kernel that overwrites the bf16 "
        "logits with their gradient (engines/costs.cross_entropy_op)"))
    vocab_multiple: int = Field(1, ge=1, le=4096, description=(
        "the stack pads the vocabulary to a multiple of vocab_multiple x tp rows, and the embedding and output "
        "layer run on the padded rows (Megatron's --make-vocab-size-divisible-by, default 128; llm.c's padded "
        "vocabulary); 1 = the model's own vocabulary"))
    moe_imbalance: float = Field(MOE_IMBALANCE_DEFAULT, ge=1.0, allow_inf_nan=False, description=(
        "MoE: tokens on the busiest expert-parallel rank over the mean (1 = balanced routing; default 1.23, "
        "see MOE_IMBALANCE_DEFAULT)"))
    moe_fp8_dispatch: bool = Field(False, description="MoE: tokens dispatched in fp8 (DeepSeek-V3, DeepEP) under fp8 GEMMs")
    moe_shared_expert_overlap: bool = Field(False, description="MoE: shared experts run beside the dispatch/combine all-to-alls")
    act_fp8_input_store: bool = Field(False, description=(
        "the SwiGLU activations keep their input for the backward in fp8 (1 B) instead of bf16 (Megatron-Core "
        "--activation-func-fp8-input-store; DeepSeek-V3 caches the SwiGLU inputs in fp8); SwiGLU models only"))
    moe_probs_in_activation: bool = Field(False, description=(
        "MoE: the router probabilities weight the experts' activation (Megatron-Core's TEGroupedMLP, "
        "weighted SwiGLU) instead of the un-permutation, which then keeps no copy of the expert outputs "
        "(workload/moe.py); the training stack selects it"))
    moe_a2a_overlap: bool = Field(False, description=(
        "MoE: expert-parallel all-to-alls of one micro-batch hide behind another's compute (Megatron-Core "
        "overlap_moe_expert_parallel_comm, the combined 1F1B schedule)"))
    moe_dispatcher: Literal["alltoall", "flex"] | None = Field(None, description=(
        "MoE token dispatcher: alltoall (Megatron-Core MoEAlltoAllTokenDispatcher, one NCCL all-to-all, a row per "
        "routed copy) or flex (--moe-token-dispatcher-type flex over DeepEP / HybridEP: a token crosses the network "
        "once per destination domain and NVLink once per destination rank); empty = the training stack's default"))
    moe_a2a_sms: int | None = Field(None, ge=1, description=(
        "MoE: SMs the dispatch / combine kernels hold while they run, which the compute beside an overlapped "
        "exchange loses (Megatron-Core moe_flex_dispatcher_num_sms); empty = the dispatcher's default: NCCL's 16 "
        "channels for alltoall, 20 for flex (engines/costs.A2A_SMS)"))
    grad_reduce_bytes: int | None = Field(None, description="bytes per gradient element reduced; default the "
                                          "precision's grad_bytes (perfmodel/precision.py: 4, fp32, for bf16/fp8; 2 for fp16)")

    def __init__(self, **data: object) -> None:
        try:
            super().__init__(**data)
        except ValidationError as e:
            raise _layout_error(e) from None

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def edp(self) -> int:
        """Expert data-parallel degree: the replicas of each expert shard, tp·cp·dp / (ep·etp)."""
        return self.tp * self.cp * self.dp // (self.ep * self.etp)

    @property
    def num_micro_batches(self) -> int:
        return self.global_batch // (self.micro_batch * self.dp)

    @property
    def schedule_name(self) -> str:
        if self.schedule:
            return self.schedule
        return "interleaved" if self.vp > 1 else "1f1b"

    @property
    def recompute_label(self) -> str:
        """The recompute as the layout line says it: 'selective (core_attn)', 'full (first 4 layers per
        chunk)', 'none'."""
        if self.recompute == "selective":
            return f"selective ({self.selective_recompute})"
        window = window_label(self)
        return f"{self.recompute} ({window})" if window else self.recompute

    @property
    def fp8_recipe_name(self) -> str | None:
        """The recipe fp8 / fp4 GEMMs run under (the precision's default when none is named)."""
        recipes = registry.get(self.precision).recipes
        return self.fp8_recipe or (recipes[0] if recipes else None)

    @property
    def grad_bytes(self) -> int:
        if self.grad_reduce_bytes:
            return self.grad_reduce_bytes
        return registry.get(self.precision).grad_bytes

    @model_validator(mode="before")
    @classmethod
    def _no_bool_ints(cls, data: Any) -> Any:
        return reject_bool_ints(cls, data)

    @model_validator(mode="after")
    def _check(self) -> ParallelPlan:
        if self.global_batch % (self.micro_batch * self.dp):
            raise LayoutError(
                f"global_batch {self.global_batch} is not divisible by micro_batch {self.micro_batch} x dp {self.dp}"
                f" = {self.micro_batch * self.dp}; nearest valid global batches: "
                f"{_nearest_multiples(self.global_batch, self.micro_batch * self.dp)}"
            )
        folded = self.tp * self.cp * self.dp
        if folded % (self.ep * self.etp):
            valid = [e for e in _divisors(folded) if (folded // e) % self.etp == 0]
            raise LayoutError(
                f"ep {self.ep} x etp {self.etp} = {self.ep * self.etp} must divide tp {self.tp} x cp {self.cp} x dp {self.dp}"
                f" = {folded} (MoE parallel folding); valid ep with etp {self.etp}: {valid}"
            )
        if self.vp > 1 and self.pp == 1:
            raise LayoutError(f"vp {self.vp} needs pp > 1 (got pp 1)")
        get_schedule(self.schedule_name).check(self.pp, self.vp, self.num_micro_batches)
        if self.fp8_recipe is not None and self.fp8_recipe not in registry.get(self.precision).recipes:
            allowed = list(registry.get(self.precision).recipes) or "none (16/32-bit GEMMs)"
            raise LayoutError(f"fp8_recipe {self.fp8_recipe!r} runs precision {registry.recipe_precision(self.fp8_recipe)}, "
                              f"not {self.precision}; recipes for {self.precision}: {allowed}")
        self._check_recompute_window()
        if self.moe_a2a_overlap:
            self._check_a2a_overlap()
        if self.offload_activations:
            self._check_offload()
        if self.overlap_tp_comm and self.tp > 1 and not self.sequence_parallel:
            # Megatron-LM megatron/training/arguments.py:1441-1442; Megatron-Bridge turns it off
            # (training/comm_overlap.py): userbuffers overlap all-gathers and reduce-scatters only
            raise LayoutError(f"overlap_tp_comm (Transformer Engine userbuffers) with tp {self.tp} needs "
                              "sequence_parallel true; turn sequence parallelism on or the overlap off")
        if self.sequence_parallel and self.tp == 1:
            object.__setattr__(self, "sequence_parallel", False)
        return self

    def _check_recompute_window(self) -> None:
        """Megatron-Core's rules (transformer_config.py:1908-1931): recompute_num_layers only with full
        recompute, and the block method needs it."""
        if self.recompute != "full" and (self.recompute_num_layers is not None or self.recompute_method != "uniform"):
            got = (f"recompute_num_layers {self.recompute_num_layers}" if self.recompute_num_layers is not None
                   else f"recompute_method {self.recompute_method}")
            raise LayoutError(f"{got} chooses which layers full recompute reruns; it needs recompute full "
                              f"(got recompute {self.recompute}); allowed with {self.recompute}: recompute_method "
                              "uniform and no recompute_num_layers")
        if self.recompute_method == "block" and self.recompute_num_layers is None:
            raise LayoutError("recompute_method block needs recompute_num_layers: the layers per model chunk to "
                              "recompute (1 to the chunk's layers)")

    def _check_a2a_overlap(self) -> None:
        """Megatron-Core refuses overlap_moe_expert_parallel_comm outside these layouts
        (megatron/core/transformer/transformer_config.py, __post_init__): a plan that asks for it
        there describes a run that cannot start, so it is an error, not an overlap."""
        why = self.a2a_overlap_refusal()
        if why is not None:
            raise LayoutError(f"moe_a2a_overlap (Megatron-Core overlap_moe_expert_parallel_comm) {why}")

    def _check_offload(self) -> None:
        why = self.offload_refusal()
        if why is not None:
            raise LayoutError(f"offload_activations {self.offload_activations} (Megatron-Core cpu_offloading) {why}")

    def offload_refusal(self) -> str | None:
        """Why Megatron-Core would refuse activation offloading on this layout, or None
        (NVIDIA/Megatron-LM @ d98e8a64 megatron/core/transformer/transformer_config.py:1891-1899, :2800-2801)."""
        if self.pp > 1:
            return f"runs without pipeline parallelism: pp 1 (got pp {self.pp})"
        if self.recompute != "none":
            return f"runs without activation recomputation: recompute none (got {self.recompute})"
        if self.cuda_graphs:
            return "runs without per-layer CUDA graphs: cuda_graphs false"
        return None

    def a2a_overlap_refusal(self) -> str | None:
        """Why Megatron-Core would refuse the 1F1B all-to-all overlap on this layout, or None."""
        if self.ep == 1:
            return "needs expert parallelism: ep > 1 (got ep 1)"
        if self.recompute == "full":
            return "runs without full recomputation: recompute none or selective (got full)"
        if self.pp > 1 and self.vp == 1 and self.schedule_name != "dualpipe":
            # DualPipe pairs a forward and a backward chunk of opposite directions on one rank, the
            # overlap DeepSeek-V3 runs (report §3.2.1); Megatron-Core needs two virtual stages for it
            return f"with pp {self.pp} > 1 needs the interleaved schedule (vp > 1) or dualpipe (got vp 1)"
        if self.moe_shared_expert_overlap:
            return "and moe_shared_expert_overlap exclude each other; turn one off"
        return None

    def hybrid_a2a_refusal(self, spec: ModelSpec) -> str | None:
        """Why Megatron-Core cannot run the 1F1B all-to-all overlap for this model, or None. The
        combined 1F1B schedule asks the model for its schedule plan (pipeline_parallel/
        combined_1f1b.py:377-382; utils.py:356 "model must implement build_schedule_plan"), which
        only GPTModel implements (models/gpt/gpt_model.py:843): a hybrid (Mamba) model, Megatron's
        MambaModel / HybridModel built from a layer pattern, has none. NVIDIA's Nemotron-H and
        Nemotron 3 performance recipes accordingly never set it (Megatron-Bridge
        perf_recipes/nemotronh/, v0.5.0 configs/nemotronh/). DualPipe is DeepSeek's own schedule."""
        if spec.layer_pattern is not None and self.schedule_name != "dualpipe":
            return (f"needs a GPT model: {spec.id} is a hybrid (layer_pattern), and Megatron-Core's combined "
                    "1F1B schedule needs build_schedule_plan, which only GPTModel has; turn the overlap off")
        return None

    def validate_for(self, spec: ModelSpec, n_gpus: int | None = None) -> list[str]:
        """Check the plan against a model (and GPU count); return notes on what was assumed."""
        notes: list[str] = []
        if n_gpus is not None and self.world != n_gpus:
            raise LayoutError(
                f"world size {n_gpus} != dp {self.dp} x tp {self.tp} x pp {self.pp} x cp {self.cp} = {self.world}"
            )
        if spec.is_transformer:
            heads, kv = spec.num_heads or 1, spec.kv_heads
            if heads % self.tp:
                raise LayoutError(f"tp {self.tp} does not divide num_heads {heads} of {spec.id}; valid tp: {_divisors(heads)}")
            if kv % self.tp and self.tp % kv:
                raise LayoutError(f"tp {self.tp} and num_kv_heads {kv} of {spec.id}: one must divide the other; valid tp: {_divisors(kv)}")
            if spec.csa is not None:
                for what, n in (("csa.o_groups", spec.csa.o_groups), ("csa.index_heads", spec.csa.index_heads)):
                    if n % self.tp:
                        raise LayoutError(f"tp {self.tp} does not divide {what} {n} of {spec.id}; valid tp: {_divisors(n)}")
                if self.cp > 1:
                    raise LayoutError(f"cp {self.cp}: context parallelism of {spec.id}'s compressed sparse attention "
                                      "is not modelled; valid cp: 1")
            s = self.seq_len or spec.seq_len
            spec.check_seq_len(s)
            if s % self.cp:
                raise LayoutError(f"cp {self.cp} does not divide seq_len {s}")
            if self.cp > 1 and (s // self.cp) % 2 and spec.causal:
                notes.append("cp chunks of odd length: load balancing of causal attention assumed anyway")
            notes += self.pipeline_notes(spec.num_layers, spec.id)
            if self.offload_activations:
                check_offload(self.offload_activations, spec.num_layers)
        elif self.tp > 1 or self.cp > 1 or self.ep > 1 or self.etp > 1:
            raise LayoutError(f"{spec.family} model {spec.id}: tp/cp/ep/etp need a transformer "
                              f"(got tp {self.tp}, cp {self.cp}, ep {self.ep}, etp {self.etp})")
        else:
            notes += self.pipeline_notes(spec.num_layers, spec.id)
            if self.offload_activations:
                raise LayoutError(f"offload_activations {self.offload_activations}: activation offloading is "
                                  f"Megatron-Core's for transformer layers; {spec.id} is a {spec.family} model; allowed: 0")
        if self.recompute == "selective":
            notes += recompute_module_notes(self.selective_recompute, spec)
        if spec.num_layers:
            notes += window_notes(spec.num_layers, self)
        if spec.family == "moe":
            E = spec.num_experts or 1
            if E % self.ep:
                raise LayoutError(f"ep {self.ep} does not divide num_experts {E} of {spec.id}; valid ep: {_divisors(E)}")
            if self.ep > 1 and self.moe_imbalance > self.ep:
                raise LayoutError(f"moe_imbalance {self.moe_imbalance:g}: the busiest of {self.ep} expert-parallel ranks "
                                  f"receives at most every token, {self.ep} x the mean; allowed: 1 to ep ({self.ep})")
            width = spec.moe_ffn_hidden or spec.hidden
            if width % self.etp:
                raise LayoutError(f"etp {self.etp} does not divide moe_ffn_hidden {width} of {spec.id}; "
                                  f"valid etp: {[d for d in _divisors(width) if d <= 64]}")
            if self.tp > 1 and not self.sequence_parallel:
                notes.append("MoE with tp > 1 and no sequence parallelism: Megatron-Core requires it; "
                             "each tp rank routes 1/tp of the tokens as with it")
            why = self.hybrid_a2a_refusal(spec) if self.moe_a2a_overlap else None
            if why is not None:
                raise LayoutError(f"moe_a2a_overlap (Megatron-Core overlap_moe_expert_parallel_comm) {why}")
        elif self.ep > 1 or self.etp > 1:
            raise LayoutError(f"ep {self.ep} / etp {self.etp} > 1 but {spec.id} has no experts")
        return notes


    def pipeline_notes(self, num_layers: int, model_id: str) -> list[str]:
        """Megatron's split of `num_layers` over pp x vp (a LayoutError if it has none) and what
        the schedule says about this layout."""
        if self.pp == 1:
            return []
        try:
            note = pipeline_split(num_layers, self.pp, self.vp).note
        except LayoutError as e:
            raise LayoutError(f"{model_id}: {e}") from None
        notes = ([note] if note else []) + get_schedule(self.schedule_name).check(self.pp, self.vp, self.num_micro_batches)
        if self.schedule_name == "dualpipe" and self.ep > 1 and not self.moe_a2a_overlap:
            notes.append("dualpipe: the MoE all-to-alls are charged exposed; DeepSeek overlap them inside the "
                         "forward / backward pairs, which moe_a2a_overlap (--moe-a2a-overlap) models")
        return notes


def check_offload(n_offload: int, n_layers: int) -> None:
    """Activation offloading's layer count (engines/offload.py) against Megatron-Core's bound
    (transformer_config.py: 0 <= cpu_offloading_num_layers < num_layers)."""
    if not 0 <= n_offload < n_layers:
        raise LayoutError(f"offload_activations {n_offload}: activation offloading takes fewer layers than the "
                          f"{n_layers} transformer layers on the rank (Megatron-Core cpu_offloading_num_layers); "
                          f"allowed: 0 to {n_layers - 1}")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _nearest_multiples(x: int, m: int) -> list[int]:
    lo = (x // m) * m
    return [v for v in (lo, lo + m) if v > 0]


def _layout_error(e: ValidationError) -> LayoutError:
    """One LayoutError naming every bad field, its value and what is allowed."""
    parts = []
    for err in e.errors():
        inner = (err.get("ctx") or {}).get("error")
        if isinstance(inner, LayoutError):
            return inner
        if isinstance(inner, SpecError):
            parts.append(f"{inner.field}: {inner.problem}; allowed: {inner.expected}")
            continue
        field = ".".join(str(p) for p in err["loc"]) or "plan"
        allowed = (err.get("ctx") or {}).get("expected") or err["msg"]
        parts.append(f"{field}={err.get('input')!r}: {allowed}")
    return LayoutError("invalid parallel plan: " + "; ".join(parts))
