"""Chapter 08 benchmark: the same trials on 2 Celery workers vs one after another, side by side.

1. Dispatch cost: the round trip of a task that does nothing (send, a worker picks it up, the
   result comes back through Redis) vs calling the function directly, median of 100.
2. 32 short trials (random search, one seed, so both sides run the very same trials): the Celery
   pool with 2 workers vs the sequential loop. Goal (issue 16): >= 1.6x on 2 cores.
Both sides give each trial one thread. Pool start-up (Redis, workers importing torch) is
excluded from the timed part and printed.
"""

from __future__ import annotations

import statistics
import sys
import time

from hpclab.compute.device import torch_threads
from hpclab.progress import Progress
from hpclab.search.broker import celery_pool
from hpclab.search.celery_backend import run_celery
from hpclab.search.search_experiment import SearchConfig, run_sequential
from hpclab.search.strategies import Searcher
from hpclab.search.tasks import app_for

TRIALS = 32
EPOCHS = 2
GOAL = 1.6


def dispatch_ms() -> tuple[float, float]:
    t0 = time.perf_counter()
    with celery_pool(1) as (url, _):
        print(f"pool start-up: {time.perf_counter() - t0:.2f} s (Redis + 1 worker)")
        app = app_for(url)
        app.send_task("hpclab.echo", args=[0]).get(timeout=30)  # warm-up
        rt = []
        for i in range(100):
            t = time.perf_counter()
            app.send_task("hpclab.echo", args=[i]).get(timeout=30)
            rt.append(time.perf_counter() - t)
    direct = []
    for i in range(100):
        t = time.perf_counter()
        (lambda x: x)(i)
        direct.append(time.perf_counter() - t)
    return statistics.median(rt) * 1e3, statistics.median(direct) * 1e3


def main() -> int:
    try:
        task_ms, call_ms = dispatch_ms()
        print(f"dispatch: Celery round trip {task_ms:.2f} ms vs direct call {call_ms * 1e3:.2f} us")
        # Every training sample (not quick mode's subset): short trials, but not only overhead.
        cfg = SearchConfig.create(
            backend="celery", strategy="random", trials=TRIALS, epochs=EPOCHS, workers=2, samples=0
        )
        # The same resources per trial on both sides: one thread (each worker has one).
        with torch_threads(1):
            t = time.perf_counter()
            seq = run_sequential(cfg, Searcher("random", TRIALS, 0), Progress())
            t_seq = time.perf_counter() - t
        cel = run_celery(cfg, Searcher("random", TRIALS, 0), Progress())
        t_cel = max(r.end_s for r in cel)  # from the first submission, pool start-up excluded
    except Exception as exc:  # noqa: BLE001
        print(f"search: could not measure: {type(exc).__name__}: {exc}")
        return 1
    diff = max(abs(a.val_loss - b.val_loss) for a, b in zip(seq, cel, strict=True))
    ratio = t_seq / t_cel
    print(
        f"{TRIALS} trials: sequential {t_seq:.2f} s, Celery 2 workers {t_cel:.2f} s; "
        f"largest loss difference {diff:.1e}; median overhead per Celery trial "
        f"{statistics.median(r.overhead_s for r in cel) * 1e3:.1f} ms"
    )
    print(f"search: dispatch_ms={task_ms:.2f}")
    print(
        f"search: celery_vs_sequential={ratio:.2f} goal>={GOAL} {'PASS' if ratio >= GOAL else 'FAIL'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
