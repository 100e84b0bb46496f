"""The Celery application of chapter 08, built from a broker URL: one task per trial
(``hpclab.trial``), an echo (``hpclab.echo``, the broker's own cost) and a served model's
prediction (``hpclab.predict``, :mod:`hpclab.search.served_model`).

The notebook's side builds it with :func:`app_for`; workers import :mod:`hpclab.search.tasks`,
which builds the same app from ``$HPCLAB_CELERY_BROKER`` (:data:`BROKER_ENV`, set by
:func:`hpclab.search.broker.start_workers`). Results travel back through the same Redis. This
module imports no other module of the search's Celery side: the broker, the workers' module and
the serving experiment all import it, never the other way round.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from celery import Celery

from hpclab.search.served_model import predict, register_warm_model

BROKER_ENV = "HPCLAB_CELERY_BROKER"
# A trial here takes seconds; an hour covers any trial the course runs. A running trial whose
# worker is alive is never handed to a second worker before this.
VISIBILITY_TIMEOUT_S = 3600


@lru_cache(maxsize=4)
def app_for(url: str) -> Celery:
    app = Celery("hpclab", broker=url, backend=url)
    app.conf.update(
        task_acks_late=True,
        task_track_started=True,  # a running trial names its worker (see lost workers)
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT_S},
        result_expires=3600,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        # Redis runs beside the searcher: when it is gone it is not coming back. Fail at once
        # (the search keeps what finished) instead of 20 reconnection attempts per call.
        result_backend_transport_options={
            "retry_policy": {"max_retries": 1, "interval_start": 0, "interval_step": 0.1}
        },
    )
    app.task(name="hpclab.trial", bind=False)(_trial)
    app.task(name="hpclab.echo", bind=False)(_echo)
    app.task(name="hpclab.predict", bind=False)(predict)  # a model served by warm workers
    register_warm_model()
    return app


def _echo(x: Any) -> Any:
    """Returns its argument: the round trip of a task that does nothing is the broker's cost."""
    return x


def _trial(
    params: dict[str, Any], epochs: int, seed: int, samples: int = 0,
    early_stop: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One trial; with ``early_stop`` (:func:`hpclab.search.early_stopping.new_study`'s spec)
    it reports each epoch to the search's study in Redis and stops when the pruner says so."""
    from hpclab.trial import run_trial

    if early_stop is None:
        return run_trial(params, epochs=epochs, seed=seed, samples=samples)
    from hpclab.search.early_stopping import load_study, pruned_trial

    return pruned_trial(
        load_study(early_stop),
        lambda report: run_trial(params, epochs=epochs, seed=seed, samples=samples, report=report),
    )
