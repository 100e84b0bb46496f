#!/usr/bin/env bash
# Start the hpclab workbook in JupyterLab (what `make lab` runs).
#
#   scripts/lab.sh [ROOT_DIR] [extra jupyter lab options...]
#
# ROOT_DIR (default: the repository) is the folder JupyterLab shows: from the repository a
# student sees notebooks/ (the chapters), exercises/ (to work in) and solutions/ (instructors).
#
# 1. Creates the virtual environment if missing ($HPCLAB_VENV, default .venv; python3 >= 3.10).
# 2. Installs torch only if the venv cannot import it: a cluster's CUDA build already in the venv
#    stays. $HPCLAB_TORCH_SPEC overrides what is installed (default torch==2.13.0, the CPU wheel
#    CI uses; an unpinned `torch` would pull gigabytes of CUDA libraries).
# 3. `pip install -e .`, skipped while the stamp $HPCLAB_VENV/.hpclab-installed is newer than
#    pyproject.toml (so a second start takes seconds).
# 4. Starts JupyterLab on ROOT_DIR, bound to 127.0.0.1 only, on a port the OS picks (never a
#    fixed one: students share nodes), and prints the URL with its token in a box.
#    The token is Jupyter's own random one; it is not on the command line (`ps` shows that to
#    every user of a node).
#
# Environment: HPCLAB_VENV, HPCLAB_TORCH_SPEC, HPCLAB_PYTHON (interpreter that creates the venv).
set -euo pipefail

CALLER_DIR="$PWD"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

VENV="${HPCLAB_VENV:-.venv}"
TORCH_SPEC="${HPCLAB_TORCH_SPEC:-torch==2.13.0}"
BASE_PYTHON="${HPCLAB_PYTHON:-python3}"
PY="$VENV/bin/python"
STAMP="$VENV/.hpclab-installed"

say() { printf '[hpclab] %s\n' "$*" >&2; }

SERVE="$ROOT"
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
    # A folder as the first argument is the root to serve (Jupyter itself would take it as a
    # second root_dir and refuse: "root_dir only accepts one value").
    if ! SERVE="$(cd "$CALLER_DIR" && cd "$1" 2>/dev/null && pwd)"; then
        say "ROOT_DIR '$1' is not a directory; give a folder (default: the repository) or options starting with -"
        exit 2
    fi
    shift
fi

# --- 1. virtual environment -------------------------------------------------------------------
if [ ! -x "$PY" ]; then
    if ! "$BASE_PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
        say "need Python >= 3.10 to create $VENV; '$BASE_PYTHON' is $("$BASE_PYTHON" -V 2>&1 || echo missing)."
        say "On a cluster: module load python/3.11 (or set HPCLAB_PYTHON=/path/to/python3)."
        exit 1
    fi
    say "creating $VENV with $("$BASE_PYTHON" -V 2>&1)"
    "$BASE_PYTHON" -m venv "$VENV"
fi

# --- 2. torch, only if missing ----------------------------------------------------------------
if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
    say "installing $TORCH_SPEC (set HPCLAB_TORCH_SPEC to choose another build)"
    "$PY" -m pip install "$TORCH_SPEC"
    rm -f "$STAMP"
fi

# --- 3. the project, unless the stamp says it is up to date ----------------------------------
if [ ! -e "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ]; then
    say "installing hpclab into $VENV (pip install -e .)"
    "$PY" -m pip install -e .
    touch "$STAMP"
else
    say "hpclab already installed in $VENV (rm $STAMP to reinstall)"
fi

# --- 4. JupyterLab ------------------------------------------------------------------------------
args=(--no-browser --ip=127.0.0.1 --port=0 --port-retries=0 "--ServerApp.root_dir=$SERVE")
if [ "$(id -u)" -eq 0 ]; then
    args+=(--allow-root)  # JupyterLab refuses to run as root without it (containers, CI)
fi

# The server runs in the background so that this script can read its URL and print it in a box.
# It starts with SIGINT ignored: Ctrl-C reaches this script's trap only, which sends TERM, and
# Jupyter shuts its kernels down cleanly on TERM (a KeyboardInterrupt in its event loop may not).
trap '' INT
"$PY" -m jupyter lab "${args[@]}" "$@" </dev/null &
server=$!
trap 'kill -TERM "$server" 2>/dev/null || true' INT TERM HUP

# Jupyter writes jpserver-<pid>.json (url, token) into its runtime dir once it listens.
url="$("$PY" - "$server" <<'EOF' || true
import json, os, sys, time
from pathlib import Path
from jupyter_core.paths import jupyter_runtime_dir

pid = int(sys.argv[1])
info = Path(jupyter_runtime_dir()) / f"jpserver-{pid}.json"
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit(1)
    try:
        d = json.loads(info.read_text())
        print(f"{d['url']}lab?token={d['token']}")
        sys.exit(0)
    except (OSError, ValueError, KeyError):
        time.sleep(0.2)
sys.exit(1)
EOF
)"

if [ -n "$url" ]; then
    port="${url#http://127.0.0.1:}"
    port="${port%%/*}"
    line="=============================================================================="
    {
        printf '\n%s\n' "$line"
        printf '  JupyterLab is running. Open this URL in your browser:\n\n'
        printf '      %s\n\n' "$url"
        if [ -d "$SERVE/exercises" ]; then
            printf '  Start with notebooks/00_welcome.ipynb; work the exercises in exercises/\n'
            printf '  (each chapter NN has exercises/NN_*.ipynb; solutions/ is for instructors).\n\n'
        fi
        printf '  On a cluster, forward the port from your laptop first, for example:\n'
        printf '      ssh -L %s:127.0.0.1:%s %s@%s\n' "$port" "$port" "$(id -un)" "$(hostname)"
        printf '  Stop with Ctrl-C.\n'
        printf '%s\n\n' "$line"
    } >&2
else
    say "JupyterLab did not report its URL; see its log above."
fi

# `wait` returns early (128+signal) when a trapped signal arrives: wait again until the server
# is gone, then once more for its own exit status (bash keeps it for a reaped child).
while kill -0 "$server" 2>/dev/null; do
    wait "$server" || true
done
status=0
wait "$server" 2>/dev/null || status=$?
exit "$status"
