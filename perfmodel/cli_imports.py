"""The CLI faces of the importers and the sweep: `estimate` reading a Hugging Face config.json,
`--megatron-args[-file]` or `--torchtitan`; `perfmodel import hf`; `perfmodel sweep`.
(perfmodel/cli.py registers these; the work is done in perfmodel/workload/* and planning/sweep.py.)"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the parser is built without loading pydantic models
    from perfmodel.workload.spec import ModelSpec


def add_estimate_import_args(e: argparse.ArgumentParser) -> None:
    g = e.add_argument_group("imported jobs (set the workload and the layout; --n-gpus sets dp)")
    g.add_argument("--megatron-args", default=None, help='a Megatron-LM / Megatron-Bridge argument list, e.g. '
                   '"--num-layers 32 --hidden-size 4096 ... --tensor-model-parallel-size 8"')
    g.add_argument("--megatron-args-file", default=None, help="a file of Megatron arguments (one per line, bash arrays "
                   "and comments allowed)")
    g.add_argument("--torchtitan", default=None, help="a torchtitan job config TOML")


def add_import_sweep_commands(sub: Any) -> None:
    imp = sub.add_parser("import", help="write a workload YAML from another tool's model config")
    isub = imp.add_subparsers(dest="import_kind", required=True)
    hf = isub.add_parser("hf", help="a Hugging Face config.json")
    hf.add_argument("config", help="config.json")
    hf.add_argument("-o", "--out", required=True, help="workload YAML to write (its stem becomes the id)")
    hf.add_argument("--seq-len", type=int, default=None, help="training context (default: the config's pretraining one)")
    hf.set_defaults(func=cmd_import_hf)

    sw = sub.add_parser("sweep", help="layout search over workloads x hardware x scales, to Parquet")
    sw.add_argument("sweep", help="SWEEP.yaml")
    sw.add_argument("--out", required=True, help="RESULTS.parquet (re-running skips the points already in it)")
    sw.add_argument("--backend", default="local", choices=["local", "ray"])
    sw.add_argument("--ray-address", default=None, help="an existing Ray cluster (default: start a local one)")
    sw.add_argument("--workers", type=int, default=None, help="local backend: processes (default: every core)")
    sw.add_argument("--no-progress", action="store_true")
    sw.add_argument("--calibration", default=None, metavar="PROFILE|none",
                    help="calibration profile (overrides the sweep file's `calibration:`; default: the shipped one)")
    sw.set_defaults(func=cmd_sweep)


def param_fields(spec: ModelSpec) -> dict[str, float]:
    from perfmodel.workload.hf_config import param_counts

    total, active = param_counts(spec)
    return {"params": total, "active_params": active}


def estimate_inputs(a: argparse.Namespace) -> tuple[ModelSpec, argparse.Namespace]:
    """The ModelSpec of `estimate`'s workload argument (an id, a workload YAML or a HF config.json)
    or of --megatron-args / --torchtitan, with their layout written into the namespace."""
    from perfmodel.workload.catalog import get_workload, load_workload_file
    from perfmodel.workload.hf_config import is_hf_config, load_hf_config

    imported = [x for x in (a.megatron_args, a.megatron_args_file, a.torchtitan) if x]
    if len(imported) > 1:
        raise ValueError("give one of --megatron-args, --megatron-args-file, --torchtitan")
    if imported and a.workload:
        raise ValueError(f"workload {a.workload!r} and an imported job both name the model; give one")
    if a.megatron_args or a.megatron_args_file:
        from perfmodel.workload.megatron_args import load_megatron_args_file, parse_megatron_args

        job = (load_megatron_args_file(a.megatron_args_file) if a.megatron_args_file
               else parse_megatron_args(a.megatron_args))
        if job.ignored:
            print(f"perfmodel: Megatron arguments not affecting a step's shapes, ignored: {' '.join(job.ignored)}",
                  file=sys.stderr)
        return job.spec, _apply_layout(a, job.layout)
    if a.torchtitan:
        from perfmodel.workload.torchtitan_config import load_torchtitan

        tt = load_torchtitan(a.torchtitan, a.n_gpus)
        b = _apply_layout(a, tt.layout)
        b.framework = getattr(a, "framework", None) or "torchtitan"  # the job's stack selects its mechanisms (selective = 'op')
        return tt.spec, b
    if not a.workload:
        raise ValueError("estimate needs a workload (id, YAML or config.json), --megatron-args or --torchtitan")
    if is_hf_config(a.workload):
        return load_hf_config(a.workload, seq_len=a.seq_len), a
    if a.workload.endswith((".yaml", ".yml")) and Path(a.workload).is_file():
        return load_workload_file(a.workload), a
    return get_workload(a.workload), a


def _apply_layout(a: argparse.Namespace, lay: dict[str, Any]) -> argparse.Namespace:
    b = argparse.Namespace(**vars(a))
    b.tp, b.pp, b.cp, b.ep, b.vp, b.sp = lay["tp"], lay["pp"], lay["cp"], lay["ep"], lay["vp"], lay["sp"]
    b.etp = lay.get("etp", 1)
    b.zero, b.micro_batch, b.seq_len = lay["zero"], lay["micro_batch"], lay["seq_len"]
    b.recompute, b.precision = lay["recompute"], lay["precision"]
    b.recompute_modules = lay.get("recompute_modules") or getattr(a, "recompute_modules", None)
    b.recompute_method = lay.get("recompute_method") or getattr(a, "recompute_method", None)
    b.recompute_num_layers = lay.get("recompute_num_layers") or getattr(a, "recompute_num_layers", None)
    b.fp8_recipe, b.optimizer = lay.get("fp8_recipe"), lay.get("optimizer", a.optimizer)
    b.act_fp8_input_store = lay.get("act_fp8_input_store") or getattr(a, "act_fp8_input_store", False)
    b.schedule = lay.get("schedule") or a.schedule
    for key in ("moe_dispatcher", "moe_a2a_overlap", "moe_shared_overlap", "moe_imbalance", "moe_a2a_sms",
                "cuda_graphs"):
        if lay.get(key) is not None:  # what the job states; else the command line's (or the stack's default)
            setattr(b, key, lay[key])
    # the job implies its expert GEMMs from Megatron-Core's code: a command line that names one wins
    if lay.get("expert_gemm") is not None and not getattr(a, "expert_gemm", None):
        b.expert_gemm = lay["expert_gemm"]
    b.dp = lay.get("dp") or a.dp
    if lay.get("global_batch"):
        b.global_batch = lay["global_batch"]
    if b.dp is None and a.n_gpus is None:
        raise ValueError(f"the imported job does not state its GPU count: pass --n-gpus (a multiple of "
                         f"tp {b.tp} x pp {b.pp} x cp {b.cp} = {b.tp * b.pp * b.cp})")
    return b


def cmd_import_hf(a: argparse.Namespace) -> int:
    from perfmodel.workload.hf_config import load_hf_config, param_counts, spec_yaml

    out = Path(a.out)
    spec = load_hf_config(a.config, seq_len=a.seq_len, model_id=out.stem)
    out.write_text(spec_yaml(spec))
    total, active = param_counts(spec)
    print(f"wrote {out}: {spec.id} ({spec.family}), {total / 1e9:.3f} B parameters, {active / 1e9:.3f} B active",
          file=sys.stderr)
    return 0


def cmd_sweep(a: argparse.Namespace) -> int:
    from perfmodel.planning.sweep import load_sweep, run_sweep

    sweep = load_sweep(a.sweep)
    if a.calibration is not None:
        sweep = sweep.model_copy(update={"calibration": a.calibration})
    summary = run_sweep(sweep, Path(a.out), backend=a.backend, ray_address=a.ray_address, workers=a.workers,
                        progress=not a.no_progress)
    print(summary, file=sys.stderr)
    return 0
