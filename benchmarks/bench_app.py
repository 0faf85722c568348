"""Benchmark the explorer as its users meet it: `streamlit run app.py` on a loopback port, driven by
Playwright in Debian's Chromium at 1440x900 (headless, --no-sandbox; never `playwright install`).

Reports (seconds, wall clock on this machine): the cold first page (a fresh server: imports,
catalogue, first estimate, charts drawn), a warm reload, and each interaction from the change to
the redrawn page: a layout widget, a what-if slider, the Layout search page, the Compare page,
the Validation page, a purchase input (PUE) on Compare hardware; plus the number of Vega console warnings ("Dropping ..." etc.).

    python benchmarks/bench_app.py [--json OUT.json] [--repeat 3]

A benchmark, not a test: the figures depend on the machine and what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CHART = "[data-testid='stVegaLiteChart'] svg, [data-testid='stVegaLiteChart'] canvas"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.headless", "true",
           "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit("streamlit did not start")


def settled(page: Any) -> None:
    """Streamlit's run is over (no status widget) and a chart is drawn."""
    page.wait_for_timeout(150)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')")
    page.locator(CHART).first.wait_for()


def timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(repeat: int) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("PERFMODEL_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        raise SystemExit("no Chromium binary (apt-get install chromium)")
    proc, url = start_server()
    out: dict[str, list[float]] = {}
    warnings: list[str] = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.set_default_timeout(180_000)
            page.on("console", lambda m: warnings.append(m.text) if m.type == "warning" else None)

            def add(key: str, seconds: float) -> None:
                out.setdefault(key, []).append(seconds)

            add("cold page (fresh server)", timed(lambda: (page.goto(url), settled(page))))
            for i in range(repeat):
                if i:  # the last round ended on the Validation page: back to the Estimate page, untimed
                    page.goto(url)
                    settled(page)
                add("warm reload", timed(lambda: (page.reload(), settled(page))))

                def change_tp(value: str) -> None:
                    box = page.get_by_label("tp", exact=True)
                    old = page.locator("[data-testid='stMetricValue']").first.inner_text()
                    box.fill(value)
                    box.press("Enter")
                    page.wait_for_function("(o) => { const m = document.querySelector('[data-testid=\"stMetricValue\"]');"
                                           " return m && m.innerText !== o; }", arg=old)
                    settled(page)

                tp_now = page.get_by_label("tp", exact=True).input_value()
                add("layout widget (tp)", timed(lambda tp_now=tp_now: change_tp("4" if tp_now != "4" else "8")))
                add("what-if slider (URL)", timed(lambda i=i: (page.goto(f"{url}/?s_flops={2.0 if i % 2 == 0 else 1.5}"),
                                                              settled(page))))
                for name in ("Layout search", "Compare hardware", "Validation"):
                    add(f"page: {name}", timed(lambda name=name: (page.goto(f"{url}/?page={name.replace(' ', '+')}"),
                                                                 settled(page))))
                    if name == "Compare hardware":  # a purchase input: reprices without a re-search

                        def change_pue(value: str) -> None:
                            box = page.get_by_label("PUE", exact=True)
                            box.fill(value)
                            box.press("Enter")
                            settled(page)

                        add("purchase input (PUE)", timed(lambda i=i: change_pue("1.3" if i % 2 == 0 else "1.2")))
            browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    vega = [w for w in warnings if "Dropping" in w or "WARN" in w or "Infinite extent" in w]
    return {"seconds": {k: {"median": statistics.median(v), "max": max(v), "n": len(v)} for k, v in out.items()},
            "vega_console_warnings": len(vega), "console_warnings": len(warnings), "examples": vega[:5]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    res = run(a.repeat)
    for k, v in res["seconds"].items():
        print(f"{k:32s} median {v['median']:6.2f} s   max {v['max']:6.2f} s   (n={v['n']})")
    print(f"Vega console warnings: {res['vega_console_warnings']} (all console warnings: {res['console_warnings']})")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
