"""The Celery application of chapter 08: one task = one trial (:func:`hpclab.trial.run_trial`).

Workers import this module (``celery -A hpclab.search.tasks worker``) and find the broker in
``$HPCLAB_CELERY_BROKER`` (set by :func:`hpclab.search.broker.start_workers`); the notebook's
side builds the same app with :func:`app_for`. Results travel back through the same Redis.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

from celery import Celery
from celery.signals import worker_init

from hpclab.search.broker import BROKER_ENV

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
    from hpclab.search.serve import register  # hpclab.predict: a model served by warm workers

    register(app)
    return app


def _echo(x: Any) -> Any:
    """Returns its argument: the round trip of a task that does nothing is the broker's cost."""
    return x


def _trial(params: dict[str, Any], epochs: int, seed: int, samples: int = 0) -> dict[str, Any]:
    from hpclab.trial import run_trial

    return run_trial(params, epochs=epochs, seed=seed, samples=samples)


@worker_init.connect
def _warm_up(**_: Any) -> None:
    """A warm worker: torch, scikit-learn and the data split are loaded before it takes a task,
    which is what a pool buys over a job per trial (a job pays this start-up every time)."""
    from hpclab.trial import _split

    _split(0)


# The worker's app (celery -A hpclab.search.tasks): only when a broker is configured.
app = app_for(os.environ[BROKER_ENV]) if os.environ.get(BROKER_ENV) else None
