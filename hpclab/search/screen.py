"""Benchmarking the autotuner's candidates: screened in parallel, finalists alone (chapter 08).

Fox et al. (2015, RaPyDLI) benchmark the survivors of pruning *in parallel*. Here that is done
in two phases, because one is fast and the other is honest:

1. **Screening**: every candidate is run once, as many at once as fit in the usable cores. Each
   gets its *own* cores: the packer hands out disjoint core sets (``ranks x (threads + loader
   workers)`` cores each, largest candidates first), and the launcher pins every rank process,
   and the DataLoader workers it starts, to its slice with ``os.sched_setaffinity``
   (:func:`hpclab.dist.placement.place`). Every rank measures the CPU share it got on its cores
   (:mod:`hpclab.measure.cpu_share`): another process on them (another user, a stray job) makes
   the run ``disturbed``, flagged in its record. What pinning cannot separate is what cores
   share: memory bandwidth and the last-level cache. Candidates screened side by side slow
   each other down a little, unevenly, so screening ranks candidates but is not the final word.
2. **Final**: the best few screened candidates and the default run again *alone*, one after
   another in turn (A B C A B C ..., so a slow moment of the machine hits all of them), and the
   median over the rounds decides ``best_vs_default``. The default is one of them, so the ratio
   is >= 1 by construction: a "winner" slower than the default cannot be reported.

On a cluster the same screening would go to a pool of Celery workers (one task per candidate,
each worker holding its own cores) or to a job array (one task per candidate, each on its own
allocation), with the same final re-measurement on one node.

Each run is one launch of the course's one training step on CPU ranks
(:func:`hpclab.train.ddp_worker` through :func:`hpclab.train.run_spec`: the ``cnn`` model, DDP with ``bucket_cap_mb`` when there
are several ranks, a DataLoader with ``loader_workers``), timed with chapter 01's discipline
(warm-up, repeats, median and min..max). The batch is the *global* batch, split over the ranks,
so every candidate takes the same SGD step and samples/s compare fairly.
"""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from hpclab.config import ConfigError
from hpclab.progress import Progress

KNOBS = ("threads", "ranks", "batch", "loader_workers", "bucket_cap_mb", "dtype", "memory_format")


def cores_needed(c: dict[str, Any]) -> int:
    """Cores a candidate is given: per rank, one per intra-op thread and one per loader worker."""
    return c["ranks"] * (c["threads"] + c["loader_workers"])


def measure(
    c: dict[str, Any], cpus: tuple[int, ...], side: int, repeat: int, cancel: threading.Event
) -> dict[str, Any]:
    """Run candidate ``c`` once, pinned to ``cpus``; samples/s (median, min, max) and its CPU share."""
    from hpclab.train import TrainSpec, run_spec

    spec = TrainSpec.sized(
        c["ranks"],
        model="cnn",
        side=side,
        per_rank_batch=c["batch"] // c["ranks"],
        steps=repeat,
        warmup=2,
        bucket_cap_mb=c["bucket_cap_mb"],
        loader_workers=c["loader_workers"],
        dtype=c["dtype"],
        memory_format=c["memory_format"],
        measure_compute=False,
        measure_allreduce=False,
    )
    t0 = time.perf_counter()
    outs = run_spec(
        spec,
        c["ranks"],
        device="cpu",
        threads=c["threads"],
        cpus=cpus,
        deadline=300.0,
        progress=Progress(cancel=cancel),
    )
    wall = time.perf_counter() - t0
    r0, n = outs[0], c["batch"]  # DDP ranks step in lockstep: rank 0's clock is the step's
    shares = [o["cpu_share"] for o in outs]
    return {
        "samples_per_s": n / r0["step_s"],
        "samples_per_s_min": n / r0["step_s_max"],
        "samples_per_s_max": n / r0["step_s_min"],
        "cpus": [o["cpus"] for o in outs],  # per rank: the cores it actually ran on
        "own_cores": sum(s["own_cores"] for s in shares),
        "others_cores": sum(s["others_cores"] for s in shares),
        "disturbed": any(s["disturbed"] for s in shares),
        "wall_s": wall,
    }


def screen(
    candidates: list[dict[str, Any]],
    cpus: tuple[int, ...],
    at_once: int,
    side: int,
    repeat: int,
    progress: Progress,
) -> tuple[list[dict[str, Any]], float, int]:
    """Measure every candidate, up to ``at_once`` at a time (0: as many as fit) on disjoint
    cores. Returns the measurements in candidate order (with ``start_s``/``end_s`` since the
    screening began), the wall time and the most candidates that ran at once."""
    cpus = tuple(sorted(cpus))
    too_big = [c for c in candidates if cores_needed(c) > len(cpus)]
    if too_big:
        raise ConfigError(
            f"{too_big[0]} needs {cores_needed(too_big[0])} cores; allowed: at most the "
            f"{len(cpus)} usable here"
        )
    limit = at_once or len(cpus)
    pending = sorted(range(len(candidates)), key=lambda i: -cores_needed(candidates[i]))
    free = list(cpus)
    running: dict[Future, tuple[int, list[int]]] = {}
    out: list[dict[str, Any]] = [{} for _ in candidates]
    most, done = 0, 0
    t0 = time.perf_counter()

    def timed(*args: Any) -> dict[str, Any]:
        from hpclab.dist import RankError

        start = time.perf_counter() - t0
        try:
            got = measure(*args)
        except RankError as exc:  # a candidate that cannot run is a result, not the end
            got = {
                "failed": str(exc).splitlines()[0][:300],
                "wall_s": time.perf_counter() - t0 - start,
            }
        return dict(got, start_s=start, end_s=time.perf_counter() - t0)

    with ThreadPoolExecutor(max_workers=limit, thread_name_prefix="hpclab-screen") as pool:
        while pending or running:
            for i in list(pending):
                need = cores_needed(candidates[i])
                if len(running) < limit and need <= len(free):
                    mine, free = free[:need], free[need:]
                    args = (candidates[i], tuple(mine), side, repeat, progress.cancel_event)
                    running[pool.submit(timed, *args)] = (i, mine)
                    pending.remove(i)
            most = max(most, len(running))
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                i, mine = running.pop(fut)
                out[i] = fut.result()
                free = sorted(free + mine)
                done += 1
                progress.update(done, len(candidates), f"screened {done}/{len(candidates)}")
    return out, time.perf_counter() - t0, most


def side_by_side(
    configs: list[dict[str, Any]],
    cpus: tuple[int, ...],
    rounds: int,
    side: int,
    repeat: int,
    progress: Progress,
) -> list[dict[str, Any]]:
    """Each config alone on the first cores it needs, in turn, ``rounds`` times (A B A B): per
    config the median samples/s over the rounds, its min..max, every round's value and how many
    rounds were disturbed."""
    cpus = tuple(sorted(cpus))
    per: list[list[float]] = [[] for _ in configs]
    disturbed = [0 for _ in configs]
    total = rounds * len(configs)
    for r in range(rounds):
        for k, c in enumerate(configs):
            progress.update(r * len(configs) + k, total, f"alone, round {r + 1}/{rounds}")
            got = measure(c, cpus[: cores_needed(c)], side, repeat, progress.cancel_event)
            per[k].append(got["samples_per_s"])
            disturbed[k] += got["disturbed"]
    progress.update(total, total, "")
    return [
        {
            "samples_per_s": statistics.median(v),
            "samples_per_s_min": min(v),
            "samples_per_s_max": max(v),
            "samples_per_s_rounds": v,
            "disturbed_rounds": d,
        }
        for v, d in zip(per, disturbed, strict=True)
    ]
