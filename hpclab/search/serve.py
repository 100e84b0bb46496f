"""Experiment ``serve``: a trained model behind Celery workers, requests from the notebook
(chapter 08).

Nakayama 2017 shows Celery separating a web application from its compute workers (FacialVAE: the
web server creates tasks, a broker queues them, GPU workers run the model and send the results
back). Here the model is the course's MLP trained once on digits (:func:`hpclab.trial.
run_trial` with ``save_to``); ``workers`` Celery workers load it **at start** (``worker_init``,
from ``$HPCLAB_SERVE_MODEL``) and keep it: a request pays for the model call, not for loading.
The task ``hpclab.predict`` takes a batch of inputs as lists (JSON) and returns their classes.

Measured for each batch ``b`` (requests per task), one thread per model call on both sides:

- **latency**: one call of ``b`` requests, in this process (``direct``) and through Celery (send,
  a worker runs it, the result comes back through Redis); ``broker_ms`` is the round trip of the
  echo task with the same inputs (sent, and sent back): the broker's cost per call, no model;
- **throughput**: ``requests`` sent at once (many clients) as ``requests / b`` tasks to the
  workers, vs the same requests one call after another in this process. ``send_ms`` is the
  client's own cost per task (publishing it and subscribing to its result): with one request
  per task this one client, not the workers, can be what limits the rate.

Batching trades latency for throughput: the broker's round trip and the model call are paid per
task, so grouping ``b`` requests amortises them, while each request waits for its whole batch
and, in a real service, for the batch to fill: ``fill_ms`` is that wait in a model (requests
arriving evenly at ``arrivals`` per second), ``request_latency_ms`` = ``fill_ms`` + the call.
Here the client groups requests; a real model server batches on its side instead: Triton's
dynamic batcher and Ray Serve's ``@serve.batch`` gather the requests that arrive within a short
delay (``max_queue_delay_microseconds``, ``batch_wait_timeout_s``) into one model call, up to a
maximum batch size; vLLM batches continuously, token by token.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from hpclab.config import Config, ConfigError, param
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.search.served_model import MODEL_ENV, forget, predict

# Models of hpclab.train.MODELS a trial trains (flat digits), as in the search space.
SERVABLE = ("tiny", "large")
# The served model's training: a few epochs of SGD with momentum (~96 % on digits in 5 epochs).
TRAINING = {"lr": 0.1, "momentum": 0.9, "batch_size": 32}
TIMEOUT_S = 60.0  # no answer from the workers within this: an error, never a hang


@dataclass(frozen=True)
class ServeConfig(Config):
    model: str = param("tiny", choices=SERVABLE, help="the served model (trained on digits)")
    epochs: int = param(5, min=1, max=100, quick=2, help="training epochs of the served model")
    workers: int = param(2, min=1, max=64, help="Celery workers (one model copy each)")
    requests: int = param(256, min=1, max=100_000, quick=64, help="requests sent at once")
    batches: tuple = param(
        (1, 4, 16, 64), min=1, max=4096, quick=(1, 4, 16), help="requests per task to compare"
    )
    repeat: int = param(20, min=3, max=1000, quick=7, help="timed single calls per batch")
    bursts: int = param(3, min=1, max=50, quick=2, help="timed bursts of all requests per batch")
    arrivals: float = param(
        1000.0, min=1.0, max=1e7, log=True, help="requests/s arriving (model of the batch fill)"
    )

    def check(self) -> None:
        if not self.batches:
            raise ConfigError("batches is empty: give at least one batch size, e.g. 1,4,16")
        if self.requests < max(self.batches):
            raise ConfigError(
                f"requests={self.requests} is fewer than the largest batch {max(self.batches)}; "
                f"allowed: requests >= every batch size"
            )


@contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def _chunks(rows: list, b: int) -> list[list]:
    return [rows[i : i + b] for i in range(0, len(rows), b)]


Send = Callable[[list], Callable[[], list[int]]]


def _measure(
    mode: str, b: int, cfg: ServeConfig, rows: list, expected: list[int], send: Send
) -> dict[str, Any]:
    """One record: latency of one call of ``b`` requests, and requests/s for a burst of all.

    ``send(chunk)`` starts a call and returns what waits for its classes: in a burst every task
    is sent before the first answer is awaited (many clients at once).
    """
    from hpclab.measure.timing import time_fn

    chunks, wrong, sending = _chunks(rows, b), [], []

    def burst() -> list[int]:
        t0 = time.perf_counter()
        pending = [send(c) for c in chunks]
        sending.append(time.perf_counter() - t0)  # the client's part: publish every task
        return [k for wait in pending for k in wait()]

    def compare(got: list[int]) -> None:  # the served classes vs the direct model's, exactly
        wrong.append(sum(g != e for g, e in zip(got, expected, strict=True)))

    one = time_fn(lambda: send(chunks[0])(), warmup=3, repeat=cfg.repeat)
    many = time_fn(burst, warmup=1, repeat=cfg.bursts, check=compare)
    return {
        "mode": mode,
        "batch": b,
        "requests": len(rows),
        "tasks": len(chunks),
        "workers": cfg.workers if mode == "celery" else 1,
        "latency_ms": one.median_s * 1e3,
        "latency_ms_min": one.min_s * 1e3,
        "latency_ms_max": one.max_s * 1e3,
        "latency_ms_iqr": one.iqr_s * 1e3,
        "ms_per_request": one.median_s * 1e3 / b,
        "requests_per_s": len(rows) / many.median_s,
        "requests_per_s_min": len(rows) / many.max_s,
        "requests_per_s_max": len(rows) / many.min_s,
        # Through Celery: what sending one task costs the client (median over the timed bursts)
        "send_ms": statistics.median(sending[-cfg.bursts :]) / len(chunks) * 1e3
        if mode == "celery"
        else 0.0,
        "mismatches": wrong[0],
    }


def _now(classes: list[int]) -> Callable[[], list[int]]:
    """A direct call has its answer at once."""
    return lambda: classes


def _answer(res: Any) -> Any:
    from celery.exceptions import TimeoutError as CeleryTimeout

    from hpclab.search.broker import BrokerError

    try:
        return res.get(timeout=TIMEOUT_S)
    except CeleryTimeout:
        raise BrokerError(
            f"no answer from the Celery workers within {TIMEOUT_S:.0f} s (a worker died?)"
        ) from None


def run_serve(cfg: ServeConfig, progress: Progress) -> Result:
    """Train once, serve through ``workers`` Celery workers; one record per (mode, batch)."""
    from hpclab.dist.placement import torch_threads
    from hpclab.measure.timing import time_fn
    from hpclab.search.broker import celery_pool
    from hpclab.search.celery_app import app_for
    from hpclab.trial import digits_split, run_trial

    batches = sorted(set(cfg.batches))
    tmp = tempfile.mkdtemp(prefix="hpclab-serve-")
    path = os.path.join(tmp, "model.pt")
    try:
        with torch_threads(1):  # one thread per model call, as each worker has
            progress.update(0, 1 + 2 * len(batches), "training the served model")
            trained = run_trial({"model": cfg.model, **TRAINING}, cfg.epochs, save_to=path)
            _, _, xv, yv = digits_split(0)
            rows = [xv[i % len(xv)].tolist() for i in range(cfg.requests)]  # unseen digits
            labels = [int(yv[i % len(yv)]) for i in range(cfg.requests)]
            records, expected = [], {}
            for k, b in enumerate(batches, start=1):
                progress.update(k, 1 + 2 * len(batches), f"direct calls, batch {b}")
                expected[b] = [c for chunk in _chunks(rows, b) for c in predict(chunk, path)]
                rec = _measure(
                    "direct", b, cfg, rows, expected[b], lambda c: _now(predict(c, path))
                )
                records.append({**rec, "broker_ms": 0.0})
            with _environ(MODEL_ENV, path), celery_pool(cfg.workers) as (url, _):
                app = app_for(url)

                def send(chunk: list) -> Callable[[], list[int]]:
                    res = app.send_task("hpclab.predict", args=[chunk, path])
                    return lambda: _answer(res)

                for k, b in enumerate(batches, start=1 + len(batches)):
                    progress.update(k, 1 + 2 * len(batches), f"through Celery, batch {b}")
                    rec = _measure("celery", b, cfg, rows, expected[b], send)
                    echo = time_fn(
                        lambda b=b: _answer(app.send_task("hpclab.echo", args=[rows[:b]])),
                        warmup=3, repeat=cfg.repeat,
                    )  # fmt: skip
                    rec["broker_ms"] = echo.median_s * 1e3
                    records.append(rec)
    finally:
        forget(path)
        shutil.rmtree(tmp, ignore_errors=True)
    accuracy = sum(p == y for p, y in zip(expected[batches[0]], labels, strict=True)) / len(labels)
    for r in records:
        # Model, not measured: requests arriving evenly at ``arrivals`` per second wait on
        # average (b - 1) / (2 * arrivals) for their batch to fill before it is sent.
        fill_ms = (r["batch"] - 1) / (2 * cfg.arrivals) * 1e3
        r.update(fill_ms=fill_ms, request_latency_ms=fill_ms + r["latency_ms"])
        r.update(model=cfg.model, val_acc=trained["val_acc"], served_acc=accuracy)
    progress.update(1, 1, "")
    return make_result("serve", cfg, records)
