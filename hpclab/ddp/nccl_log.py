"""Reading a hung NCCL job's log: which rank never joined the collective (chapter 06).

With ``NCCL_DEBUG=INFO`` every rank logs its communicator's ``Init START`` / ``Init COMPLETE``
(``... rank R nranks N ...``, NVIDIA NCCL User Guide, Troubleshooting > Logging); on a timeout
PyTorch's ProcessGroupNCCL watchdog logs, on each rank that *waited*, "Watchdog caught collective
operation timeout: WorkNCCL(SeqNum=S, OpType=..." for the collective it is stuck in. The rank
that joined the communicator but reports no timeout had no collective in flight: it never
issued the one its peers wait in. The bundled example,
``hpclab/references/nccl_hang_reconstructed.log``, is a reconstruction from those formats, not
a captured log (its header says so).
"""

from __future__ import annotations

import re
from importlib import resources

INIT = re.compile(r"NCCL INFO comm \S+ rank (\d+) nranks (\d+) .*Init (?:START|COMPLETE)")
TIMEOUT = re.compile(
    r"\[Rank (\d+)\] Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+)"
)
REFERENCE = "nccl_hang_reconstructed.log"


def reference_log() -> str:
    """The bundled, reconstructed log of a 4-rank hang (read its header first)."""
    return (resources.files("hpclab") / "references" / REFERENCE).read_text()


def silent_ranks(text: str) -> dict[str, list[int]]:
    """From a job's combined log: ``ranks`` (every rank of the communicator, from its Init
    lines), ``waited`` (ranks whose watchdog timed out in a collective) and ``silent`` (the
    others: the ranks to inspect). Empty lists when the log shows no Init or no timeout."""
    ranks: set[int] = set()
    for m in INIT.finditer(text):  # each Init line says its rank and the communicator's size
        ranks |= set(range(int(m.group(2))))
    waited = {int(m.group(1)) for m in TIMEOUT.finditer(text)}
    silent = sorted(ranks - waited) if waited else []
    return {"ranks": sorted(ranks), "waited": sorted(waited), "silent": silent}
