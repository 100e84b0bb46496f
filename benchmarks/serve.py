"""Chapter 08 benchmark: a model served by 2 Celery workers, one request per task vs 16.

One run of the ``serve`` experiment (the course's MLP trained on digits, 256 requests sent at
once, one thread per model call) at batches 1 and 16, side by side:

1. latency of one request: the model called in this process vs through Celery (send, a worker
   runs it, the answer comes back through Redis), and the broker alone (echo task), printed;
2. throughput of the burst through Celery with 16 requests per task vs 1. Goal: >= 4x. A task
   costs a fixed part c (the client publishes it and subscribes to its result, a worker
   receives, acknowledges and stores the answer: ~1-3 ms) and a part r per request (64 floats
   encoded as JSON, the model's ~4 us): 16 requests per task give 16 (c + r) / (c + 16 r),
   which is >= 4 while r <= c / 4. Measured: r ~ c / 10 (the client's send cost per task rises
   from ~0.9 ms at 1 request to ~2.1 ms at 16), ratio ~9-15x on 2 cores shared with others.
Pool start-up (Redis, workers importing torch and loading the model) is not timed.
"""

from __future__ import annotations

import sys

from hpclab.progress import Progress
from hpclab.search.serve import ServeConfig, run_serve

GOAL = 4.0


def main() -> int:
    cfg = ServeConfig(batches=(1, 16), requests=256, repeat=30, bursts=5)
    try:
        recs = run_serve(cfg, Progress()).records
    except Exception as exc:  # noqa: BLE001
        print(f"serve: could not measure: {type(exc).__name__}: {exc}")
        return 1
    by = {(r["mode"], r["batch"]): r for r in recs}
    for r in recs:
        broker = (
            f"broker alone {r['broker_ms']:.2f} ms, sending {r['send_ms']:.2f} ms per task, "
            f"{r['mismatches']} predictions differ"
            if r["mode"] == "celery"
            else "in this process"
        )
        print(
            f"{r['mode']:>6} batch {r['batch']:>2}: one call {r['latency_ms']:.3f} ms "
            f"[{r['latency_ms_min']:.3f}-{r['latency_ms_max']:.3f}], "
            f"{r['requests_per_s']:.0f} requests/s for {r['requests']} at once, {broker}"
        )
    if any(r["mismatches"] for r in recs):
        print("serve: could not measure: Celery's predictions differ from the direct model's")
        return 1
    ratio = by["celery", 16]["requests_per_s"] / by["celery", 1]["requests_per_s"]
    print(f"serve: broker_ms={by['celery', 1]['broker_ms']:.3f}")
    print(f"serve: direct_latency_ms={by['direct', 1]['latency_ms']:.3f}")
    print(f"serve: celery_latency_ms={by['celery', 1]['latency_ms']:.3f}")
    print(
        f"serve: batch16_vs_batch1_throughput={ratio:.2f} goal>={GOAL} "
        f"{'PASS' if ratio >= GOAL else 'FAIL'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
