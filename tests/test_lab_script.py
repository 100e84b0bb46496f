"""scripts/lab.sh (what `make lab` runs) serves the repository, or the folder it is given."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from listening import assert_loopback_only

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("jupyterlab")


def _venv(tmp_path: Path) -> Path:
    """A 'venv' whose python runs this interpreter (a wrapper, not a symlink: a symlink outside
    the venv would lose the venv), stamped as installed, so the script installs nothing."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    wrapper = venv / "bin" / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    (venv / ".hpclab-installed").touch()
    os.utime(venv / ".hpclab-installed", (time.time() + 60, time.time() + 60))
    return venv


def _serve(tmp_path: Path, *args: str) -> tuple[list[str], str]:
    """Start lab.sh, read the URL it prints, list the served root, stop it: the names in the
    root and the lines printed after the URL."""
    env = dict(
        os.environ,
        HPCLAB_VENV=str(_venv(tmp_path)),
        HPCLAB_TORCH_SPEC="no-install-in-tests==0",  # if torch were missing: fail, never install
        JUPYTER_RUNTIME_DIR=str(tmp_path),
    )
    proc = subprocess.Popen(
        ["bash", str(ROOT / "scripts" / "lab.sh"), *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        url, lines, boxed = None, [], False
        deadline = time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            boxed = boxed or "JupyterLab is running" in line  # the script's box, not Jupyter's log
            m = re.search(r"(http://127\.0\.0\.1:\d+/)lab\?token=(\w+)", line)
            if boxed and m:
                url = m.groups()
        assert url, "".join(lines)[-3000:]
        base, token = url
        printed = proc.stderr.readline() + proc.stderr.readline()
        req = urllib.request.Request(
            f"{base}api/contents", headers={"Authorization": f"token {token}"}
        )
        for _ in range(120):  # the URL is known a moment before the server accepts connections
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    names = sorted(item["name"] for item in json.load(resp)["content"])
                found = assert_loopback_only([proc.pid], "make lab's JupyterLab")
                assert int(base.rsplit(":", 1)[1].strip("/")) in {port for *_, port in found}
                return names, printed
            except urllib.error.URLError:
                time.sleep(0.5)
        raise AssertionError(f"{base} never answered")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.mark.timeout(300)
def test_lab_serves_the_root_it_is_given_and_says_where_to_start(tmp_path):
    # A relative ROOT_DIR (the repository, seen from elsewhere), then a Jupyter option: both
    # reach Jupyter (it used to refuse a folder with "root_dir only accepts one value").
    root = os.path.relpath(ROOT, tmp_path)
    names, printed = _serve(tmp_path, root, "--LanguageServerManager.autodetect=False")
    assert {"notebooks", "exercises", "solutions"} <= set(names)
    assert "Start with notebooks/00_welcome.ipynb" in printed and "exercises/" in printed


def test_lab_refuses_a_root_that_is_not_a_folder(tmp_path):
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "lab.sh"), "no-such-dir"],
        cwd=tmp_path,
        env=dict(os.environ, HPCLAB_VENV=str(tmp_path / "never-created")),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2 and "not a directory" in proc.stderr
    assert not (tmp_path / "never-created").exists()  # refused before installing anything
