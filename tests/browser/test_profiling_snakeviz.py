"""Chapter 03 in the browser: after Run All, the SnakeViz link opens as a JupyterLab tab through
the Jupyter server's proxy (jupyter-server-proxy's ``server-proxy:open``; no new browser tab),
its chart draws with no internet (no CDN), and the server still answers after the last cell ran.
While it runs, the lab, its kernel and SnakeViz listen on loopback only.

Run:  pytest -m browser tests/browser/test_profiling_snakeviz.py -v
A screenshot is kept in test-artifacts/snakeviz-through-jupyter/.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from listening import assert_loopback_only
from test_lab import (
    KERNEL_IDLE_TIMEOUT_S,
    NOTEBOOK_PANEL,
    _run_all,
    _wait_all_executed,
    _wait_kernel_idle,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

REPO_ROOT = Path(__file__).resolve().parents[2]
CELLS = [  # chapter 03's cells, in small: profile, serve, and a last cell after the link
    "from pathlib import Path\n"
    "from hpclab.profiling import cprofile_tree, snakeviz_server\n"
    "from hpclab.profiling.patient import train\n"
    "prof_file = Path('patient.prof').resolve()\n"
    "cprofile_tree.profile_call(lambda: train('slow-data', steps=10), prof_file)",
    "viz = snakeviz_server.serve(prof_file)\nviz",
    "print('last cell; SnakeViz running:', viz.running())",
]


def _notebook(path: Path) -> Path:
    cells = [
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": s}
        for s in CELLS
    ]
    meta = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    path.write_text(
        json.dumps({"cells": cells, "metadata": meta, "nbformat": 4, "nbformat_minor": 5})
    )
    return path


def test_snakeviz_opens_as_a_lab_tab_through_the_proxy_after_run_all(
    lab_factory, chromium_browser, tmp_path, save_artifacts
):
    server, rel = lab_factory(_notebook(tmp_path / "snakeviz.ipynb"))
    context = chromium_browser.new_context(viewport={"width": 1400, "height": 1000})
    # Compute nodes have no internet: refuse every request that leaves this machine.
    context.route(
        "**/*",
        lambda route: route.abort() if "127.0.0.1" not in route.request.url else route.continue_(),
    )
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(f"[{m.type}] {m.text}"))
    try:
        page.goto(server.url(f"/lab/tree/{rel}"), wait_until="domcontentloaded")
        page.wait_for_selector(f"{NOTEBOOK_PANEL} .jp-Notebook", timeout=60_000)
        _wait_kernel_idle(page, KERNEL_IDLE_TIMEOUT_S)
        _run_all(page)
        _wait_all_executed(page, 180)
        assert "SnakeViz running: True" in page.inner_text(NOTEBOOK_PANEL)
        link = page.locator(f"{NOTEBOOK_PANEL} a.hpclab-snakeviz-link")
        href = link.get_attribute("href")
        assert href and "/proxy/" in href and "/snakeviz/profile" in href
        # the lab, its kernel and SnakeViz (the kernel's child): loopback only
        found = assert_loopback_only([server.proc.pid], "JupyterLab with SnakeViz")
        ports = {port for *_, port in found}
        assert {server.port, int(href.split("/proxy/")[1].split("/")[0])} <= ports
        pages_before = len(context.pages)
        link.click()
        tab = page.wait_for_selector(".jp-ServerProxy iframe", timeout=30_000)
        assert len(context.pages) == pages_before, "the link opened a new browser tab"
        frame = tab.content_frame()
        assert frame is not None
        frame.wait_for_selector("#chart svg #path-1", timeout=60_000)  # the icicle/sunburst
        assert frame.url.endswith(href), frame.url  # through the Jupyter server's proxy
        frame.wait_for_selector("#pstats-table tbody tr", timeout=30_000)  # the stats table
        assert "__getitem__" in frame.inner_text("#pstats-table")
        out = REPO_ROOT / "test-artifacts" / "snakeviz-through-jupyter"
        out.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out / "screenshot.png"))
        print(f"screenshot: {out / 'screenshot.png'}")
    except BaseException:
        save_artifacts("snakeviz-through-jupyter-failed", page=page, server=server, console=console)
        raise
    finally:
        context.close()
