"""What runs files call the training stacks: the names other teams write for the stacks in
perfmodel/calibration/frameworks.py (aliases, versions and bracketed notes), read as one stack id.
Kept apart from the stacks' mechanisms: it knows spellings, not what a stack runs."""

from __future__ import annotations

import re
from collections.abc import Container

from perfmodel.names import spelling, spelling_without_notes

# other names of the stacks (calibration/frameworks.py FRAMEWORKS), as runs files from other
# teams write them: a name runs the stack whose code it is (NeMo 2 and Megatron-Bridge train with Megatron-Core; Megatron-DeepSpeed
# is Megatron-LM's model code under DeepSpeed; llm-foundry is Composer; MaxText and Pax are JAX;
# Hugging Face Trainer / Accelerate (and TRL / axolotl, which train through it), Lightning and
# nanoGPT are plain PyTorch)
ALIASES: dict[str, str] = {
    **dict.fromkeys(("mcore", "nemo", "nemo2", "nemo-2", "nemo-megatron", "megatron-bridge", "nemo-framework",
                     "nvidia-nemo", "nvidia-nemo-framework", "nvidia-megatron-bridge"), "megatron-core"),
    **dict.fromkeys(("megatron", "megatron-deepspeed", "nvidia-megatron-lm"), "megatron-lm"),
    **dict.fromkeys(("llm-foundry", "mosaicml", "mosaic-composer", "mosaicml-composer"), "composer"),
    **dict.fromkeys(("titan", "pytorch-torchtitan"), "torchtitan"),
    **dict.fromkeys(("torch", "pytorch-fsdp", "fsdp", "fsdp2", "torch-fsdp", "torch-fsdp2", "ddp", "pytorch-ddp",
                     "huggingface", "hugging-face", "hf", "transformers", "hf-trainer", "huggingface-trainer",
                     "hugging-face-trainer", "transformers-trainer",
                     "accelerate", "hf-accelerate", "huggingface-accelerate", "lightning", "pytorch-lightning",
                     "nanogpt", "hf-transformers", "trl", "axolotl",
                     # HF Trainer underneath (LLaMA-Factory); eager PyTorch with flash-attn 2 and their own
                     # TP / PP modules (Hugging Face nanotron, picotron): the `pytorch` mechanisms
                     "llama-factory", "llamafactory", "nanotron", "picotron",
                     # torch-native trainers: torchtune (eager recipes, FSDP2), Colossal-AI and ByteDance's
                     # veScale (PyTorch with their own parallel wrappers), Optimum Habana (HF Trainer on Gaudi)
                     "torchtune", "colossal-ai", "colossalai", "vescale", "optimum-habana",
                     "hugging-face-transformers", "huggingface-transformers"), "pytorch"),
    # DeepSpeed named with its ZeRO stage (the stage is the zero_stage column's)
    **dict.fromkeys(("deepspeed-zero", "deepspeed-zero1", "deepspeed-zero2", "deepspeed-zero3", "ds-zero"), "deepspeed"),
    # LLMQ (IST-DASLab/llmq): a C++/CUDA trainer built on llm.c's kernels, native dispatch, fp8 casts
    # fused in the producing kernels: the mechanisms `llm.c` selects
    **dict.fromkeys(("llmc", "llm-c", "llmq"), "llm.c"),
    **dict.fromkeys(("maxtext", "pax", "paxml", "praxis", "flax", "t5x", "levanter", "xla", "jax-xla", "jax/xla"), "jax"),
}


# what a runs file adds to a stack's name beside a bracketed note: a version ('NeMo 2.0',
# 'DeepSpeed 0.14', 'megatron-core r0.12', a container '24.07') or a release date
_VERSION = re.compile(r"(-(v|r)?\d+([.-]\d+)*[a-z]*\d*(\+[a-z0-9.]+)?)+$")


def stack_id(name: str, known: Container[str]) -> str | None:
    """The stack `name` means among the `known` stack ids: the id itself or an alias up to case,
    spaces and '_', with a bracketed note or a trailing version dropped ('NeMo 2.0', 'MaxText
    (JAX)'), or parts joined by '/' that all name one stack ('JAX/MaxText'); None if none."""
    for key in (spelling(name), _VERSION.sub("", spelling_without_notes(name))):
        if key in known:
            return key
        if key in ALIASES:
            return ALIASES[key]
    if "/" in name:
        # 'JAX/MaxText', 'NeMo/Megatron-Core': the parts name one stack, or the name is ambiguous
        found = {stack_id(part, known) for part in name.split("/") if part.strip()}
        if len(found) == 1:
            return found.pop()
    return None
