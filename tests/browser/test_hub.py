"""The workbook where students use it: JupyterHub starts a student's JupyterLab as a Slurm job.

End to end, all real: a local Slurm (``scripts/local_slurm.sh``, one node, its own munge and
ports), a local test account, JupyterHub with ``deploy/jupyterhub/jupyterhub_config.py``
(batchspawner's SlurmSpawner, PAM login, configurable-http-proxy from npm), headless Chromium.

1. A request the partition can never satisfy (more minutes than its limit) is refused on the
   spawn page with Slurm's reason, and leaves no job.
2. Login -> spawn form with 1 core -> the job is in ``squeue`` -> JupyterLab inside the job opens
   ``00_welcome.ipynb`` and runs it: no traceback, widgets and plots render, and the doctor's
   report names the job and 1 usable core (the node has more).
3. "Stop My Server" removes the job from the queue; stopping the hub leaves no job, no proxy,
   no process of the student; Slurm stops; the account is removed.

Needs root (a local account, PAM, ``runuser``), Debian's slurm packages and the npm proxy
(``HPCLAB_HUB_PROXY`` or ``.hub-node/node_modules/.bin/configurable-http-proxy``); it skips
without them unless ``HPCLAB_REQUIRE_HUB`` is set (``.ci/run`` sets it). The job's user must be
able to execute the environment's Python: where a parent directory is private (a venv whose
interpreter lives under ``/root``), the test grants others search permission on that directory
for its duration and restores it, and says so.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from listening import assert_loopback_only
from test_lab import _open_run_all_and_check

pytestmark = [pytest.mark.browser, pytest.mark.hub, pytest.mark.timeout(300)]

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG = REPO_ROOT / "deploy" / "jupyterhub" / "jupyterhub_config.py"
SLURM_SCRIPT = REPO_ROOT / "scripts" / "local_slurm.sh"
PROXY = Path(
    os.environ.get(
        "HPCLAB_HUB_PROXY",
        REPO_ROOT / ".hub-node" / "node_modules" / ".bin" / "configurable-http-proxy",
    )
)
PARTITION_MINUTES = 30  # scripts/local_slurm.sh: PartitionName=debug MaxTime=30:00
USER_PREFIX = "hpclab-hub-"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (a local test account, PAM login, runuser)"
    for tool in ("slurmctld", "slurmd", "munged", "sbatch", "useradd", "runuser"):
        if not shutil.which(tool) and not Path(f"/usr/sbin/{tool}").exists():
            return f"{tool} not found (apt-get install slurmctld slurmd slurm-client munge)"
    if not PROXY.exists():
        return f"{PROXY} not found (npm install --prefix .hub-node configurable-http-proxy)"
    if not shutil.which("jupyterhub", path=str(Path(sys.executable).parent)):
        return "jupyterhub is not installed (pip install '.[hub]')"
    return None


@pytest.fixture(scope="module")
def requirements() -> None:
    reason = _missing()
    if reason:
        if os.environ.get("HPCLAB_REQUIRE_HUB"):
            pytest.fail(f"HPCLAB_REQUIRE_HUB is set but {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def slurm(requirements) -> Iterator[dict[str, str]]:
    """A one-node local Slurm of its own (private directory, munge and ports)."""
    # Not under pytest's tmp dir: /tmp/pytest-of-root is 0700 and the slurm user must read it.
    root = Path(tempfile.mkdtemp(prefix="hpclab-hub-slurm-"))
    root.chmod(0o755)
    env = dict(os.environ, HPCLAB_SLURM_DIR=str(root), HPCLAB_SLURM_NODES="1")
    started = subprocess.run(
        ["bash", str(SLURM_SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=120
    )
    env["SLURM_CONF"] = str(root / "etc" / "slurm.conf")
    try:
        assert started.returncode == 0, f"local Slurm did not start:\n{started.stderr[-3000:]}"
        yield env
    finally:
        subprocess.run(
            ["bash", str(SLURM_SCRIPT), "stop"], env=env, capture_output=True, timeout=120
        )
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def student(requirements) -> Iterator[tuple[str, str]]:
    """A throw-away local account with a password; removed with its home afterwards."""
    name = USER_PREFIX + secrets.token_hex(3)
    password = secrets.token_urlsafe(12)
    subprocess.run(["useradd", "-m", "-s", "/bin/bash", name], check=True)
    subprocess.run(["chpasswd"], input=f"{name}:{password}", text=True, check=True)
    try:
        yield name, password
    finally:
        for p in psutil.process_iter(["username"]):
            if p.info["username"] == name:
                p.kill()
        subprocess.run(["userdel", "-r", "-f", name], capture_output=True)


@pytest.fixture(scope="module")
def reachable_env(student) -> Iterator[list[str]]:
    """Let the student execute this Python and read the repository: grant o+x on the private
    directories in the way (e.g. /root for a pyenv interpreter), restore them afterwards."""
    from hpclab.hub.spawner import _executable_by

    opened: list[tuple[Path, int]] = []
    try:
        for target in (Path(sys.prefix) / "bin" / "python", REPO_ROOT / "hpclab"):
            while (blocker := _executable_by(student[0], str(target))) is not None:
                path = Path(blocker)
                mode = path.stat().st_mode
                if not path.is_dir() or any(path == p for p, _ in opened):
                    pytest.fail(f"{student[0]} cannot reach {target}: {blocker}")
                opened.append((path, mode))
                path.chmod(stat.S_IMODE(mode) | 0o001)
        yield [str(p) for p, _ in opened]
    finally:
        for path, mode in reversed(opened):
            path.chmod(stat.S_IMODE(mode))


@dataclass
class Hub:
    url: str
    proc: subprocess.Popen
    log: Path
    env: dict[str, str]

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="module")
def hub(slurm, student, reachable_env, tmp_path_factory) -> Iterator[Hub]:
    state = tmp_path_factory.mktemp("hub")
    port, api, proxy_api = free_port(), free_port(), free_port()
    env = dict(
        slurm,
        HPCLAB_HUB_STATE=str(state),
        HPCLAB_HUB_URL=f"http://127.0.0.1:{port}",
        HPCLAB_HUB_API_URL=f"http://127.0.0.1:{api}",
        HPCLAB_HUB_PROXY_API_URL=f"http://127.0.0.1:{proxy_api}",
        HPCLAB_HUB_PROXY=str(PROXY),
        HPCLAB_HUB_SERVER_IP="127.0.0.1",
        HPCLAB_HUB_ENV=sys.prefix,
        HPCLAB_HUB_USERS=student[0],
        HPCLAB_HUB_MAX_CORES="2",
        HPCLAB_HUB_MAX_MINUTES="240",
        HPCLAB_HUB_DEFAULT_MINUTES="20",
        # The job's kernel: quick mode and the plotly mime type, as in every CI notebook run
        # (PYTHONPATH: a checkout that is not pip-installed).
        CI="true",
        HPCLAB_QUICK="1",
        PLOTLY_RENDERER="plotly_mimetype",
        HPCLAB_HUB_KEEP_ENV="CI,HPCLAB_QUICK,PLOTLY_RENDERER,PYTHONPATH",
    )
    log = state / "hub.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "jupyterhub"), "-f", str(CONFIG)],
            cwd=state, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    hub = Hub(f"http://127.0.0.1:{port}", proc, log, env)
    try:
        _wait_for(lambda: "JupyterHub is now running" in hub.log_text(), 60, hub, "hub start")
        yield hub
    finally:
        _stop_hub(hub)


def _wait_for(cond, timeout_s: float, hub: Hub, what: str) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if cond():
            return time.monotonic() - t0
        if hub.proc.poll() is not None:
            raise AssertionError(f"hub exited during {what}:\n{hub.log_text()[-3000:]}")
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s\n{hub.log_text()[-3000:]}")


def _stop_hub(hub: Hub) -> None:
    if hub.proc.poll() is None:
        hub.proc.send_signal(signal.SIGTERM)  # cleanup_servers: scancels running server jobs
        try:
            hub.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            from hpclab.dist.reap import kill_tree

            kill_tree([hub.proc.pid], grace_s=2)


def _jobs(env: dict[str, str], user: str) -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-u", user, "-o", "%i %T"], env=env, capture_output=True, text=True
    )
    return out.stdout.split("\n") if out.stdout.strip() else []


def _login(page, hub: Hub, student: tuple[str, str]) -> None:
    page.goto(f"{hub.url}/hub/login", wait_until="domcontentloaded")
    page.fill("#username_input", student[0])
    page.fill("#password_input", student[1])
    page.click("#login_submit")
    page.wait_for_selector("#spawn_form", timeout=30_000)


def _spawn(page, cores: int, minutes: int) -> None:
    page.fill("#cores", str(cores))
    page.fill("#minutes", str(minutes))
    page.locator("#spawn_form [type=submit]").click()


def _give_notebook(user: str) -> None:
    """What an instructor does (nbgitpuller, or a copy): the chapter into the student's home."""
    home = Path(f"~{user}").expanduser()
    shutil.copy(REPO_ROOT / "notebooks" / "00_welcome.ipynb", home / "00_welcome.ipynb")
    # Every cell stays in the DOM (the test reads all outputs), as in the plain browser test.
    settings = home / ".jupyter/lab/user-settings/@jupyterlab/notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    subprocess.run(["chown", "-R", f"{user}:{user}", str(home)], check=True)


