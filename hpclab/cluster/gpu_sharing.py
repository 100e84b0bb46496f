"""Sharing one GPU between jobs: CUDA_VISIBLE_DEVICES, MPS and MIG (chapter 07, section 10).

A node's GPUs are shared in three ways, each isolating a different amount (the model tier of the
section; the figures are NVIDIA's MIG and MPS user guides):

- **Whole GPUs per job** (``--gpus``/``--gres``): Slurm sets ``CUDA_VISIBLE_DEVICES`` to the
  job's GPUs and, where the site sets ``ConstrainDevices=yes`` (cgroups), hides the others'
  device files. The variable alone is advice, not a wall: a process that unsets it sees every GPU.
- **MPS** (Multi-Process Service): the processes of one user share one GPU *at the same time*
  through one server; ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` caps each client's share of the SMs
  and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` its memory, but memory bandwidth is shared and a fatal
  fault in one client can bring down the others. For many small kernels (inference, small
  models, a parameter search of tiny trials).
- **MIG** (A100, H100, H200): the GPU is cut in hardware into up to 7 instances, each with its own
  SMs, L2 and memory: memory, bandwidth and faults are isolated. An H100 80GB splits into 7 x
  ``1g.10gb`` (1/7 of the SMs, 10 GB each), 3 x ``2g.20gb``, 2 x ``3g.40gb``, 1 x ``4g.40gb`` or one
  ``7g.80gb``. Sites use it for interactive and teaching partitions (a JupyterHub of students,
  each given a slice). ``CUDA_VISIBLE_DEVICES`` then names a ``MIG-<uuid>``, and torch sees one
  device whose memory is the slice's.

:func:`sharing` says which of these the environment shows; ``hpclab doctor`` reports it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# (way, what it isolates: memory, faults, bandwidth) for the chapter's table
MODES = (
    {"way": "whole GPU per job (CUDA_VISIBLE_DEVICES + cgroup)", "memory": "yes",
     "faults": "yes", "bandwidth": "yes", "sms": "whole GPU",
     "used_for": "batch training: one job per GPU"},
    {"way": "MPS (one server, concurrent clients)", "memory": "limit only (no protection)",
     "faults": "no", "bandwidth": "no", "sms": "a capped percentage",
     "used_for": "many small processes of one user"},
    {"way": "MIG (hardware instances)", "memory": "yes", "faults": "yes", "bandwidth": "yes",
     "sms": "1/7 to 7/7 of the GPU", "used_for": "interactive and teaching slices"},
    {"way": "time-slicing (several jobs, no MPS)", "memory": "no", "faults": "yes",
     "bandwidth": "no", "sms": "all, in turns", "used_for": "oversubscribed shared lab servers"},
)  # fmt: skip

# NVIDIA MIG user guide: H100 80GB profiles (instances at most, SM fraction, memory GB)
H100_MIG = (
    ("1g.10gb", 7, 1 / 7, 10),
    ("2g.20gb", 3, 2 / 7, 20),
    ("3g.40gb", 2, 3 / 7, 40),
    ("4g.40gb", 1, 4 / 7, 40),
    ("7g.80gb", 1, 1.0, 80),
)


def sharing(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """How this process shares its GPUs: ``kind`` (none, whole, mig, mps) and a sentence."""
    env = os.environ if env is None else env
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    mps = env.get("CUDA_MPS_PIPE_DIRECTORY") or env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
    tokens = [t.strip() for t in (cvd or "").split(",") if t.strip()]
    if any(t.startswith("MIG-") for t in tokens):
        slices = [t for t in tokens if t.startswith("MIG-")]
        return {
            "kind": "mig",
            "text": f"MIG slice {slices[0][:16]}...: its own SMs and memory (a fraction of the "
            "GPU named by NVML); torch.cuda.get_device_properties(0) gives the slice's memory",
        }
    if mps:
        share = env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
        cap = f", at most {share}% of the SMs" if share else ""
        return {
            "kind": "mps",
            "text": f"MPS client{cap}: GPU shared at once with other processes; memory "
            "bandwidth shared, faults not isolated",
        }
    if cvd is None:
        return {"kind": "none", "text": "CUDA_VISIBLE_DEVICES unset: every GPU of the node"}
    if not tokens:
        return {"kind": "none", "text": "CUDA_VISIBLE_DEVICES is set but empty: every GPU hidden"}
    return {"kind": "whole", "text": f"CUDA_VISIBLE_DEVICES={cvd}: whole GPUs"}
