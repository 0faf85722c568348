"""The app in a real browser: `streamlit run app.py` on a loopback port, driven by Playwright in
Debian's Chromium (/usr/bin/chromium, headless, --no-sandbox; never `playwright install`).

Skips when Playwright or a Chromium binary is missing (.ci/browser-deps.sh installs both). Set
PERFMODEL_SCREENSHOTS=DIR to keep the screenshots of every page.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("PERFMODEL_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")

pytest.importorskip("streamlit")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (.ci/browser-deps.sh)")
if not CHROMIUM:
    pytest.skip("no Chromium binary (apt-get install chromium; .ci/browser-deps.sh)", allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start the app on a free loopback port; stop that process (by its PID) afterwards."""
    port = free_port()
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    cmd = [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.headless", "true",
           "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"streamlit did not start (exit {proc.poll()}):\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as p:
        try:
            b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])
        except Exception as e:  # a Chromium that cannot start here is an environment gap, not an app bug
            pytest.skip(f"Chromium at {CHROMIUM} did not launch: {e}")
        yield b
        b.close()


def shots_dir(tmp_path: Path) -> Path:
    d = Path(os.environ.get("PERFMODEL_SCREENSHOTS") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


CHART = "[data-testid='stVegaLiteChart'] svg, [data-testid='stVegaLiteChart'] canvas"


def open_page(browser: object, url: str) -> object:
    page = browser.new_page(viewport={"width": 1500, "height": 3000})  # type: ignore[attr-defined]
    page.set_default_timeout(90_000)
    page.goto(url)
    return page


def full_shot(page: object, path: Path) -> None:
    """A screenshot of the whole page. Streamlit scrolls inside its main container and redraws its
    charts when the window is resized, so the page opens tall (`open_page`) rather than growing here."""
    settle(page)
    page.wait_for_timeout(1000)  # type: ignore[attr-defined]  # let Vega finish drawing
    page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]


def settle(page: object) -> None:
    """Wait until Streamlit has finished the current run (no 'Running...' status widget)."""
    page.wait_for_timeout(500)  # type: ignore[attr-defined]
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')")  # type: ignore[attr-defined]


def test_estimate_page_in_chromium(server: str, browser: object, tmp_path: Path) -> None:
    page = browser.new_page(viewport={"width": 1500, "height": 3000})  # type: ignore[attr-defined]
    page.set_default_timeout(90_000)
    warnings: list[str] = []
    page.on("console", lambda m: warnings.append(m.text) if m.type == "warning" else None)
    page.goto(server)
    page.get_by_text("Step time (s)").first.wait_for()
    page.locator(CHART).first.wait_for()
    settle(page)
    first = page.locator("[data-testid='stMetricValue']").first.inner_text()
    # change a widget: tp 8 -> 4 (dp doubles), then wait for the rerun to redraw the number
    tp = page.get_by_label("tp", exact=True)
    tp.fill("4")
    tp.press("Enter")
    page.wait_for_function(
        "(old) => { const m = document.querySelector('[data-testid=\"stMetricValue\"]'); return m && m.innerText !== old; }",
        arg=first)
    page.locator(CHART).first.wait_for()
    settle(page)
    shot = shots_dir(tmp_path) / "estimate.png"
    full_shot(page, shot)
    text = page.inner_text("body")
    assert "Traceback" not in text
    assert "tp=4" in page.url or "tp=4&" in page.url  # the what-if is in the link
    assert shot.stat().st_size > 10_000
    assert not [w for w in warnings if any(k in w for k in VEGA_WARNINGS)], warnings
    page.close()


VEGA_WARNINGS = ("WARN", "Dropping", "Infinite extent")  # what Vega / Vega-Lite print about a spec they had to mend


@pytest.mark.parametrize("name", ["Compare hardware", "Validation", "Layout search", "Training run"])
def test_other_pages_in_chromium(server: str, browser: object, tmp_path: Path, name: str) -> None:
    page = browser.new_page(viewport={"width": 1500, "height": 3000})  # type: ignore[attr-defined]
    page.set_default_timeout(90_000)
    warnings: list[str] = []
    page.on("console", lambda m: warnings.append(m.text) if m.type == "warning" else None)
    page.goto(f"{server}/?page={name.replace(' ', '+')}")
    page.get_by_role("heading", name=name.split()[0], exact=False).first.wait_for()
    page.locator(CHART).first.wait_for()
    settle(page)
    full_shot(page, shots_dir(tmp_path) / f"{name.split()[0].lower()}.png")
    assert "Traceback" not in page.inner_text("body")
    assert not [w for w in warnings if any(k in w for k in VEGA_WARNINGS)], warnings  # our chart specs need no mending
    page.close()


def test_search_row_opens_on_the_estimate_page(server: str, browser: object, tmp_path: Path) -> None:
    pytest.importorskip("perfmodel.planning")
    page = open_page(browser, f"{server}/?page=Layout+search")
    page.get_by_text("Layouts that fit").wait_for()
    grid = page.locator("[data-testid='stDataFrame']").first
    grid.wait_for()
    settle(page)
    box = grid.bounding_box()
    page.mouse.click(box["x"] + 16, box["y"] + 35 + 18)  # the first data row's selection box
    page.get_by_role("button", name="on the Estimate page").click()
    page.get_by_text("Estimate one training step").wait_for()
    page.locator(CHART).first.wait_for()
    settle(page)
    full_shot(page, shots_dir(tmp_path) / "opened-from-search.png")
    assert "Traceback" not in page.inner_text("body")
    assert "page=" not in page.url  # back on the default page, with the layout's degrees in the link
    page.close()


