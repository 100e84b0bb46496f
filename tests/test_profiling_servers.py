"""Chapter 03: SnakeViz binds loopback on a free port, serves a proxy-safe page, and never
outlives its kernel; py-spy attaches to a running training process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import urllib.request

import psutil
import pytest

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


def test_snakeviz_loopback_relative_static_and_stops(prof_file):
    server = snakeviz_server.serve(prof_file)
    try:
        conns = _listening(server.port)
        assert conns and all(c.laddr.ip == "127.0.0.1" for c in conns)
        html = urllib.request.urlopen(server.local_url, timeout=10).read().decode()
        assert "src='../static/snakeviz.js'" in html and 'src="/static/' not in html
        js = (
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/static/snakeviz.js", timeout=10)
            .read()
            .decode()
        )
        assert "window.location.origin" not in js
        assert server.proxy_path == f"/proxy/{server.port}/snakeviz/profile"
        assert "Open SnakeViz" in server._repr_html_()
    finally:
        server.stop()
    assert not server.running() and not _listening(server.port)


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
