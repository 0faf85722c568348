"""`perfmodel search` and `perfmodel compare` (the subcommands and their arguments live in
perfmodel/cli.py; these functions run them)."""

from __future__ import annotations

import argparse
import json
import sys

from perfmodel.errors import LayoutError
from perfmodel.units import fmt


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