def sidebar_expander(page: object, title: str, showing: str | None = None) -> object:
    """The sidebar expander whose summary starts with `title`, opened (and, given `showing`, with that
    text visible). A rerun can redraw the sidebar between the click and the check and close the
    expander again, so this settles first and clicks again until it stays open."""
    exp = page.locator("[data-testid='stSidebar'] [data-testid='stExpander']", has_text=title).first  # type: ignore[attr-defined]
    details = exp.locator("details").first
    for _ in range(6):
        settle(page)
        if details.get_attribute("open") is None:
            exp.locator("summary").first.click()
        target = exp.get_by_text(showing).first if showing else exp.locator("summary").first
        with contextlib.suppress(sync_api.TimeoutError):
            target.wait_for(state="visible", timeout=10_000)
            if details.get_attribute("open") is not None:
                return exp
    return exp


def headline(page: object) -> str:
    return str(page.locator("[data-testid='stMetricValue']").first.inner_text())  # type: ignore[attr-defined]


def headline_becomes(page: object, want: str, timeout_ms: int = 90_000) -> str:
    """The headline once it shows `want` (a rerun may draw intermediate states), else what it shows."""
    with contextlib.suppress(sync_api.TimeoutError):
        page.wait_for_function("(w) => { const m = document.querySelector('[data-testid=\"stMetricValue\"]');"  # type: ignore[attr-defined]
                               " return m && m.innerText === w; }", arg=want, timeout=timeout_ms)
    settle(page)
    return headline(page)


def test_uploaded_profile_drives_the_estimate(server: str, browser: object, tmp_path: Path) -> None:
    """Upload a profile fitted on a few CPU runs: the headline step time moves off the default
    profile's and equals perfmodel.estimate(..., calibration=that file); the profile's provenance
    shows in the sidebar; the Training run page runs under it."""
    from test_app_profiles import small_profile  # pytest puts tests/ on sys.path

    import perfmodel
    from perfmodel.parallel.plan import ParallelPlan

    profile = small_profile(tmp_path)
    plan = ParallelPlan(dp=16, tp=8, pp=8, sequence_parallel=True, zero_stage=1, micro_batch=1, global_batch=1536,
                        recompute="selective", precision="bf16")  # the sidebar's defaults
    want = perfmodel.estimate("gpt3-175b", "a100-sxm4-80gb", plan, calibration=str(profile))
    default = perfmodel.estimate("gpt3-175b", "a100-sxm4-80gb", plan, calibration="default")
    assert f"{want.step_time_s:.4g}" != f"{default.step_time_s:.4g}"
    page = open_page(browser, server)
    page.locator(CHART).first.wait_for()
    assert headline_becomes(page, f"{default.step_time_s:.4g}") == f"{default.step_time_s:.4g}"
    exp = sidebar_expander(page, "Your calibration profile")
    exp.locator("input[type='file']").set_input_files(str(profile))
    assert headline_becomes(page, f"{want.step_time_s:.4g}") == f"{want.step_time_s:.4g}"
    sidebar = page.locator("[data-testid='stSidebar']")
    assert sidebar.get_by_role("radio", name="my-cluster.yaml").is_checked()
    about = sidebar_expander(page, "About the profile: my-cluster.yaml", showing="cross-validated MAPE")
    about.get_by_text("cross-validated MAPE").wait_for()
    text = about.inner_text()
    assert "fitted on" in text and "cpu-runs.csv" in text and "80 % interval" in text
    body = page.inner_text("body")
    assert "my-cluster.yaml (uploaded; profile 'my-cluster')" in body and "Traceback" not in body
    page.wait_for_timeout(500)
    sidebar.screenshot(path=str(shots_dir(tmp_path) / "sidebar-uploaded-profile.png"))
    # another page of the same session keeps the profile (the URL would start a new session)
    sidebar.get_by_text("Training run", exact=True).click()
    page.get_by_role("heading", name="The whole training run").wait_for()
    page.locator(CHART).first.wait_for()
    settle(page)
    assert sidebar.get_by_role("radio", name="my-cluster.yaml").is_checked()
    assert "Traceback" not in page.inner_text("body")
    page.close()


def test_bad_profile_upload_names_the_field(server: str, browser: object, tmp_path: Path) -> None:
    bad = tmp_path / "cluster-b.yaml"
    bad.write_text("name: cluster-b\nparameters:\n  memory_bound: {fitted: 7.0}\n")
    page = open_page(browser, server)
    page.locator(CHART).first.wait_for()
    settle(page)
    before = headline(page)
    exp = sidebar_expander(page, "Your calibration profile")
    exp.locator("input[type='file']").set_input_files(str(bad))
    err = exp.locator("[data-testid='stAlertContentError']")
    err.wait_for()
    settle(page)
    msg = err.inner_text()
    assert "cluster-b.yaml" in msg and "parameters.memory_bound.fitted" in msg and "Traceback" not in page.inner_text("body")
    assert page.locator("[data-testid='stSidebar']").get_by_role("radio", name="default").is_checked()
    assert headline(page) == before
    page.close()
