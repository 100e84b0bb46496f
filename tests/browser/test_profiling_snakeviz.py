"""Chapter 03 in the browser: SnakeViz, served on 127.0.0.1 by hpclab, opens through the Jupyter
server's proxy (jupyter-server-proxy at /proxy/PORT/) in headless Chromium, its chart included,
and the page works offline (no CDN).

Run:  pytest -m browser tests/browser/test_profiling_snakeviz.py -v
A screenshot is kept in test-artifacts/snakeviz-through-jupyter/.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hpclab.profiling import cprofile_tree, snakeviz_server
from hpclab.profiling.patient import train

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_snakeviz_through_the_jupyter_proxy(
    lab_factory, chromium_browser, tmp_path, save_artifacts
):
    prof = tmp_path / "patient.prof"
    cprofile_tree.profile_call(lambda: train("slow-data", steps=10), prof)
    server, _ = lab_factory(REPO_ROOT / "notebooks" / "03_profiling.ipynb")
    viz = snakeviz_server.serve(prof)
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
        assert viz.proxy_path == f"/proxy/{viz.port}/snakeviz/profile"
        response = page.goto(server.url(viz.proxy_path), wait_until="domcontentloaded")
        assert response is not None and response.status == 200
        page.wait_for_selector("#chart svg #path-1", timeout=60_000)  # the icicle/sunburst drew
        page.wait_for_selector("#pstats-table tbody tr", timeout=30_000)  # the stats table
        assert "__getitem__" in page.inner_text("#pstats-table")
        out = REPO_ROOT / "test-artifacts" / "snakeviz-through-jupyter"
        out.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out / "screenshot.png"))  # the viewport: the table is long
        print(f"screenshot: {out / 'screenshot.png'}")
    except BaseException:
        save_artifacts("snakeviz-through-jupyter-failed", page=page, server=server, console=console)
        raise
    finally:
        context.close()
        viz.stop()
    assert not viz.running()
