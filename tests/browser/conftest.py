"""Fixtures for the real-browser test: a throw-away JupyterLab server and headless Chromium.

The server runs with the interpreter that runs pytest (``sys.executable -m jupyter lab``), on a
free loopback port with a random token, in a temporary root directory, with its own config,
runtime, IPython and lab-settings directories so that nothing the student or instructor has set
up leaks in (and nothing leaks out). Lab extensions and kernels are found in
``sys.prefix/share/jupyter``, which stays visible.

Chromium is Debian's ``/usr/bin/chromium`` driven by Playwright's sync API; ``playwright install``
is never needed. Without Chromium or Playwright the tests skip, unless ``HPCLAB_REQUIRE_BROWSER``
is set (CI sets it), in which case they fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO_ROOT / "test-artifacts"
CHROMIUM = Path(os.environ.get("HPCLAB_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",  # Chromium's sandbox refuses to run as root (containers, CI)
    "--disable-gpu",
    "--disable-dev-shm-usage",  # /dev/shm may be 64 MB on clusters and in containers
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
SERVER_START_TIMEOUT_S = 60.0

# User settings written into the server's private settings dir:
# - windowingMode "none" keeps every cell in the DOM, so the test can read all prompts/outputs;
# - no update check / news toast covering the page.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification": {"checkForUpdates": False, "fetchNews": "false"},
}


def _missing_browser_reason() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the Python package 'playwright' is not installed (pip install playwright)"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} not found (apt-get install chromium; never `playwright install`)"
    return None


@pytest.fixture(scope="session")
def chromium_browser() -> Iterator[object]:
    """One headless Chromium for the whole session (Playwright sync API)."""
    reason = _missing_browser_reason()
    if reason:
        if os.environ.get("HPCLAB_REQUIRE_BROWSER"):
            pytest.fail(f"HPCLAB_REQUIRE_BROWSER is set but {reason}")
        pytest.skip(f"browser test needs Chromium + Playwright: {reason}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


# ---------------------------------------------------------------------------------------------
# JupyterLab server
# ---------------------------------------------------------------------------------------------


@dataclass
class LabServer:
    root: Path
    port: int
    token: str
    log_path: Path
    proc: subprocess.Popen | None = None
    _log: object = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.base_url}{path}{sep}token={self.token}"

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


def free_port() -> int:
    """A port the kernel just handed out on loopback (never a fixed one: shared nodes collide)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_env(tmp: Path) -> dict[str, str]:
    from jupyter_core.paths import jupyter_data_dir

    env = dict(os.environ)
    env.update(CI="true", HPCLAB_QUICK="1", PLOTLY_RENDERER="plotly_mimetype")
    # The kernel starts in the temp root: make the repo's `hpclab` importable even without
    # `pip install -e .`.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    for var, sub in [
        ("JUPYTER_CONFIG_DIR", "config"),
        ("JUPYTER_RUNTIME_DIR", "runtime"),
        ("IPYTHONDIR", "ipython"),
        ("JUPYTERLAB_SETTINGS_DIR", "lab-settings"),
        ("JUPYTERLAB_WORKSPACES_DIR", "lab-workspaces"),
    ]:
        env[var] = str(tmp / sub)
        (tmp / sub).mkdir(parents=True, exist_ok=True)
    # The user data dir is only swapped out when it holds no lab extensions or kernels
    # (a `pip install --user` JupyterLab keeps them there). sys.prefix/share/jupyter is always
    # on the search path, whatever JUPYTER_DATA_DIR says.
    user_data = Path(jupyter_data_dir())
    if not any((user_data / d).is_dir() for d in ("labextensions", "kernels")):
        env["JUPYTER_DATA_DIR"] = str(tmp / "data")
    for plugin, values in LAB_SETTINGS.items():
        pkg, name = plugin.rsplit("/", 1)
        path = tmp / "lab-settings" / pkg / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    return env


