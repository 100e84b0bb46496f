"""SnakeViz on a JupyterHub: loopback only, a secret in its URL, reached through the Jupyter
server, alive as long as the kernel (chapter 03).

``%snakeviz`` and a plain ``snakeviz file.prof`` do three things that fail on a cluster's hub:
they bind ``0.0.0.0`` (every user of the node can read your profile), they open a browser tab
at ``http://127.0.0.1:8080`` (the student's laptop is not the compute node), and the page loads
``/static/...`` from the server's root, which breaks behind any proxy prefix. This module runs
SnakeViz's own page and handler in a child process that

- binds ``127.0.0.1`` on a port the kernel hands out (never a fixed one: students share nodes);
- answers only under a random secret path, ``/SECRET/snakeviz/profile`` (and its static files
  under ``/SECRET/static/``): any other user of the node can reach a loopback port, but without
  the secret gets 404. The secret reaches the child through its environment (readable by its
  owner only), never its command line (``ps`` shows that to everyone);
- serves SnakeViz's template and scripts patched to load their files *relative* to the page, so
  it works under ``{hub prefix}/proxy/PORT/`` (jupyter-server-proxy, behind the Jupyter
  server's own login);
- lives as long as the kernel: it dies with it (parent-death signal, plus a parent watchdog) or
  with :meth:`SnakeVizServer.stop`, so the link works after "Run All" and for the whole session.

The link shown in the notebook opens the page as a JupyterLab tab (jupyter-server-proxy's
``server-proxy:open`` command), not a new browser tab; outside JupyterLab it is a plain link.
Run a profile by hand instead with ``snakeviz -s -H 127.0.0.1 -p PORT file.prof`` and an SSH
tunnel, or open the saved ``.prof`` on your laptop with ``snakeviz file.prof``.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import html
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROUTE = "snakeviz/profile"
TOKEN_ENV = "HPCLAB_SNAKEVIZ_TOKEN"


def jupyter_prefix() -> str:
    """The Jupyter server's base URL as the browser sees it: the hub's per-user prefix
    (``JUPYTERHUB_SERVICE_PREFIX``, e.g. ``/user/alice/``) or ``/`` for a plain JupyterLab."""
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX") or os.environ.get("HPCLAB_JUPYTER_BASE")
    prefix = prefix or "/"
    return prefix if prefix.endswith("/") else prefix + "/"


@dataclass
class SnakeVizServer:
    """A running SnakeViz child; ``stop()`` (or the kernel's exit) ends it."""

    proc: subprocess.Popen
    port: int
    profile: Path
    token: str

    @property
    def local_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{self.token}/{ROUTE}"

    @property
    def proxy_path(self) -> str:
        """The page through jupyter-server-proxy, as a path on the Jupyter server."""
        return f"{jupyter_prefix()}proxy/{self.port}/{self.token}/{ROUTE}"

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def _repr_html_(self) -> str:
        if not self.running():
            return (
                f"SnakeViz for <code>{html.escape(str(self.profile))}</code> was stopped: "
                "<code>snakeviz_server.serve(prof_file)</code> starts it again"
            )
        # In JupyterLab a click runs jupyter-server-proxy's command: the page opens in a lab tab
        # (an iframe on the same origin, so the Jupyter login covers it). Elsewhere: a plain link.
        args = {
            "id": f"hpclab-snakeviz-{self.port}",
            "title": f"SnakeViz: {self.profile.name}",
            "url": self.proxy_path,
            "newBrowserTab": False,
        }
        return (
            f'<a href="{html.escape(self.proxy_path)}" target="_blank" rel="noopener" '
            'class="hpclab-snakeviz-link" data-commandlinker-command="server-proxy:open" '
            f"data-commandlinker-args='{html.escape(json.dumps(args))}'>Open SnakeViz</a> "
            f"(a JupyterLab tab, through the Jupyter server; running on 127.0.0.1:{self.port} "
            f"as long as this kernel; profile <code>{html.escape(str(self.profile))}</code>)"
        )


def serve(
    profile: str | os.PathLike, idle_minutes: float | None = None, timeout_s: float = 30.0
) -> SnakeVizServer:
    """Start SnakeViz for ``profile`` on 127.0.0.1 and a free port; returns the server handle.

    The child prints its port once it listens; it exits when the kernel dies, when
    :meth:`SnakeVizServer.stop` is called, or (only if ``idle_minutes`` is given) after that
    long without a request.
    """
    path = Path(profile).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"profile={str(path)!r} does not exist (save one first)")
    idle = "0" if idle_minutes is None else str(idle_minutes)
    cmd = [sys.executable, "-m", __name__, str(path), str(os.getpid()), idle]
    root = str(Path(__file__).resolve().parents[2])  # hpclab importable without an install
    token = secrets.token_urlsafe(24)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
        TOKEN_ENV: token,
    }
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        preexec_fn=_die_with_parent,  # noqa: PLW1509 - set before exec, nothing else runs
        text=True,
    )
    server = None
    deadline = time.monotonic() + timeout_s
    line = ""
    while time.monotonic() < deadline and proc.poll() is None:
        line = proc.stdout.readline().strip()  # type: ignore[union-attr]
        if line.startswith("PORT "):
            server = SnakeVizServer(proc, int(line.split()[1]), path, token)
            break
    if server is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=5)
        raise RuntimeError(
            f"SnakeViz did not start within {timeout_s:.0f} s ({line or 'no output'})"
        )
    atexit.register(server.stop)
    return server


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _patched_assets(out: Path) -> tuple[Path, Path]:
    """SnakeViz's template and static dir, copied with page-relative static URLs."""
    import shutil

    import snakeviz

    src = Path(snakeviz.__file__).parent
    templates, static = out / "templates", out / "static"
    shutil.copytree(src / "static", static)
    templates.mkdir()
    html = (src / "templates" / "viz.html").read_text()
    for attr in ('src="', "src='", 'href="'):  # tags only: the worker script adds its own
        html = html.replace(f"{attr}/static/", f"{attr}../static/")
    # The chart's web worker first loads two libraries from a CDN: with no internet (compute
    # nodes) that request hangs and the sunburst never draws. Load them from this server.
    cdn = "https://cdnjs.cloudflare.com/ajax/libs/"
    for lib, name in (("immutable/3.8.1/", "immutable"), ("lodash.js/4.17.4/", "lodash")):
        html = html.replace(
            f'"{cdn}{lib}{name}.min.js"', f"event.data['url'] + \"/static/vendor/{name}.min.js\""
        )
    (templates / "viz.html").write_text(html)
    js = (static / "snakeviz.js").read_text()
    # ... and the worker's URL of this server is window.location.origin: behind a proxy prefix
    # it must be the page's own prefix.
    here = "window.location.href.split('/snakeviz/')[0]"
    js = js.replace("window.location.origin", here)
    (static / "snakeviz.js").write_text(js)
    return templates, static


