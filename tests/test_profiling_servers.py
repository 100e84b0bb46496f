"""Chapter 03: SnakeViz binds loopback on a free port, answers only under its secret path,
serves a proxy-safe page, lives as long as its kernel and never outlives it; py-spy attaches to
a running training process."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request

import psutil
import pytest
from listening import assert_loopback_only

from hpclab.profiling import cprofile_tree, pyspy_tool, snakeviz_server
from hpclab.profiling.patient import train


@pytest.fixture(scope="module")
def prof_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("prof") / "patient.prof"
    cprofile_tree.profile_call(lambda: train("slow-data", steps=5), path)
    return path


def _listening(port: int) -> list:
    return [
        c for c in psutil.net_connections("tcp") if c.laddr.port == port and c.status == "LISTEN"
    ]


def _status(url: str) -> int:
    try:
        return urllib.request.urlopen(url, timeout=10).status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_snakeviz_loopback_secret_path_relative_static_and_stops(prof_file):
    server = snakeviz_server.serve(prof_file)
    try:
        listeners = assert_loopback_only([server.proc.pid], "SnakeViz")
        assert [p for _, _, _, p in listeners] == [server.port]
        html = urllib.request.urlopen(server.local_url, timeout=10).read().decode()
        assert "src='../static/snakeviz.js'" in html and 'src="/static/' not in html
        base = f"http://127.0.0.1:{server.port}"
        js = urllib.request.urlopen(f"{base}/{server.token}/static/snakeviz.js", timeout=10)
        assert "window.location.origin" not in js.read().decode()
        # another user of the node reaches the port, but not the page without the secret
        assert len(server.token) >= 32 and server.token not in " ".join(
            psutil.Process(server.proc.pid).cmdline()
        )
        for path in ("/snakeviz/profile", "/static/snakeviz.js", "/x/snakeviz/profile", "/"):
            assert _status(base + path) == 404, path
        assert server.proxy_path == f"/proxy/{server.port}/{server.token}/snakeviz/profile"
        # a click in JupyterLab opens a lab tab through the proxy, not a new browser tab
        link = server._repr_html_()
        assert 'data-commandlinker-command="server-proxy:open"' in link
        args = json.loads(
            re.search(r"data-commandlinker-args='([^']*)'", link).group(1).replace("&quot;", '"')
        )
        assert args["url"] == server.proxy_path and args["newBrowserTab"] is False
    finally:
        server.stop()
    assert not server.running() and not _listening(server.port)
    assert "was stopped" in server._repr_html_()


def test_snakeviz_dies_with_its_kernel(prof_file, tmp_path):
    script = tmp_path / "kernel.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, time
            sys.path.insert(0, {str(snakeviz_server.__file__.rsplit("/hpclab/", 1)[0])!r})
            from hpclab.profiling import snakeviz_server
            s = snakeviz_server.serve({str(prof_file)!r})
            print(s.proc.pid, flush=True)
            time.sleep(60)
            """
        )
    )
    kernel = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        child = int(kernel.stdout.readline())
        assert psutil.pid_exists(child)
        kernel.kill()
        kernel.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and psutil.pid_exists(child):
            try:
                if psutil.Process(child).status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.1)
        alive = psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE
        assert not alive, "SnakeViz outlived its kernel"
    finally:
        if kernel.poll() is None:
            kernel.kill()


def test_missing_profile_is_one_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        snakeviz_server.serve(tmp_path / "nope.prof")


@pytest.mark.skipif(bool(pyspy_tool.available()), reason="py-spy not installed")
def test_pyspy_dump_sees_the_training_loop():
    if "forbidden" in pyspy_tool.ptrace_note():
        pytest.skip(pyspy_tool.ptrace_note())
    proc = pyspy_tool.start_patient()
    try:
        text = pyspy_tool.dump(proc.pid)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert "train (hpclab/profiling/patient.py" in text or "patient.py" in text