class _InJob:
    """The single-user server behind the hub's proxy, as the Lab browser test expects it."""

    def __init__(self, hub: Hub, user: str) -> None:
        self.base = f"{hub.url}/user/{user}"

    def url(self, path: str) -> str:
        return self.base + path

    def log_text(self) -> str:
        return ""


@pytest.mark.timeout(600)  # its waits add up to more than the module's 300 s on a loaded machine
def test_hub_spawns_jupyterlab_as_a_slurm_job(hub, slurm, student, reachable_env, browser_page):
    user = student[0]
    _give_notebook(user)
    timings: dict[str, float] = {}

    def hub_log(out) -> None:
        (out / "hub.log").write_text(hub.log_text())

    with browser_page(on_failure=hub_log) as (page, _console):
        t0 = time.monotonic()
        _login(page, hub, student)
        timings["login_s"] = time.monotonic() - t0

        # 1. Hopeless request: Slurm's reason on the page, no job left.
        _spawn(page, cores=1, minutes=PARTITION_MINUTES + 30)
        page.wait_for_selector("text=Slurm will never start", timeout=30_000)
        refused = page.inner_text("body")
        assert "PartitionTimeLimit" in refused or "PartitionConfig" in refused, refused
        assert _jobs(slurm, user) == []

        # 2. One core, within the limit: a job, then JupyterLab inside it.
        page.goto(f"{hub.url}/hub/spawn", wait_until="domcontentloaded")
        t1 = time.monotonic()
        _spawn(page, cores=1, minutes=20)
        _wait_for(lambda: bool(_jobs(slurm, user)), 30, hub, "job in squeue")
        job_id, state = _jobs(slurm, user)[0].split()
        page.wait_for_url(f"**/user/{user}/lab**", timeout=120_000)
        timings["spawn_to_lab_s"] = time.monotonic() - t1
        assert state in ("PENDING", "RUNNING", "CONFIGURING")

        t2 = time.monotonic()
        _open_run_all_and_check(page, _InJob(hub, user), "00_welcome.ipynb", timings, t2)
        text = page.inner_text(".jp-NotebookPanel:not(.lm-mod-hidden)")
        assert f"job {job_id}" in text, f"the doctor's report does not name job {job_id}"
        cores = os.cpu_count()
        assert f"1 usable of {cores} cores" in text, "the kernel does not see the job's 1 core"
        assert "OMP_NUM_THREADS unset" not in text, "the job did not set one thread per core"
        # The hub, its proxy, and the student's JupyterLab and kernel inside the job: loopback
        found = assert_loopback_only(
            [
                hub.proc.pid,
                *(p.pid for p in psutil.process_iter(["username"]) if p.info["username"] == user),
            ],
            "the hub, its proxy and the student's JupyterLab",
        )
        assert int(hub.url.rsplit(":", 1)[1]) in {port for *_, port in found}

        # 3. Stop My Server: the job leaves the queue.
        t3 = time.monotonic()
        page.goto(f"{hub.url}/hub/home", wait_until="domcontentloaded")
        # The button works once home.js has bound it (a click before that does nothing, and
        # on a loaded machine that takes seconds); the hub's page says when it has.
        page.wait_for_function("window._jupyterhub_page_loaded === true", timeout=60_000)
        page.click("#stop")
        page.wait_for_selector("#stop", state="hidden", timeout=120_000)  # the hub stopped it
        _wait_for(lambda: not _jobs(slurm, user), 120, hub, "job gone after Stop My Server")
        timings["stop_to_gone_s"] = time.monotonic() - t3
        print(f"hub timings: {timings}; opened for the job's user: {reachable_env or 'nothing'}")