def _main(profile: str, parent_pid: int, idle_minutes: float) -> None:
    import tornado.httpserver
    import tornado.ioloop
    import tornado.netutil
    import tornado.web
    from snakeviz.main import VizHandler

    last = [time.monotonic()]
    token = os.environ.pop(TOKEN_ENV)

    class ProfileHandler(VizHandler):
        def prepare(self) -> None:
            last[0] = time.monotonic()

        def get(self) -> None:  # type: ignore[override]
            super().get(profile)

    class Static(tornado.web.StaticFileHandler):
        def prepare(self) -> None:
            last[0] = time.monotonic()

    with tempfile.TemporaryDirectory(prefix="hpclab-snakeviz-") as tmp:
        templates, static = _patched_assets(Path(tmp))
        app = tornado.web.Application(
            [
                (f"/{token}/{ROUTE}", ProfileHandler),
                (f"/{token}/static/(.*)", Static, {"path": str(static)}),
            ],  # any other path (no secret, a wrong one) is 404
            template_path=str(templates),
            gzip=True,
        )
        sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
        server = tornado.httpserver.HTTPServer(app)
        server.add_sockets(sockets)
        print(f"PORT {sockets[0].getsockname()[1]}", flush=True)

        stop = []
        signal.signal(signal.SIGTERM, lambda *_: stop.append(True))

        def watchdog() -> None:
            gone = os.getppid() != parent_pid
            idle = idle_minutes > 0 and time.monotonic() - last[0] > idle_minutes * 60
            if stop or gone or idle:
                tornado.ioloop.IOLoop.current().stop()

        tornado.ioloop.PeriodicCallback(watchdog, 200).start()
        tornado.ioloop.IOLoop.current().start()
        server.stop()


if __name__ == "__main__":
    _main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
