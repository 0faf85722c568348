"""What full recompute skips under PyTorch's non-reentrant checkpoint: its early stop.

A non-reentrant checkpoint (torch.utils.checkpoint(..., use_reentrant=False), the
checkpoint_wrapper NO_REENTRANT that FSDP stacks wrap each block in) records in the forward how
many tensors autograd saved inside the block. The backward reruns the block's forward only until
that many have been packed again, then stops (torch/utils/checkpoint.py, set_checkpoint_early_stop:
"By default, non-reentrant checkpoint stops recomputation as soon as it has computed all needed
Tensors"; the rewrite that brought it is pytorch/pytorch PR #90105, early 2023). An op's inputs are
packed when its autograd node is built, before its kernel runs; its outputs after. So the rerun
never runs the block's tail:

  - the last ops, which save nothing: the residual add, whose backward needs no tensor (the graph
    charges it a dropout mask for memory, Korthikanti et al.'s accounting; the stacks this applies
    to train without dropout, where F.dropout with p = 0 returns its input and saves nothing);
  - the op before them, when it is a GEMM: a Linear saves only its input and weight, and packing
    them is the last save the block makes, so the rerun stops before the GEMM's kernel. For a
    transformer block that is the MLP's down projection: MPT's down_proj, 4h² of its block's 12h²
    GEMM FLOPs (a third); Llama's w2, a quarter of Llama-3-8B's (14336 of 59392 columns).

An op that saves its own output (FlashAttention's log-sum-exp and output, an activation that keeps
its result) runs whole. Traced stacks come to the same rerun: torch.compile's partitioner
recomputes only what the backward graph reads.

Not modelled: the tail's collectives (a tensor-parallel block's last reduce-scatter is not rerun
either); the full-recompute rerun keeps the forward's collectives (engines/costs.layer_time).
"""

from __future__ import annotations

from functools import lru_cache

from perfmodel.workload.graph import Layer, Op

RESIDUAL_SUFFIX = "_residual"  # the builder's residual adds (workload/builder.py dropout_add)


@lru_cache(maxsize=4096)
def early_stop_tail(layer: Layer) -> tuple[Op, ...]:
    """The ops at the end of `layer` that a non-reentrant checkpoint's rerun skips (module
    docstring): its trailing residual adds and the plain GEMM before them."""
    ops = layer.ops
    i = len(ops)
    while i > 0 and ops[i - 1].name.endswith(RESIDUAL_SUFFIX):
        i -= 1
    if i > 0 and ops[i - 1].kind == "gemm" and not ops[i - 1].grouped:
        i -= 1
    return ops[i:]


__all__ = ["RESIDUAL_SUFFIX", "early_stop_tail"]