def test_stopping_the_hub_cancels_running_jobs_and_leaves_nothing(hub, slurm, student):
    """Runs last in this module: a running server's job is scancelled when the hub stops."""
    import requests

    user, password = student
    s = requests.Session()
    s.get(f"{hub.url}/hub/login")

    def xsrf() -> str:  # the hub's: a running server's JupyterLab sets its own under /user/
        return s.cookies.get("_xsrf", path="/hub/")

    s.post(f"{hub.url}/hub/login", data={"username": user, "password": password, "_xsrf": xsrf()})
    # The previous test's server may still be "pending stop" for a moment: ask again until
    # the hub takes the request.
    deadline = time.monotonic() + 30
    while True:
        r = s.post(
            f"{hub.url}/hub/spawn",
            data={"cores": "1", "minutes": "10", "_xsrf": xsrf()},
        )
        if "pending stop" not in r.text or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert r.ok, r.text[-2000:]
    _wait_for(lambda: bool(_jobs(slurm, user)), 30, hub, "job in squeue")
    _stop_hub(hub)
    assert hub.proc.returncode is not None
    deadline = time.monotonic() + 30
    while _jobs(slurm, user) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _jobs(slurm, user) == [], "stopping the hub left the student's job in the queue"
    left = [
        (p.pid, p.name())
        for p in psutil.process_iter(["cmdline"])
        if any(str(CONFIG) in a or str(PROXY) in a for a in (p.info["cmdline"] or []))
    ]
    assert not left, f"hub or proxy processes left: {left}"
