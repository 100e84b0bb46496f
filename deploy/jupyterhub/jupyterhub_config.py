# JupyterHub for the hpclab workbook: each student's JupyterLab runs as a Slurm job.
#
#   HPCLAB_HUB_ENV=/shared/envs/hpclab  jupyterhub -f deploy/jupyterhub/jupyterhub_config.py
#
# Every setting a site changes is an environment variable read below (or edit the line). Read
# deploy/jupyterhub/README.md first: what to install, and the things that bite.
# ruff: noqa: F821 - `c` and `get_config` are provided by JupyterHub when it loads this file
import os
import shutil
import sys
from pathlib import Path

from hpclab.hub.spawner import HpclabSlurmSpawner  # imports batchspawner: its API route is needed

env = os.environ.get
c = get_config()

# --- where the hub keeps its state (database, cookie secret, proxy pid) ----------------------
state = Path(env("HPCLAB_HUB_STATE", ".")).resolve()
state.mkdir(parents=True, exist_ok=True)
c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(state / "jupyterhub-proxy.pid")

# --- network: the public URL, the hub's API and the proxy's API --------------------------------
c.JupyterHub.bind_url = env("HPCLAB_HUB_URL", "http://127.0.0.1:8000")
# The hub's API must be reachable from the compute nodes (the job reports its port there):
# a node-facing address on a real site; loopback when hub and jobs share one host.
c.JupyterHub.hub_bind_url = env("HPCLAB_HUB_API_URL", "http://127.0.0.1:8081")
c.ConfigurableHTTPProxy.api_url = env("HPCLAB_HUB_PROXY_API_URL", "http://127.0.0.1:8001")
# configurable-http-proxy from npm (`npm install --prefix DIR configurable-http-proxy`);
# Debian's node-configurable-http-proxy package lacks a module it needs.
c.ConfigurableHTTPProxy.command = [
    env("HPCLAB_HUB_PROXY", shutil.which("configurable-http-proxy") or "configurable-http-proxy")
]
# Stopping the hub stops (scancels) every running server job.
c.JupyterHub.cleanup_servers = True

# --- who may log in: local accounts through PAM (the hub runs as root to check passwords) --------
allowed = [u for u in env("HPCLAB_HUB_USERS", "").split(",") if u]
if allowed:
    c.Authenticator.allowed_users = set(allowed)
else:
    c.Authenticator.allow_all = True  # every account that PAM accepts
admins = [u for u in env("HPCLAB_HUB_ADMINS", "").split(",") if u]
if admins:
    c.Authenticator.admin_users = set(admins)

# --- the spawner: a Slurm job per student --------------------------------------------------
c.JupyterHub.spawner_class = HpclabSlurmSpawner
# The workbook's environment (venv or conda prefix): every student must be able to execute its
# Python, so not under a private home. Default: the environment the hub itself runs in.
c.HpclabSlurmSpawner.env_prefix = env("HPCLAB_HUB_ENV", sys.prefix)
c.HpclabSlurmSpawner.slurm_conf = env("SLURM_CONF", "")
# What the form offers (the partition list empty = the site's default partition).
c.HpclabSlurmSpawner.site_limits = {
    "max_cores": int(env("HPCLAB_HUB_MAX_CORES", "4")),
    "max_mem_gb": int(env("HPCLAB_HUB_MAX_MEM_GB", "16")),
    "max_gpus": int(env("HPCLAB_HUB_MAX_GPUS", "0")),
    "max_minutes": int(env("HPCLAB_HUB_MAX_MINUTES", "480")),
    "partitions": tuple(p for p in env("HPCLAB_HUB_PARTITIONS", "").split(",") if p),
    "default_cores": int(env("HPCLAB_HUB_DEFAULT_CORES", "1")),
    "default_mem_gb": int(env("HPCLAB_HUB_DEFAULT_MEM_GB", "2")),
    "default_minutes": int(env("HPCLAB_HUB_DEFAULT_MINUTES", "60")),
}
c.HpclabSlurmSpawner.req_account = env("HPCLAB_HUB_ACCOUNT", "")
# Where the server listens inside the job, and where the proxy finds it:
# - hub and jobs on one host (a workstation, CI): 127.0.0.1 for both, nothing else can reach it;
# - a real cluster: leave HPCLAB_HUB_SERVER_IP unset; the server binds the node's addresses and
#   the proxy reaches it at the node name squeue reports (%B).
server_ip = env("HPCLAB_HUB_SERVER_IP", "")
if server_ip:
    c.HpclabSlurmSpawner.server_ip = server_ip
    c.HpclabSlurmSpawner.state_exechost_exp = server_ip
c.HpclabSlurmSpawner.req_options = env("HPCLAB_HUB_SBATCH_OPTIONS", "")
c.HpclabSlurmSpawner.startup_poll_interval = 0.5
# Queue waits count against start_timeout: a busy cluster needs minutes, not seconds.
c.Spawner.start_timeout = int(env("HPCLAB_HUB_START_TIMEOUT", "300"))
c.Spawner.http_timeout = 120
c.Spawner.default_url = env("HPCLAB_HUB_DEFAULT_URL", "/lab")
# Variables of the hub's own environment that the job also gets (Slurm passes the job only what
# the spawner lists), e.g. HTTPS_PROXY on a site with a proxy, or HPCLAB_QUICK for a short class.
c.Spawner.env_keep = [v for v in env("HPCLAB_HUB_KEEP_ENV", "LANG,LC_ALL").split(",") if v]
