"""perfmodel command line: estimate, validate, fit, calibrate, search, compare, list.

Every argument is checked where it is parsed (counts are positive integers, token counts positive
finite numbers); nothing out of range is quietly replaced by a default. Errors exit 2 with one
line on stderr, or, with --json, as {"error": {...}} on stdout so scripts can read them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

from perfmodel import precision as registry
from perfmodel.cliargs import (
    Parser,
    add_precision_arg,
    at_least_one,
    positive_int,
    report_error,
    shape,
    show_warning,
)
from perfmodel.compute.eager import ELEMENTWISE_IMPLS
from perfmodel.engines.registry import ENGINE_NAMES
from perfmodel.errors import PerfmodelError, UsageError
from perfmodel.parallel.plan import OPTIMIZERS
from perfmodel.parallel.schedules import SCHEDULE_NAMES
from perfmodel.workload.graph import ATTENTION_IMPLS, CP_RINGS, EXPERT_GEMMS


def _catalog_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("catalogue")
    g.add_argument("--specs", action="append", default=[], metavar="DIR",
                   help="add the hardware specs under DIR (sub-folders accelerators/, nodes/, fabrics/, clusters/) "
                        "to the built-in ones; repeatable")
    g.add_argument("--workloads", action="append", default=[], metavar="DIR",
                   help="add the workload *.yaml files in DIR to the built-in ones; repeatable")


def _plan_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("layout")
    for name in ("dp", "tp", "pp", "cp", "ep", "vp"):
        g.add_argument(f"--{name}", type=positive_int, default=None if name == "dp" else 1)
    g.add_argument("--etp", type=positive_int, default=1,
                   help="expert tensor-parallel degree (MoE parallel folding: ep x etp must divide tp x cp x dp)")
    g.add_argument("--moe-imbalance", type=at_least_one, default=None,
                   help="MoE: tokens on the busiest expert-parallel rank over the mean (default 1.23, published "
                        "routing statistics; 1 = force-balanced routing)")
    g.add_argument("--moe-fp8-dispatch", action="store_true", help="MoE: dispatch tokens in fp8 (with an fp8 precision)")
    g.add_argument("--moe-shared-overlap", action="store_true", help="MoE: overlap shared experts with the all-to-alls")
    g.add_argument("--moe-dispatcher", choices=["alltoall", "flex"], default=None,
                   help="MoE token dispatcher: alltoall (NCCL all-to-all, a row per routed copy) or flex (DeepEP / "
                        "HybridEP: once per destination node over the network); default: the --framework's")
    g.add_argument("--moe-a2a-sms", type=positive_int, default=None,
                   help="MoE: SMs the dispatch / combine kernels hold (Megatron-Core moe_flex_dispatcher_num_sms), "
                        "lost to the compute beside an overlapped exchange; default: 16 (NCCL) or 20 (flex)")
    g.add_argument("--moe-a2a-overlap", action=argparse.BooleanOptionalAction, default=None,
                   help="MoE: hide the all-to-alls of one micro-batch behind another's compute (combined 1F1B); "
                        "default: the --framework's (megatron-core: on for mxfp8 where Megatron-Core accepts it)")
    g.add_argument("--cp-ring", choices=list(CP_RINGS), default=None,
                   help="how context-parallel attention exchanges K/V: p2p (Transformer Engine's ring), allgather "
                        "(PyTorch's context_parallel), allgather-repeat-kv (the same with K/V repeated to the query "
                        "heads, torchtitan's Llama until Jan 2026); default: the --framework's, else p2p")
    g.add_argument("--elementwise", choices=list(ELEMENTWISE_IMPLS), default=None,
                   help="norms, activations and RoPE: fused (one kernel each) or eager (chains of ATen kernels, a "
                        "model in PyTorch ops run without torch.compile); default: the --framework's")
    g.add_argument("--act-fp8-input-store", action="store_true",
                   help="SwiGLU activations keep their input for the backward in fp8 instead of bf16 (Megatron-Core "
                        "--activation-func-fp8-input-store; DeepSeek-V3's SwiGLU input cache)")
    g.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=None,
                   help="the transformer layers captured in CUDA graphs: one host launch per layer and pass "
                        "(Megatron-Core --cuda-graph-impl full_iteration, or local / transformer_engine over whole "
                        "layers); default: the --framework's (none turns it on)")
    g.add_argument("--expert-gemm", choices=list(EXPERT_GEMMS), default=None,
                   help="MoE expert GEMMs: grouped (one kernel for the local experts) or per-expert (Transformer "
                        "Engine's GroupedLinear loop, one cuBLASLt GEMM per local expert issued by the host); "
                        "default: the --framework's (megatron-core: per-expert)")
    g.add_argument("--autocast-weights", action=argparse.BooleanOptionalAction, default=None,
                   help="fp32 parameters cast to 16 bits by torch.autocast in every matmul, each micro-batch (a plain "
                        "PyTorch loop); default: the --framework's (pytorch: on)")
    g.add_argument("--sp", "--sequence-parallel", dest="sp", action="store_true", help="sequence parallelism (needs tp > 1)")
    g.add_argument("--zero", type=int, default=0, choices=[0, 1, 2, 3], help="ZeRO stage (3 = FSDP full shard)")
    g.add_argument("--micro-batch", type=positive_int, default=1, help="sequences per micro-batch")
    g.add_argument("--global-batch", type=positive_int, default=None, help="sequences per step (default: micro_batch x dp)")
    g.add_argument("--seq-len", type=positive_int, default=None)
    g.add_argument("--recompute", default=None, choices=["none", "selective", "full"],
                   help="activation recompute (default none; selective when --recompute-modules is given)")
    g.add_argument("--recompute-modules", default=None, metavar="MODULES",
                   help="what selective recompute reruns: Megatron-Core recompute_modules, comma-separated, from "
                        "core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts; or op (torchtitan's "
                        "per-op policy); default: the --framework's (core_attn; op for torchtitan)")
    g.add_argument("--recompute-method", default=None, choices=["uniform", "block"],
                   help="which layers full recompute reruns (Megatron-Core recompute_method): uniform every layer, "
                        "checkpointed in runs of --recompute-num-layers (default 1); block only the first "
                        "--recompute-num-layers layers of each model chunk; needs --recompute full")
    g.add_argument("--recompute-num-layers", type=positive_int, default=None, metavar="N",
                   help="with --recompute full: layers per checkpointed run (uniform) or per model chunk recomputed "
                        "(block; implies --recompute-method block when no method is given)")
    g.add_argument("--recompute-early-stop", action=argparse.BooleanOptionalAction, default=None,
                   help="with --recompute full: the rerun stops once the tensors the backward needs are rebuilt, as "
                        "PyTorch's non-reentrant checkpoint does (the block's last GEMM and residual add do not "
                        "rerun); default: the --framework's (torchtitan: on)")
    g.add_argument("--offload-activations", type=int, default=0, metavar="N",
                   help="the first N transformer layers' saved activations go to host memory and back (Megatron-Core "
                        "cpu_offloading_num_layers; needs pp 1, no recompute; over the node's measured host link)")
    add_precision_arg(g)
    g.add_argument("--schedule", default=None, choices=SCHEDULE_NAMES)
    g.add_argument("--optimizer", default="adam", choices=list(OPTIMIZERS),
                   help="optimizer state and step cost (adamw-bf16: bf16 moments, fp32 master; sgd: with momentum; "
                        "muon: Newton-Schulz on 2-D weights)")
    g.add_argument("--fp8-recipe", default=None, choices=registry.recipe_names(),
                   help="scaling recipe of fp8/fp4 GEMMs (default: delayed for fp8; mxfp8, nvfp4 for those precisions)")
    g.add_argument("--no-overlap", action="store_true", help="no DP comm / FSDP prefetch overlap")
    g.add_argument("--attention", default=None, choices=list(ATTENTION_IMPLS),
                   help="attention kernel (default: the --framework's, else flash): flash (FlashAttention-2; the newest "
                   "generation measured where FA2 is not: FA4 on Blackwell), flash3 (FlashAttention-3, Hopper), flash4 "
                   "(FlashAttention-4, Blackwell), fused (cuDNN's fused attention where the generation measured it, "
                   "Hopper; else the newest FlashAttention generation measured on the chip: FA4 on Blackwell, FA2 on "
                   "Ampere), flash1 (FlashAttention-1 era, the 2022-23 Triton kernel), unfused; flash3 / flash4 only "
                   "where the chip's generation measured them")


def _calibration_args(p: argparse.ArgumentParser, framework: bool = True) -> None:
    from perfmodel.calibration.frameworks import FRAMEWORKS

    p.add_argument("--calibration", default="default", metavar="PROFILE|none",
                   help="calibration profile: 'default' (shipped, fitted on the public runs), 'none' (physics only) "
                   "or a YAML written by `perfmodel fit`")
    if framework:
        p.add_argument("--framework", default=None, choices=list(FRAMEWORKS),
                       help="training stack: selects its mechanisms (attention kernel, host dispatch); never a fitted factor")


def _plan(a: argparse.Namespace, n_gpus: int):
    from perfmodel.errors import LayoutError
    from perfmodel.parallel.plan import ParallelPlan

    model_par = a.tp * a.pp * a.cp
    dp = a.dp
    if dp is None:
        if n_gpus % model_par:
            raise LayoutError(f"--n-gpus {n_gpus} is not divisible by tp {a.tp} x pp {a.pp} x cp {a.cp} = {model_par}")
        dp = n_gpus // model_par
    elif dp * model_par != n_gpus:
        raise UsageError(f"--n-gpus {n_gpus} but dp {dp} x tp {a.tp} x pp {a.pp} x cp {a.cp} = {dp * model_par} GPUs; "
                         f"make them agree, or give only one of --n-gpus and --dp")
    gb = a.global_batch or a.micro_batch * dp
    modules = getattr(a, "recompute_modules", None)
    recompute = a.recompute or ("selective" if modules else "none")
    if modules and recompute != "selective":
        raise UsageError(f"--recompute-modules {modules} names what selective recompute reruns; it needs --recompute "
                         f"selective (got --recompute {recompute})")
    if getattr(a, "recompute_early_stop", None) and recompute != "full":
        raise UsageError(f"--recompute-early-stop says how full recompute reruns a block; it needs --recompute full "
                         f"(got --recompute {recompute})")
    method, window = getattr(a, "recompute_method", None), getattr(a, "recompute_num_layers", None)
    if (method or window) and recompute != "full":
        flag = f"--recompute-method {method}" if method else f"--recompute-num-layers {window}"
        raise UsageError(f"{flag} chooses which layers full recompute reruns; it needs --recompute full "
                         f"(got --recompute {recompute})")
    method = method or ("block" if window else None)
    return ParallelPlan(dp=dp, tp=a.tp, pp=a.pp, cp=a.cp, ep=a.ep, etp=a.etp, vp=a.vp, sequence_parallel=a.sp,
                        moe_fp8_dispatch=a.moe_fp8_dispatch, moe_shared_expert_overlap=a.moe_shared_overlap,
                        moe_dispatcher=a.moe_dispatcher, moe_a2a_sms=getattr(a, "moe_a2a_sms", None),
                        **({"moe_a2a_overlap": a.moe_a2a_overlap} if a.moe_a2a_overlap is not None else {}),
                        **({"cp_ring": a.cp_ring} if a.cp_ring else {}),
                        **({"elementwise": a.elementwise} if a.elementwise else {}),
                        **({"expert_gemm": a.expert_gemm} if getattr(a, "expert_gemm", None) else {}),
                        **({"cuda_graphs": a.cuda_graphs} if getattr(a, "cuda_graphs", None) is not None else {}),
                        **({"act_fp8_input_store": True} if getattr(a, "act_fp8_input_store", False) else {}),
                        **({"autocast_weights": a.autocast_weights} if a.autocast_weights is not None else {}),
                        **({"recompute_early_stop": a.recompute_early_stop}
                           if getattr(a, "recompute_early_stop", None) is not None else {}),
                        **({"moe_imbalance": a.moe_imbalance} if a.moe_imbalance is not None else {}),
                        zero_stage=a.zero, micro_batch=a.micro_batch, global_batch=gb, seq_len=a.seq_len,
                        recompute=recompute, offload_activations=a.offload_activations,
                        **({"selective_recompute": modules} if modules else {}),
                        **({"recompute_method": method} if method else {}),
                        **({"recompute_num_layers": window} if window else {}),
                        precision=a.precision, schedule=a.schedule,
                        overlap_dp_comm=not a.no_overlap, overlap_fsdp_prefetch=not a.no_overlap,
                        **({"attention_impl": a.attention} if a.attention else {}), fp8_recipe=a.fp8_recipe,
                        optimizer=a.optimizer)


def _scale_arg(text: str) -> tuple[str, float]:
    """--scale KEY=FACTOR: a what-if factor on one hardware resource."""
    from perfmodel.hardware.system import SCALE_KEYS, check_scale_factor

    key, _, value = text.partition("=")
    try:
        factor = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=FACTOR with FACTOR a number, "
                                         f"KEY one of {', '.join(SCALE_KEYS)}") from None
    try:
        check_scale_factor(key.strip(), factor)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None
    return key.strip(), factor


def _hardware(a: argparse.Namespace, world: int):
    """--hardware, resolved and scaled when --scale gives what-if factors."""
    if not a.scale:
        return a.hardware
    from perfmodel.hardware.system import resolve_hardware

    keys = [k for k, _ in a.scale]
    if len(set(keys)) < len(keys):
        raise ValueError(f"--scale names {', '.join(sorted({k for k in keys if keys.count(k) > 1}))} more than once")
    system, _ = resolve_hardware(a.hardware, world, a.gpus_per_node)
    return system.scaled(**dict(a.scale))


def cmd_estimate(a: argparse.Namespace) -> int:
    import perfmodel

    if a.trace and a.engine != "des":
        raise UsageError(f"--trace writes the discrete-event engine's timeline; the {a.engine} engine has none: "
                         "add --engine des")
    if a.torch:
        from perfmodel.workload.torch_import import estimate_module_cli

        if (a.cp, a.ep, a.vp) != (1, 1, 1):
            raise UsageError(f"--torch graphs are split by tp (their recognised Linear pairs), dp and pp only (got cp {a.cp}, "
                             f"ep {a.ep}, vp {a.vp}); leave those at 1")
        graph = estimate_module_cli(a.workload, a.example_shape, precision=a.precision)
        n = a.n_gpus or (a.dp or 1) * a.tp * a.pp
        a.micro_batch = graph.micro_batch if a.micro_batch == 1 else a.micro_batch
        plan = _plan(a, n)
        est = perfmodel.estimate_graph(graph, _hardware(a, plan.world), plan, gpus_per_node=a.gpus_per_node,
                                       calibration=a.calibration)
    else:
        from perfmodel.cli_imports import estimate_inputs, param_fields

        spec, a = estimate_inputs(a)  # a workload id, a HF config.json, --megatron-args or --torchtitan
        n = a.n_gpus or (a.dp or 1) * a.tp * a.pp * a.cp
        plan = _plan(a, n)
        est = perfmodel.estimate(spec, _hardware(a, plan.world), plan, engine=a.engine, gpus_per_node=a.gpus_per_node,
                                 calibration=a.calibration, framework=a.framework)
    if a.input_pipeline:
        from perfmodel.hardware.system import resolve_hardware
        from perfmodel.planning.input_pipeline import apply_input_pipeline, load_input_pipeline

        system, _ = resolve_hardware(a.hardware, plan.world, a.gpus_per_node)
        est = apply_input_pipeline(est, load_input_pipeline(a.input_pipeline), system.node.accelerators_per_node)
    if a.trace:
        Path(a.trace).write_text(json.dumps(est.timeline or []))
    if a.json:
        print(json.dumps(est.to_dict() | (param_fields(spec) if not a.torch else {}), indent=2))
    else:
        print(est.summary())
    return 0


def cmd_validate(a: argparse.Namespace) -> int:
    from perfmodel.validation.predict import validate_file
    from perfmodel.validation.runs import column_warnings

    for line in column_warnings(a.runs):
        print(f"perfmodel: warning: {line}", file=sys.stderr)
    preds = validate_file(a.runs, a.out, a.engine, a.attention, a.calibration, a.framework)
    ok = sum(p["status"] == "ok" for p in preds)
    print(f"{len(preds)} rows read, {ok} predicted, {len(preds) - ok} errors -> {a.out}", file=sys.stderr)
    if a.report:
        from perfmodel.validation.report import write_report

        summary = write_report([Path(a.runs)], [Path(a.out)], Path(a.report))
        print(summary, file=sys.stderr)
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    from perfmodel.validation.report import write_report

    if a.results:
        from perfmodel.planning.sweep_report import write_sweep_report

        print(write_sweep_report(Path(a.results), Path(a.out)))
        return 0
    if not (a.runs and a.pred):
        raise ValueError("report needs a sweep's RESULTS.parquet, or --runs and --pred (validation report)")

    print(write_report([Path(r) for r in a.runs], [Path(p) for p in a.pred], Path(a.out)))
    return 0


def cmd_calibrate(a: argparse.Namespace) -> int:
    from perfmodel.calibration.commands import calibrate_main

    return calibrate_main(a)


def cmd_fit(a: argparse.Namespace) -> int:
    from perfmodel.calibration.fit import fit_main

    return fit_main(a.runs, a.out, a.name, a.quiet)


def cmd_list(a: argparse.Namespace) -> int:
    from perfmodel.hardware.catalog import load_catalog
    from perfmodel.workload.catalog import load_workloads, workload_problems

    cat = load_catalog()
    problems = (cat.problems if a.what in ("hardware", "all") else []) + (
        workload_problems() if a.what in ("workloads", "all") else [])
    for p in problems:
        print(f"perfmodel: warning: left out {p}", file=sys.stderr)
    if a.what in ("hardware", "all"):
        # an alias (host-cpu / host-node: this machine's CPU, hardware/catalog.host_cpu_alias) names its target
        for key, acc in cat.accelerators.items():
            print(f"accelerator  {key:<24} " + (acc.name if key == acc.id else f"= {acc.id}: {cat.host_cpu[1].removeprefix('host-cpu: ')}"))
        for key, node in cat.nodes.items():
            print(f"node         {key:<24} " + (node.name if key == node.id else f"= {node.id}"))
        for cl in cat.clusters.values():
            print(f"cluster      {cl.id:<24} {cl.name}")
    if a.what in ("workloads", "all"):
        for spec in load_workloads().values():
            print(f"workload     {spec.id:<24} {spec.name} ({spec.family})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from perfmodel import __version__

    p = Parser(prog="perfmodel", description="Predict deep-learning training step time, memory and cost.")
    p.add_argument("--version", action="version", version=f"perfmodel {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=Parser)

    e = sub.add_parser("estimate", help="one step-time estimate")
    e.add_argument("workload", nargs="?", default=None, help="workload id from workloads/ (see `perfmodel list "
                   "workloads`), a workload YAML, or a Hugging Face config.json")
    e.add_argument("--hardware", "--cluster", dest="hardware", default="a100-sxm4-80gb", help="accelerator, node or cluster id")
    e.add_argument("--n-gpus", "--gpus", dest="n_gpus", type=positive_int, default=None, help="GPUs (default: dp x tp x pp x cp)")
    e.add_argument("--gpus-per-node", type=positive_int, default=None)
    e.add_argument("--engine", default="analytic", choices=ENGINE_NAMES)
    e.add_argument("--scale", type=_scale_arg, action="append", default=[], metavar="KEY=FACTOR",
                   help="what-if hardware, repeatable: flops, hbm_bw, intra_bw (scale-up), inter_bw (scale-out), "
                        "latency (network) or hbm_capacity times FACTOR (0.001 to 1000); measured rates and curves scale too")
    e.add_argument("--json", action="store_true", help="machine-readable output")
    e.add_argument("--trace", default=None, help="write a Chrome trace here (needs --engine des)")
    e.add_argument("--torch", action="store_true", help="workload is package.module:factory (or file.py:factory) of an nn.Module")
    e.add_argument("--example-shape", type=shape, default=None, help="with --torch: input shape, e.g. 8,2048 (batch first)")
    e.add_argument("--input-pipeline", default=None, help="data-loading pipeline YAML: bound the step by it")
    _plan_args(e)
    _catalog_args(e)
    from perfmodel.cli_imports import add_estimate_import_args, add_import_sweep_commands

    add_estimate_import_args(e)
    _calibration_args(e)
    e.set_defaults(func=cmd_estimate)

    v = sub.add_parser("validate", help="predict every row of a runs file (the contract: docs/VALIDATION.md)",
                       description="Predict every row of a runs file; the columns, defaults and output are "
                       "the contract in docs/VALIDATION.md of the perfmodel repository.")
    v.add_argument("--runs", required=True)
    v.add_argument("--out", required=True)
    v.add_argument("--engine", default="analytic", choices=ENGINE_NAMES)
    v.add_argument("--report", default=None, help="also write an error report (markdown, HTML, PNG) here")
    v.add_argument("--attention", default=None, choices=list(ATTENTION_IMPLS),
                   help="override the attention kernel every row's framework selects")
    _catalog_args(v)
    _calibration_args(v)
    v.set_defaults(func=cmd_validate)

    f = sub.add_parser("fit", help="fit a calibration profile to measured runs (judged leave-one-source-out)")
    f.add_argument("--runs", action="append", required=True, help="runs file (DESIGN contract); repeat for more")
    f.add_argument("--out", required=True, help="profile YAML to write; use it with --calibration PATH")
    f.add_argument("--name", default=None, help="profile name (default: the file stem)")
    f.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    f.set_defaults(func=cmd_fit)

    r = sub.add_parser("report", help="error report from runs files and their predictions, or the HTML comparison "
                       "of a sweep's RESULTS.parquet")
    r.add_argument("results", nargs="?", default=None, help="a `perfmodel sweep` Parquet file")
    r.add_argument("--runs", nargs="+", default=None)
    r.add_argument("--pred", nargs="+", default=None)
    r.add_argument("--out", required=True)
    r.set_defaults(func=cmd_report)

    c = sub.add_parser("calibrate", help="microbenchmark this host's CPU (under a minute; --full ~15 min), or import a "
                       "torch.profiler trace / nccl-tests log as calibration of a spec; writes to --out or your data directory")
    c.add_argument("--out", default=None, help="specs directory (or, with --trace/--nccl-log, a .yaml file) to write; "
                   "default: $XDG_DATA_HOME/perfmodel/hardware_specs (never the committed specs)")
    c.add_argument("--full", action="store_true", help="every GEMM shape and message size, waiting for quiet CPUs (~15 min)")
    c.add_argument("--json", action="store_true", help="print every raw measurement as JSON")
    c.add_argument("--trace", default=None, help="torch.profiler Chrome trace (record_shapes=True) to import")
    c.add_argument("--accelerator", default=None, help="with --trace: accelerator spec id to calibrate")
    c.add_argument("--nccl-log", default=None, help="nccl-tests stdout (all_reduce_perf ...) to import")
    c.add_argument("--node", default=None, help="with --nccl-log: node spec id to calibrate")
    c.add_argument("--collective", default=None,
                   choices=["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"],
                   help="with --nccl-log: the collective, when the log does not name its *_perf binary")
    c.add_argument("--group-size", type=positive_int, default=None, help="with --nccl-log: ranks, when the log lists no devices")
    c.add_argument("--algorithm", default="ring", choices=("ring", "tree", "nvls", "nvlstree", "collnet", "pat", "gloo"),
                   help="with --nccl-log: the algorithm the curve was measured with (NCCL_ALGO; gloo on a CPU)")
    c.add_argument("--dataset", default=None, help="package.module:factory (or file.py:factory) returning a torch Dataset: "
                   "measure its per-sample CPU time and bytes for an input-pipeline spec")
    c.add_argument("--dataset-samples", type=positive_int, default=64, help="with --dataset: samples to time")
    c.set_defaults(func=cmd_calibrate)

    ls = sub.add_parser("list", help="list hardware and workloads")
    ls.add_argument("what", nargs="?", default="all", choices=["all", "hardware", "workloads"])
    _catalog_args(ls)
    ls.set_defaults(func=cmd_list)

    from perfmodel.planning.cli import add_parsers as add_planning_parsers
    from perfmodel.planning.lifecycle_cli import add_parsers as add_lifecycle_parsers

    add_planning_parsers(sub, _catalog_args, _calibration_args)
    add_lifecycle_parsers(sub, _plan_args, _plan)
    add_import_sweep_commands(sub)
    return p


def _add_catalogues(a: argparse.Namespace) -> None:
    """Apply --specs / --workloads; a bad file in them is reported and left out, never fatal."""
    from perfmodel.hardware.catalog import add_specs_dir
    from perfmodel.workload.catalog import add_workloads_dir

    problems = [p for d in getattr(a, "specs", []) for p in add_specs_dir(d)]
    problems += [p for d in getattr(a, "workloads", []) for p in add_workloads_dir(d)]
    if a.cmd != "list":  # list reports every file left out, built-in or added
        for p in problems:
            print(f"perfmodel: warning: left out {p}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    with warnings.catch_warnings():
        warnings.simplefilter("default", UserWarning)
        warnings.showwarning = show_warning
        try:
            args = build_parser().parse_args(argv)
        except UsageError as e:  # argparse's convention: an argument error exits 2 (SystemExit)
            raise SystemExit(report_error(e, as_json)) from None
        try:
            _add_catalogues(args)
            rc = int(args.func(args) or 0)
            sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
            return rc
        except BrokenPipeError:
            # the reader (`| head`) closed the pipe: stop quietly, as `yes | head` does
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 141
        except (PerfmodelError, ValueError, KeyError, OSError) as e:
            return report_error(e, as_json)


if __name__ == "__main__":
    sys.exit(main())
