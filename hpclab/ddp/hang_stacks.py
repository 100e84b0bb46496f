"""Every rank's Python stack while a collective hangs, read with py-spy (chapter 06; py-spy is
introduced in chapter 03).

When a job is already stuck, ``py-spy dump --pid PID`` on each rank prints where its Python
threads are, without stopping or changing them: the ranks inside the collective show its frames
(``all_reduce`` in ``torch/distributed/distributed_c10d.py``) above your code, the rank that went
elsewhere shows something else, and your frame in its stack carries the line. ``--locals`` also
prints each frame's local variables (here ``rank`` and ``step``), so a dump says which rank it is.
"""

from __future__ import annotations

import linecache
import re
import time
from dataclasses import dataclass
from typing import Any

COLLECTIVES = ("all_reduce", "monitored_barrier", "barrier", "broadcast", "all_gather", "wait")
FRAME = re.compile(r"^ {4}(\S+) \((.+):(\d+)\)$")  # py-spy: "    func (file:line)", innermost first
LOCAL = re.compile(r"^ {12}(\w+): (.*)$")


@dataclass(frozen=True)
class RankStack:
    """One rank's main-thread stack, as py-spy showed it, seen from ``worker``'s frame."""

    rank: int
    step: int
    in_collective: bool  # a collective's frame sits above the worker's
    where: str  # "file:line" of the worker's frame
    code: str  # that line of source
    text: str  # py-spy's whole dump


def parse_dump(text: str, worker: str) -> RankStack | None:
    """The stack of the thread that runs ``worker`` in one ``py-spy dump --locals`` text, or
    None when no thread is inside it (not a rank, or not there yet)."""
    callees: list[str] = []
    frame: tuple[str, str, str] | None = None
    local: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("Thread "):
            callees, frame, local = [], None, {}
        elif m := FRAME.match(line):
            if frame is not None:
                break  # the worker's frame and its locals are read
            if m.group(1) == worker:
                frame = m.groups()
            else:
                callees.append(m.group(1))
        elif frame is not None and (m := LOCAL.match(line)):
            local[m.group(1)] = m.group(2)
    if frame is None or not local.get("rank", "").isdigit():
        return None
    _, path, line_no = frame
    return RankStack(
        rank=int(local["rank"]),
        step=int(local["step"]) if local.get("step", "").isdigit() else -1,
        in_collective=any(c in COLLECTIVES for c in callees),
        where=f"{path.rsplit('/', 1)[-1]}:{line_no}",
        code=linecache.getline(path, int(line_no)).strip(),
        text=text,
    )


def watch(
    pids: Any, ranks: int, step: int, worker: str, give_up_s: float
) -> tuple[dict[int, RankStack], str]:
    """Dump the processes ``pids()`` returns until all ``ranks`` are inside ``worker`` at
    ``step`` and at least one of them is inside a collective (the hang has set in), or
    ``give_up_s`` pass; returns the stacks by rank and, when they could not be read, why.

    No py-spy starts before all ``ranks`` processes exist: a rank forked while a py-spy is being
    started inherits that py-spy's pipes, and the start then waits until the rank exits (seen
    here: a first dump that took the whole 120 s hold, in 2 of 6 runs of 8 ranks beside 3 busy
    processes)."""
    from hpclab.profiling.pyspy_tool import available, dump, ptrace_note

    if why := available() or ("forbidden" in ptrace_note() and ptrace_note()):
        return {}, why
    end, why = time.monotonic() + give_up_s, "the ranks never all reached the last step"
    while time.monotonic() < end:
        stacks: dict[int, RankStack] = {}
        if len(procs := pids()) < ranks:  # still starting them
            time.sleep(0.05)
            continue
        for pid in procs:
            try:
                st = parse_dump(dump(pid, timeout_s=10.0, local_vars=True), worker)
            except Exception as err:  # noqa: BLE001 - a rank that exits, or ptrace refused
                why = f"py-spy could not read pid {pid}: {err}"
                continue
            if st is not None:
                stacks[st.rank] = st
        done = len(stacks) == ranks and all(s.step == step for s in stacks.values())
        if done and any(s.in_collective for s in stacks.values()):
            return stacks, ""
        time.sleep(0.2)
    return {}, why


def culprit(stacks: dict[int, RankStack]) -> tuple[int, str]:
    """The rank whose stack is not inside the collective its peers wait in, and a line saying
    where it is instead; (-1, why) when every rank (or none) is inside it."""
    out = [s for s in stacks.values() if not s.in_collective]
    if len(out) != 1:
        return -1, f"{len(out)} of {len(stacks)} ranks outside the collective: no single culprit"
    s = out[0]
    waiting = sorted(r for r, x in stacks.items() if x.in_collective)
    return s.rank, (
        f"py-spy: rank {s.rank} is at {s.where} ({s.code}), outside the collective that "
        f"ranks {waiting} wait in"
    )
