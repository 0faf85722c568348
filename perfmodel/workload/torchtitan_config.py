"""A torchtitan job config (TOML) -> (ModelSpec, layout settings).

    >>> from perfmodel.workload.torchtitan_config import load_torchtitan
    >>> job = load_torchtitan("llama3_70b.toml", n_gpus=64)
    >>> job.spec.id, job.layout["tp"], job.layout["zero"]
    ('llama3-70b', 8, 3)

Read (torchtitan's JobConfig sections and field names):
- [model] name + flavor -> a workload of workloads/ (`FLAVORS`); converters containing "float8"
  (or [float8] enable_float8_linear / a [quantize] float8 section) -> fp8 GEMMs with tensorwise
  (current) scaling ([float8] recipe_name rowwise is refused); "mx" -> mxfp8.
- [optimizer] name: AdamW, Adam, SGD, Muon.
- [training] local_batch_size (older files: batch_size) = sequences per data-parallel rank per
  step, global_batch_size (default local x dp), seq_len.
- [parallelism] data_parallel_replicate_degree x data_parallel_shard_degree (-1 = fill the GPUs),
  tensor_parallel_degree, pipeline_parallel_degree (+ pipeline_parallel_microbatch_size,
  pipeline_parallel_schedule), context_parallel_degree, expert_parallel_degree,
  expert_tensor_parallel_degree; FSDP (shard > 1) is ZeRO-3, DDP (replicate > 1) ZeRO-0, and both
  at once (HSDP) is refused; sequence parallelism comes with torchtitan's tensor parallelism.
- [activation_checkpoint] mode none / selective / full; selective with selective_ac_option "op"
  (torchtitan's per-op policy, workload/op_checkpoint.py; the estimate runs under the torchtitan
  framework, which selects it). An integer option (full AC of every n-th block, torchtitan's
  config_manager default "2") is refused: perfmodel does not model a per-layer mix.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfmodel.errors import SpecError
from perfmodel.workload.catalog import get_workload
from perfmodel.workload.spec import ModelSpec

FLAVORS: dict[tuple[str, str], str] = {
    ("llama3", "8B"): "llama3-8b", ("llama3", "70B"): "llama3-70b", ("llama3", "405B"): "llama3-405b",
    ("llama3", "1B"): "llama3.2-1b", ("llama2", "7B"): "llama2-7b", ("llama2", "13B"): "llama2-13b",
    ("llama2", "70B"): "llama2-70b", ("deepseek_v3", "671B"): "deepseek-v3",
}
# single-stage-per-rank schedules; the multi-stage ones (Interleaved1F1B, ZBV...) need the stage
# count per rank, which torchtitan derives from the layer split: refused rather than guessed
SCHEDULES = {"1F1B": "1f1b", "GPipe": "gpipe"}


@dataclass(frozen=True)
class TorchtitanJob:
    spec: ModelSpec
    layout: dict[str, Any]


def load_torchtitan(path: str | Path, n_gpus: int | None = None) -> TorchtitanJob:
    p = Path(path)
    try:
        cfg = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise SpecError("(file)", f"not valid TOML: {e}", "a torchtitan job config", str(p)) from None
    try:
        return torchtitan_job(cfg, n_gpus)
    except SpecError as e:
        raise e.in_file(str(p)) from None


def _get(cfg: dict[str, Any], section: str, key: str, default: Any = None) -> Any:
    sec = cfg.get(section, {})
    if not isinstance(sec, dict):
        raise SpecError(f"[{section}]", f"is a {type(sec).__name__}", "a TOML table")
    return sec.get(key, default)


def _pos_int(v: Any, name: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise SpecError(name, f"{v!r}", "a positive integer")
    return v


def torchtitan_job(cfg: dict[str, Any], n_gpus: int | None = None) -> TorchtitanJob:
    name, flavor = _get(cfg, "model", "name"), str(_get(cfg, "model", "flavor"))
    if (name, flavor) not in FLAVORS:
        known = ", ".join(f"{n} {f}" for n, f in FLAVORS)
        raise SpecError("model.flavor", f"{name} {flavor} has no workload in workloads/", f"one of: {known}")
    spec = get_workload(FLAVORS[(name, flavor)])
    seq = _pos_int(_get(cfg, "training", "seq_len", spec.seq_len), "training.seq_len")
    tp = _pos_int(_get(cfg, "parallelism", "tensor_parallel_degree", 1), "parallelism.tensor_parallel_degree")
    pp = _pos_int(_get(cfg, "parallelism", "pipeline_parallel_degree", 1), "parallelism.pipeline_parallel_degree")
    cp = _pos_int(_get(cfg, "parallelism", "context_parallel_degree", 1), "parallelism.context_parallel_degree")
    ep = _pos_int(_get(cfg, "parallelism", "expert_parallel_degree", 1), "parallelism.expert_parallel_degree")
    rep = _pos_int(_get(cfg, "parallelism", "data_parallel_replicate_degree", 1), "parallelism.data_parallel_replicate_degree")
    etp = _pos_int(_get(cfg, "parallelism", "expert_tensor_parallel_degree", 1),
                   "parallelism.expert_tensor_parallel_degree")
    shard = _get(cfg, "parallelism", "data_parallel_shard_degree", -1)
    if shard == -1:
        if n_gpus is None:
            raise SpecError("parallelism.data_parallel_shard_degree", "-1 fills the GPUs but their number is not known",
                            "a positive degree, or --n-gpus N")
        if n_gpus % (rep * tp * pp * cp):
            raise SpecError("parallelism.data_parallel_shard_degree",
                            f"-1: {n_gpus} GPUs are not divisible by replicate {rep} x tp {tp} x pp {pp} x cp {cp}",
                            f"--n-gpus a multiple of {rep * tp * pp * cp}")
        shard = n_gpus // (rep * tp * pp * cp)
    shard = _pos_int(shard, "parallelism.data_parallel_shard_degree")
    if rep > 1 and shard > 1:
        raise SpecError("parallelism.data_parallel_replicate_degree",
                        f"{rep} with data_parallel_shard_degree {shard} is HSDP, which perfmodel does not model",
                        "replicate 1 (FSDP) or shard 1 (DDP)")
    dp = rep * shard
    local = _get(cfg, "training", "local_batch_size", _get(cfg, "training", "batch_size", 8))
    local = _pos_int(local, "training.local_batch_size")
    gb = _get(cfg, "training", "global_batch_size", -1)
    gb = local * dp if gb in (-1, None) else _pos_int(gb, "training.global_batch_size")
    mb = local
    if pp > 1:
        mb = _pos_int(_get(cfg, "parallelism", "pipeline_parallel_microbatch_size", 1),
                      "parallelism.pipeline_parallel_microbatch_size")
    mode = _get(cfg, "activation_checkpoint", "mode", "selective")
    if mode not in ("none", "selective", "full"):
        raise SpecError("activation_checkpoint.mode", f"{mode!r}", "none, selective or full")
    option = str(_get(cfg, "activation_checkpoint", "selective_ac_option", "2"))
    if mode == "selective" and option != "op":
        raise SpecError("activation_checkpoint.selective_ac_option",
                        f"{option!r} (default '2'): full activation checkpointing of every n-th block is not modelled",
                        "'op' (the per-op policy), or mode 'full' / 'none'")
    converters = _get(cfg, "model", "converters", []) or []
    fp8 = "float8" in converters or bool(_get(cfg, "float8", "enable_float8_linear", False)) or "float8" in cfg.get(
        "quantize", {})
    precision, recipe = "bf16", None
    if "mx" in converters:
        precision, recipe = "mxfp8", "mxfp8"
    elif fp8:
        # torchtitan's float8 recipes: tensorwise (the default) scales each tensor by its current amax
        name = _get(cfg, "float8", "recipe_name", None) or "tensorwise"
        if name != "tensorwise":
            raise SpecError("float8.recipe_name", f"{name!r}: row-wise scaling is not modelled",
                            "tensorwise (perfmodel's 'current' recipe)")
        precision, recipe = "fp8", "current"
    opt = str(_get(cfg, "optimizer", "name", "AdamW"))
    optimizer = {"AdamW": "adamw", "Adam": "adam", "SGD": "sgd", "Muon": "muon"}.get(opt)
    if optimizer is None:
        raise SpecError("optimizer.name", f"{opt!r}", "AdamW, Adam, SGD or Muon")
    sched = _get(cfg, "parallelism", "pipeline_parallel_schedule", "1F1B")
    if sched not in SCHEDULES:
        raise SpecError("parallelism.pipeline_parallel_schedule", f"{sched!r}", f"one of: {', '.join(SCHEDULES)}")
    layout = {"dp": dp, "tp": tp, "pp": pp, "cp": cp, "ep": ep, "vp": 1, "etp": etp, "sp": tp > 1,
              "zero": 3 if shard > 1 else 0, "micro_batch": mb, "global_batch": gb, "seq_len": seq,
              "recompute": mode, "precision": precision, "fp8_recipe": recipe, "optimizer": optimizer,
              "schedule": SCHEDULES[sched] if pp > 1 else None}
    return TorchtitanJob(spec, layout)