def _wait_ready(server: LabServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with code {server.proc.returncode}")
        try:
            with urllib.request.urlopen(server.url("/api/status"), timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    raise TimeoutError(f"jupyter lab did not answer /api/status within {timeout:.0f} s")


def kill_tree(proc: subprocess.Popen) -> None:
    """Stop the server and every process under it (kernels run in their own sessions)."""
    from hpclab.dist.reap import kill_tree as reap

    reap([proc.pid], grace_s=5)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def start_lab(root: Path, tmp: Path) -> LabServer:
    env = _server_env(tmp)
    log_path = tmp / "jupyter-lab.log"
    last_error: Exception | None = None
    for _attempt in range(3):  # a free port can be taken between probing and binding
        server = LabServer(
            root=root, port=free_port(), token=secrets.token_hex(24), log_path=log_path
        )
        cmd = [
            sys.executable, "-m", "jupyter", "lab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={server.port}",
            "--port-retries=0",
            f"--ServerApp.root_dir={root}",
            "--ServerApp.open_browser=False",
        ]  # fmt: skip
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")
        env["JUPYTER_TOKEN"] = server.token  # not on the command line: `ps` shows it to all users
        server._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop_lab
        server.proc = subprocess.Popen(
            cmd, cwd=root, env=env, stdout=server._log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:
            _wait_ready(server, SERVER_START_TIMEOUT_S)
            return server
        except (RuntimeError, TimeoutError) as exc:
            last_error = exc
            stop_lab(server)
    raise RuntimeError(f"{last_error}; server log:\n{log_path.read_text(errors='replace')[-4000:]}")


def stop_lab(server: LabServer) -> None:
    if server.proc is not None:
        kill_tree(server.proc)
    if server._log is not None:
        server._log.close()


@pytest.fixture
def lab_factory(tmp_path: Path) -> Iterator[object]:
    """``lab_factory(notebook_path) -> (server, relative notebook path)``; always torn down."""
    servers: list[LabServer] = []

    def make(notebook: Path) -> tuple[LabServer, str]:
        root = tmp_path / "root"
        root.mkdir(exist_ok=True)
        shutil.copy(notebook, root / notebook.name)
        server = start_lab(root, tmp_path / "jupyter")
        servers.append(server)
        return server, notebook.name

    yield make
    for server in servers:
        stop_lab(server)


# ---------------------------------------------------------------------------------------------
# Failure artifacts
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def browser_page(chromium_browser, request):
    """``with browser_page(server) as (page, console):`` a fresh 1400x1000 page whose browser
    console lines are collected. A failure in the block saves the artifacts (with ``server``'s
    log; ``on_failure(folder)`` adds more) and prints where; the page's context always closes."""

    @contextlib.contextmanager
    def open_page(server: LabServer | None = None, on_failure=None):
        context = chromium_browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        console: list[str] = []
        page.on("console", lambda m: console.append(f"[{m.type}] {m.text}"))
        try:
            yield page, console
        except BaseException:
            out = _save_artifacts(request.node.nodeid, page=page, server=server, console=console)
            if on_failure is not None:
                on_failure(out)
            print(f"artifacts saved to {out}")
            raise
        finally:
            context.close()

    return open_page


@pytest.fixture
def save_artifacts():
    """``save_artifacts(name, page=..., server=..., console=[...]) -> folder`` (for failures)."""
    return _save_artifacts


def _save_artifacts(name: str, page=None, server: LabServer | None = None, console=()) -> Path:
    """Full-page screenshot, page text, browser console and server log into test-artifacts/."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    out = ARTIFACTS / safe
    out.mkdir(parents=True, exist_ok=True)
    if page is not None:
        try:
            page.screenshot(path=str(out / "screenshot.png"), full_page=True)
        except Exception as exc:  # the page may be gone; keep collecting the rest
            (out / "screenshot-error.txt").write_text(repr(exc))
        try:
            (out / "page.txt").write_text(page.inner_text("body"))
        except Exception as exc:
            (out / "page-error.txt").write_text(repr(exc))
    if console:
        (out / "console.txt").write_text("\n".join(console))
    if server is not None:
        (out / "jupyter-lab.log").write_text(server.log_text())
    return out
