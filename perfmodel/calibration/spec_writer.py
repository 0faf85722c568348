"""host-cpu / host-node spec files from the measurements of `perfmodel.calibration.microbench.measure`:
which measured number goes into which field, with its provenance, and the YAML layout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from perfmodel.calibration.host import flop_per_cycle


def fmt_si(x: float, unit: str) -> str:
    from perfmodel.units import fmt

    return fmt(x, unit, 4)


def shape_dependent(t1: dict[str, Any], spread: float = 2.0) -> bool:
    """True when some precision's GEMM rates differ by more than `spread` across the measured
    shapes: one MAMF and a fixed cost cannot express them (Zen 3, torch's generic bf16 kernel:
    3.4 GFLOP/s on 256^3, 0.83 on 256 x 2048 x 2048, whose data-gradient GEMM reads an 8 MB
    weight column-wise), so the spec asks for per-shape rates (calibration.gemm_by_shape)."""
    for prec in ("fp32", "bf16"):
        rates = [p["flop_per_s"] for p in t1.get(f"gemm_{prec}", [])]
        if len(rates) > 1 and max(rates) > spread * min(rates):
            return True
    return False


def accelerator_yaml(r: dict[str, Any]) -> dict[str, Any]:
    """The host-cpu accelerator spec (one core, one thread) from measured numbers `r`."""
    f = r["facts"]
    facts_flags = {**f, "flags": set(f["flags"])}
    fpc = flop_per_cycle(facts_flags)
    cpuinfo_hz = (f["mhz"] or 0) * 1e6
    clock = r["clock_hz"] or cpuinfo_hz
    cal_src = "calib"
    refs = {
        "cpuinfo": f"/proc/cpuinfo and sysfs of this host: {f['model_name']} (vendor {f['vendor']}, family "
                   f"{f['family']}, model {f['model']}), {f['cores']} cores, cpu MHz {f['mhz']}",
        "clock-loop": f"perfmodel calibrate {r['date']}: {r['clock_how']}" if r["clock_hz"] else
                      "not measured: " + r["clock_how"],
        "peak-arith": "cores x clock x FLOP/cycle; FLOP/cycle from the cpuinfo ISA flags (perfmodel.calibration.host.flop_per_cycle)",
        cal_src: f"perfmodel calibrate {r['date']}, torch {r['torch']}, 1 thread (torch.set_num_threads(1))"
                 + (", quick mode" if r["quick"] else "")
                 + f"; other load on the CPUs before it: {100 * r['busy_before']['t1']:.0f}% busy",
    }
    t1 = r["t1"]
    peaks: dict[str, dict[str, Any]] = {}
    for prec, (fpc_p, why) in fpc.items():
        peak = clock * fpc_p
        peaks[prec] = {"value": fmt_si(peak, "FLOP/s"), "source": "peak-arith",
                       "note": f"1 core x {clock / 1e9:.3f} GHz x {fpc_p:g} FLOP/cycle ({why}); dense"}
    gemm_max: dict[str, Any] = {}
    shapes: list[dict[str, Any]] = []
    for prec in ("fp32", "bf16"):
        pts = t1[f"gemm_{prec}"]
        best = max(pts, key=lambda p: p["flop_per_s"])
        pct = f"; {100 * best['flop_per_s'] / (clock * fpc[prec][0]):.0f}% of peak" if prec in fpc else ""
        gemm_max[prec] = {"value": fmt_si(best["flop_per_s"], "FLOP/s"), "source": cal_src,
                          "note": f"torch.mm best of {len(pts)} shapes: {best['m']}x{best['n']}x{best['k']}{pct}"}
        shapes += [{"precision": prec, "m": p["m"], "n": p["n"], "k": p["k"],
                    "achieved": fmt_si(p["flop_per_s"], "FLOP/s"), "source": cal_src} for p in pts]
    mem, oh, ew = t1["memory"], t1["op_overhead"], t1["elementwise"]
    tall = r.get(f"t{r['threads_all']}")
    all_note = ""
    if tall and r["threads_all"] > 1:
        b32 = max(p["flop_per_s"] for p in tall["gemm_fp32"])
        b16 = max(p["flop_per_s"] for p in tall["gemm_bf16"])
        all_note = (f" With all {r['threads_all']} threads in one process: fp32 GEMM {fmt_si(b32, 'FLOP/s')}, "
                    f"bf16 GEMM {fmt_si(b16, 'FLOP/s')}, triad {fmt_si(tall['memory']['triad_Bps'], 'B/s')}, "
                    f"copy {fmt_si(tall['memory']['copy_Bps'], 'B/s')}.")
    l2 = f["caches"].get("L2", 2**20)
    l3 = f["caches"].get("L3")
    mem_share = f["mem_bytes"] / max(f["cores"], 1)
    return {
        "id": "host-cpu",
        "name": f"One core of {f['model_name']} (family {f['family']}, model {f['model']}), the host calibrated on {r['date']}",
        "vendor": "host",
        "kind": "cpu",
        "generation": "host-cpu",
        "reference_node": "host-node",
        "host_cpu": {"vendor": f["vendor"], "family": f["family"] or 0, "model": f["model"] or 0},
        "references": refs,
        "matrix_peak": peaks,
        "vector_peak": {k: {**v, "note": v["note"] + "; a CPU has no separate matrix unit"} for k, v in peaks.items()},
        "compute_units": {"value": 1, "source": "cpuinfo", "note": f"one core per 'accelerator'; the host has {f['cores']}"},
        "clock": {"value": fmt_si(clock, "Hz"), "source": "clock-loop" if r["clock_hz"] else "cpuinfo",
                  "note": f"measured sustained clock; /proc/cpuinfo says {f['mhz']} MHz (the TSC rate under KVM)"},
        "hbm_capacity": {"value": _binary(mem_share), "source": "cpuinfo",
                         "note": f"MemTotal {_binary(f['mem_bytes'])} shared by {f['cores']} cores; DRAM, not HBM"},
        "hbm_bandwidth": {"value": fmt_si(mem["triad_Bps"], "B/s"), "source": cal_src,
                          "note": "no datasheet figure applies to one core of a (virtual) machine: the 1-thread "
                                  "triad is used as the 'peak'"},
        "l2_cache": {"value": _binary(l2), "source": "cpuinfo",
                     "note": "per core" + (f"; L3 {_binary(l3)} shared" if l3 else "")},
        "tdp": {"value": "5 W", "source": "estimate: a server core's share of socket power (e.g. 360 W / 96 cores = 3.75 W, "
                "AMD EPYC 9654 datasheet) rounded up; not measured",
                "note": "placeholder: the schema requires a TDP"},
        "calibration": {
            "gemm_max_achievable": gemm_max,
            "gemm_shapes": shapes,
            **({"gemm_by_shape": True} if shape_dependent(t1) else {}),
            "hbm_achieved": {"value": fmt_si(mem["triad_Bps"], "B/s"), "source": cal_src,
                             "note": f"torch.add(b, c, alpha=3, out=a) on {_binary(mem['array_bytes'])} fp32 arrays "
                                     f"(3 arrays counted); copy_ {fmt_si(mem['copy_Bps'], 'B/s')} (2 counted)"},
            "elementwise_achieved": {
                "value": fmt_si(ew["Bps"], "B/s"), "source": cal_src,
                "note": ("forward+backward under torch.autocast('cpu', bf16) on "
                         f"{ew['sizes']['tokens']} tokens, hidden {ew['sizes']['hidden']}, ffn {ew['sizes']['ffn']}, "
                         f"vocab {ew['sizes']['vocab']}; bytes = (inputs + outputs) x element size per op and "
                         "direction; total bytes / total time of: "
                         + ", ".join(f"{k} {fmt_si(v['Bps'], 'B/s')}" for k, v in ew["per_op"].items()))},
            "attention": [
                {"kernel": "sdpa-cpu", "direction": "fwd_bwd", "causal": p["causal"], "head_dim": p["head_dim"],
                 "seq_len": p["seq_len"], "precision": "bf16", "achieved": fmt_si(p["flop_per_s"], "FLOP/s"),
                 "source": cal_src}
                for p in t1["attention"]
            ],
            **({"optimizer_step_per_param": {
                "value": fmt_si(t1["optimizer"]["s_per_param"], "s"), "source": cal_src,
                "note": f"torch.optim.AdamW (foreach) step on {t1['optimizer']['params']:.3g} fp32 parameters"}}
               if "optimizer" in t1 else {}),
            "kernel_launch": {"value": fmt_si(oh["nograd_op_s"], "s"), "source": cal_src,
                              "note": "no kernel launch on a CPU: eager dispatch of x * 2 on 1 element without autograd"},
            "host_op_overhead": {"value": fmt_si(oh["autograd_op_s"], "s"), "source": cal_src,
                                 "note": f"x * 2, 1 element, requires_grad (forward only); forward+backward per op "
                                         f"{fmt_si(oh['fwd_bwd_per_op_s'], 's')}"},
        },
        "notes": ("One core running one torch thread is one 'accelerator'; runs use torch.set_num_threads(1) per "
                  "process, and a 2-process gloo job is 2 accelerators of host-node. Compute, memory traffic and "
                  "gloo communication all run on the same core, so nothing overlaps." + all_note),
    }


def node_yaml(r: dict[str, Any]) -> dict[str, Any]:
    """host-node: the host's cores as accelerators, gloo over loopback TCP as the fabric."""
    f = r["facts"]
    ar, sr = r["gloo"]["all_reduce"], r["gloo"]["send_recv"]
    link = max(p["busbw_Bps"] for p in sr)
    ar_big = max(p["busbw_Bps"] for p in ar)
    src = "calib"
    return {
        "id": "host-node",
        "name": (f"{f['cores']} cores of {f['model_name']} (family {f['family']}, model {f['model']}), "
                 f"gloo over loopback; calibrated {r['date']}"),
        "accelerator": "host-cpu",
        "accelerators_per_node": int(f["cores"]),
        "references": {
            src: f"perfmodel calibrate {r['date']}, torch {r['torch']}, torch.distributed gloo, 2 processes x 1 thread "
                 f"on 127.0.0.1" + (", quick mode" if r["quick"] else ""),
            "cpuinfo": f"/proc/meminfo and /proc/cpuinfo of this host ({f['cores']} cores)",
        },
        "intra_node": {
            "fabric": "gloo-tcp-loopback",
            "topology": "shared-memory",
            "bandwidth": {"value": fmt_si(link, "B/s"), "direction": "one-way", "source": src,
                          "note": "no line rate exists for loopback TCP: the best measured send/recv rate "
                                  f"(ping-pong, message {_binary(max(sr, key=lambda p: p['busbw_Bps'])['size_bytes'])}) is used"},
            "latency": {"value": fmt_si(ar[0]["time_s"], "s"), "source": src,
                        "note": f"median 2-rank all_reduce of {_binary(ar[0]['size_bytes'])}; one-way send/recv "
                                f"{fmt_si(sr[0]['time_s'], 's')}; fastest all_reduce {fmt_si(ar[0]['min_s'], 's')} "
                                "(scheduler jitter on this VM)"},
            "in_network_reduction": False,
            "collective_efficiency": {"value": round(ar_big / link, 3), "source": src,
                                      "note": f"best all_reduce busbw {fmt_si(ar_big, 'B/s')} / bandwidth above"},
            "curves": [
                {"collective": kind, "algorithm": "gloo", "group_size": 2, "source": src,
                 "points": [{"size": _binary(p["size_bytes"]), "busbw": fmt_si(p["busbw_Bps"], "B/s")}
                            for p in pts]}
                for kind, pts in (("all_reduce", ar), ("send_recv", sr))
            ],
        },
        "host_memory": {"value": _binary(f["mem_bytes"]), "source": "cpuinfo"},
        "notes": ("Each of the host's cores is one host-cpu 'accelerator' (one process, one torch thread). The "
                  "gloo transfers are copies by the same cores that compute, so communication does not overlap "
                  "with compute. busbw for 2 ranks: all_reduce bytes/time x 2(n-1)/n = bytes/time; send_recv is "
                  "one-way bytes/time from a ping-pong."),
    }


def _binary(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes:g} B"


def dump_spec(obj: dict[str, Any], path: Path, header: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = ""
    for key, val in obj.items():  # references and notes read better as blocks
        style = False if key in ("references", "notes", "intra_node") or not isinstance(val, (dict, list)) else None
        text += yaml.safe_dump({key: val}, sort_keys=False, width=1000, allow_unicode=True, default_flow_style=style)
    path.write_text(header + text)
