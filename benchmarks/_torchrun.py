"""A plain script under ``torchrun`` on 2 local ranks: the baselines of benchmarks/ddp_overhead.py
(and of any benchmark comparing hpclab's launch with the way the PyTorch tutorials launch).
Imported by them; not a benchmark itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def torchrun_step_s(script: Path, *args: object, attempts: int = 1) -> float:
    """Run ``script`` with ``args`` on 2 ranks (``torchrun --standalone``, one thread each, its
    own TMPDIR); rank 0's JSON line's ``step_s``. A failed run is tried again up to
    ``attempts`` in all, each failure said in one line with the C++ reason when there is one."""
    tmp = tempfile.mkdtemp(prefix="hpclab-torchrun-")
    try:
        env = {**os.environ, "TMPDIR": tmp, "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", "2", str(script), *map(str, args)]  # fmt: skip
        for attempt in range(1, attempts + 1):
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
            if not out.returncode:
                break
            why = [x for x in out.stderr.splitlines() if "what()" in x or "terminate" in x]
            print(f"(torchrun attempt {attempt} failed: {(why or ['no reason printed'])[-1]})")
        if out.returncode:
            raise RuntimeError(f"torchrun failed: {out.stderr.strip()[-500:]}")
        line = next(x for x in out.stdout.splitlines() if x.startswith("{"))
        return json.loads(line)["step_s"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
