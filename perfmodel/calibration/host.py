"""Facts about this host's CPU (model, ISA flags, caches, clock, FLOP per cycle) and a wait for
the CPUs to go quiet before anything is timed. No torch: cheap to import."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["cpu_facts", "flop_per_cycle", "measure_clock_hz", "wait_for_quiet"]

# --- facts about the CPU ----------------------------------------------------------------------
def cpu_facts() -> dict[str, Any]:
    """Model name, flags, core count, cache sizes and memory from /proc and sysfs (Linux)."""
    info: dict[str, Any] = {"model_name": platform.processor() or "unknown", "flags": set(), "mhz": None,
                            "vendor": "unknown", "family": None, "model": None}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, val = (s.strip() for s in line.partition(":"))
        if key == "model name":
            info["model_name"] = val
        elif key == "flags":
            info["flags"] = set(val.split())
        elif key == "cpu MHz" and info["mhz"] is None:
            info["mhz"] = float(val)
        elif key == "vendor_id":
            info["vendor"] = val
        elif key == "cpu family" and info["family"] is None:
            info["family"] = int(val)
        elif key == "model" and info["model"] is None:
            info["model"] = int(val)
    info["cores"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    info["caches"] = _caches()
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    info["mem_bytes"] = mem_kib * 1024
    return info


def _caches() -> dict[str, int]:
    """Per-core size in bytes of each cache level: {'L1d': .., 'L2': .., 'L3': ..}."""
    out: dict[str, int] = {}
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for d in sorted(base.glob("index*")):
        try:
            level = (d / "level").read_text().strip()
            kind = (d / "type").read_text().strip()
            size = (d / "size").read_text().strip()
        except OSError:
            continue
        name = f"L{level}" + ("d" if kind == "Data" else "i" if kind == "Instruction" else "")
        mult = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(size[-1], 1)
        out[name] = int(size.rstrip("KMG")) * mult
    return out


def flop_per_cycle(facts: dict[str, Any]) -> dict[str, tuple[float, str]]:
    """Dense FLOP per cycle per core by precision, with the arithmetic as text.

    fp32: lanes x 2 (FMA = multiply + add) x FMA issues per cycle. Zen 4 (AMD family 25 with
    AVX-512) executes a 512-bit FMA as two halves on its two 256-bit FMA pipes: one zmm FMA per
    cycle, the same 32 FLOP/cycle as AVX2 on two pipes. Zen 5 (family 26) has a full 512-bit
    datapath with two zmm FMA pipes in its server and desktop parts (EPYC 9005 'Turin', models
    0x00-0x1F; Ryzen 9000, 0x40-0x4F) and keeps Zen 4's split in the mobile ones (models 0x20-0x3F,
    0x60-0x7F) (AMD's Zen 5 architecture disclosures, Hot Chips 2024). Intel server cores with
    AVX-512 are taken to issue two zmm FMAs per cycle. bf16 with AVX512_BF16: VDPBF16PS does two bf16 products per
    fp32 lane, so twice the fp32 FLOP per instruction at the same issue rate. Without a bf16
    instruction, bf16 takes fp32's FLOP per cycle (its operands are widened first).
    """
    flags: set[str] = facts["flags"]
    amd = facts["vendor"] == "AuthenticAMD"
    model = facts.get("model") or 0
    zen5_full = amd and (facts.get("family") or 0) >= 26 and not (0x20 <= model < 0x40 or 0x60 <= model < 0x80)
    if "avx512f" in flags:
        lanes = 16
        issue = 1 if amd and not zen5_full else 2
        isa = "AVX-512"
    elif "avx2" in flags or "avx" in flags:
        lanes, issue, isa = 8, 2, "AVX2"
    else:
        lanes, issue, isa = 4, 2, "SSE"
    fma = 2 if "fma" in flags or "avx512f" in flags else 1
    fp32 = lanes * fma * issue
    why = f"{isa} {lanes} fp32 lanes x {fma} (FMA) x {issue} issue/cycle"
    if amd and "avx512f" in flags:
        why += (" (Zen 5: two full-width 512-bit FMA pipes)" if zen5_full
                else " (Zen 4: a 512-bit FMA runs as two halves on two 256-bit FMA pipes)")
    out = {"fp32": (float(fp32), why)}
    if "avx512_bf16" in flags:
        out["bf16"] = (2.0 * fp32, f"AVX512_BF16 VDPBF16PS: 2 bf16 products per fp32 lane -> 2 x {fp32}")
    if "amx_bf16" in flags:
        out["bf16"] = (1024.0, "AMX-BF16 TMUL: 512 bf16 FMA per cycle")
    if "bf16" not in out:
        # no bf16 dot-product instruction (AVX2-only cores such as Zen 3): a bf16 GEMM widens its
        # operands to fp32 and multiplies on the fp32 FMA pipes, so fp32's rate bounds it
        out["bf16"] = (float(fp32), f"no AVX512_BF16 / AMX: bf16 operands widened to fp32 on the FMA pipes -> {fp32}")
    return out


_CLOCK_C = r"""
#include <stdio.h>
#include <time.h>
int main(void) {
  struct timespec a, b; unsigned long n = 1000000000UL, x = 0;
  clock_gettime(CLOCK_MONOTONIC, &a);
  __asm__ volatile("mov %1, %%rcx\n1:\n"
    "add $1, %0\n add $1, %0\n add $1, %0\n add $1, %0\n"
    "add $1, %0\n add $1, %0\n add $1, %0\n add $1, %0\n"
    "sub $8, %%rcx\n jnz 1b\n" : "+r"(x) : "r"(n) : "rcx");
  clock_gettime(CLOCK_MONOTONIC, &b);
  printf("%.6e\n", n / ((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9));
  return 0;
}
"""


def measure_clock_hz() -> tuple[float | None, str]:
    """Core clock from a chain of dependent 1-cycle adds (x86-64 with a C compiler), else None."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or platform.machine() not in ("x86_64", "AMD64"):
        return None, "no C compiler or not x86-64"
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp, "clk.c"), Path(tmp, "clk")
        src.write_text(_CLOCK_C)
        try:
            subprocess.run([cc, "-O1", str(src), "-o", str(exe)], check=True, capture_output=True, timeout=60)
            runs = [float(subprocess.run([str(exe)], check=True, capture_output=True, text=True,
                                         timeout=60).stdout) for _ in range(3)]
        except (subprocess.SubprocessError, OSError, ValueError) as e:
            return None, f"clock loop failed: {e}"
    return max(runs), "dependent 64-bit add chain, 1 add per cycle, best of 3 x 1e9 adds"


# --- timing helpers ---------------------------------------------------------------------------
def _busy_fraction(window_s: float) -> float:
    """Fraction of all CPUs' time spent busy (incl. steal) over `window_s`, from /proc/stat."""
    def snap() -> tuple[int, int]:
        vals = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
        return sum(vals[:8]), idle
    try:
        t0, i0 = snap()
        time.sleep(window_s)
        t1, i1 = snap()
    except (OSError, ValueError, IndexError):
        return 0.0
    return 1.0 - (i1 - i0) / max(t1 - t0, 1)


def wait_for_quiet(max_wait_s: float = 120.0, busy_below: float = 0.15, window_s: float = 0.5) -> float:
    """Block until other processes leave the CPUs (busy fraction < busy_below), at most
    max_wait_s. Returns the last busy fraction seen: a caller records it with its numbers, since
    another tenant on the same cores slows every microbenchmark."""
    deadline = time.monotonic() + max_wait_s
    busy = _busy_fraction(window_s)
    while busy >= busy_below and time.monotonic() < deadline:
        busy = _busy_fraction(window_s)
    return busy
