"""`perfmodel search` and `perfmodel compare`: their subcommands and arguments (add_parsers, which
perfmodel/cli.py calls with its shared catalogue and calibration arguments) and the functions that
run them."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from perfmodel.cliargs import add_precision_arg, at_least_one, positive_float_at_most, positive_int
from perfmodel.errors import LayoutError
from perfmodel.parallel.plan import OPTIMIZERS
from perfmodel.parallel.schedules import SEARCHED_SCHEDULES
from perfmodel.units import fmt
from perfmodel.workload.graph import ATTENTION_IMPLS


def search_main(a: argparse.Namespace) -> int:
    from perfmodel.planning.search import SearchSpace, layout_label, search

    res = search(a.workload, a.hardware, a.n_gpus, a.global_batch, seq_len=a.seq_len, precision=a.precision,
                 calibration=a.calibration, framework=a.framework, optimizer=getattr(a, "optimizer", "adam"),
                 attention=getattr(a, "attention", None),
                 space=SearchSpace(offload_activations=getattr(a, "offload", False),
                                   block_recompute=getattr(a, "block_recompute", True),
                                   **({"schedules": tuple(a.schedules)} if getattr(a, "schedules", None) else {})))
    if res.n_layouts == 0:
        # not a memory verdict: no split of these GPUs feeds this batch at all
        raise LayoutError(f"no layout of {a.n_gpus:,} GPUs exists for global batch {a.global_batch} of {res.spec.id}: "
                          "dp x tp x pp x cp must equal the GPU count, dp x micro-batch must divide the global "
                          "batch and tp, pp, cp must divide the model's heads, layers and sequence; allowed: a global "
                          "batch that dp divides, or fewer GPUs")
    top = res.table.head(a.top)
    if a.json:
        print(json.dumps({"workload": res.spec.id, "system": res.system.name, "n_layouts": res.n_layouts,
                          "n_fit": len(res.table), "elapsed_s": res.elapsed_s, "top": top.to_dict(orient="records")},
                         indent=2, default=str))
        return 0
    print(f"{res.spec.id} on {a.n_gpus} x {res.system.accelerator.id} ({res.system.name}), global batch {a.global_batch}: "
          f"{res.n_layouts:,} layouts in {res.elapsed_s:.2f} s ({res.layouts_per_s:,.0f}/s), {len(res.table):,} fit")
    if top.empty:
        print("no layout fits in memory", file=sys.stderr)
        return 0
    for i, r in top.iterrows():
        print(f"{i + 1:3d}. {r['step_time_s']:9.4g} s  {r['tokens_per_s']:12,.0f} tok/s  MFU {r['mfu']:6.1%}  "
              f"{fmt(r['memory_bytes'], 'B')}  {layout_label(r)}")
    return 0


def compare_main(a: argparse.Namespace) -> int:
    from perfmodel.planning.compare import DEFAULT_TOKENS, compare, markdown, sensitivity, write_report

    tokens = a.tokens or DEFAULT_TOKENS
    df = compare(a.workload, list(a.hardware), a.n_gpus, a.global_batch, tokens, pue=a.pue,
                 electricity_usd_per_kwh=a.electricity_usd_per_kwh, calibration=a.calibration, framework=a.framework,
                 optimizer=getattr(a, "optimizer", "adam"))
    line = f"{a.workload}, {a.n_gpus} GPUs, global batch {a.global_batch}, {tokens:.3g} tokens"
    if a.json:
        # the plan column holds ParallelPlan objects: pandas would serialise their class attributes
        out = df.assign(plan=[p.model_dump(mode="json") if p is not None and hasattr(p, "model_dump") else None
                              for p in df["plan"]]) if "plan" in df else df
        print(out.to_json(orient="records", indent=2))
    else:
        print(markdown(df, line))
    if a.out:
        sens = sensitivity(a.workload, list(a.hardware), a.n_gpus, a.global_batch, tokens, calibration=a.calibration,
                           framework=a.framework, optimizer=getattr(a, "optimizer", "adam"))
        paths = write_report(df, a.out, line, sens)
        print("wrote " + ", ".join(str(p) for p in paths), file=sys.stderr)
    return 0


def add_parsers(sub: Any, catalog_args: Callable[[argparse.ArgumentParser], None],
                calibration_args: Callable[[argparse.ArgumentParser], None]) -> None:
    s = sub.add_parser("search", help="search parallel layouts for a workload on hardware")
    s.add_argument("workload", help="workload id or the path of a workload YAML file")
    s.add_argument("--hardware", default="h100-sxm5-80gb")
    s.add_argument("--n-gpus", "--gpus", dest="n_gpus", type=positive_int, required=True)
    s.add_argument("--global-batch", type=positive_int, required=True)
    s.add_argument("--seq-len", type=positive_int, default=None)
    add_precision_arg(s)
    s.add_argument("--optimizer", default="adam", choices=list(OPTIMIZERS),
                   help="every layout's optimizer state and step (adamw-bf16: bf16 moments, fp32 master)")
    s.add_argument("--attention", default=None, choices=list(ATTENTION_IMPLS),
                   help="attention kernel of every layout (default: the --framework's, else flash; see estimate "
                        "--help); flash3 / flash4 only where the chip's generation measured them")
    s.add_argument("--top", type=positive_int, default=10, help="layouts to show (at least 1)")
    s.add_argument("--offload", action="store_true",
                   help="also try activation offloading where a layout does not fit otherwise (pp 1, no recompute, a "
                        "node with a host link): the fewest offloaded layers that fit")
    s.add_argument("--block-recompute", action=argparse.BooleanOptionalAction, default=True,
                   help="try Megatron-Core's block recompute (the fewest layers per chunk that fit) on full-recompute "
                        "layouts whose no-recompute twin does not fit (default on)")
    s.add_argument("--schedules", nargs="+", default=None, choices=list(SEARCHED_SCHEDULES), metavar="SCHEDULE",
                   help=f"pipeline schedules to try, from {', '.join(SEARCHED_SCHEDULES)} (default: all but dualpipe, "
                        "DeepSeek's own pipeline)")
    s.add_argument("--json", action="store_true")
    catalog_args(s)
    calibration_args(s)
    s.set_defaults(func=search_main)

    cmp = sub.add_parser("compare", help="compare accelerators on time, cost and energy")
    cmp.add_argument("workload", help="workload id or the path of a workload YAML file")
    cmp.add_argument("--hardware", nargs="+", required=True)
    cmp.add_argument("--n-gpus", "--gpus", dest="n_gpus", type=positive_int, required=True)
    cmp.add_argument("--global-batch", type=positive_int, required=True)
    cmp.add_argument("--tokens", type=positive_float_at_most(1e18), default=None, help="training tokens for time-to-train (> 0)")
    cmp.add_argument("--pue", type=at_least_one, default=1.0, help="datacentre PUE multiplying the energy (default 1.0: IT power)")
    cmp.add_argument("--electricity-usd-per-kwh", type=positive_float_at_most(1e3), default=None,
                     help="electricity price for the energy cost")
    cmp.add_argument("--optimizer", default="adam", choices=list(OPTIMIZERS),
                     help="every candidate's optimizer state and step (adamw-bf16: bf16 moments, fp32 master)")
    cmp.add_argument("--out", default=None, help="write a report (markdown + HTML) here")
    cmp.add_argument("--json", action="store_true")
    catalog_args(cmp)
    calibration_args(cmp)
    cmp.set_defaults(func=compare_main)
