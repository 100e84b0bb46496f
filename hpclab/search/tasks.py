"""The module Celery workers import (``celery -A hpclab.search.tasks worker``, chapter 08).

The app and its tasks are :mod:`hpclab.search.celery_app`'s; this module builds it from
``$HPCLAB_CELERY_BROKER`` and warms the worker up before its first task.
"""

from __future__ import annotations

import os
from typing import Any

from celery.signals import worker_init

from hpclab.search.celery_app import BROKER_ENV, app_for

__all__ = ["app", "app_for"]


@worker_init.connect
def _warm_up(**_: Any) -> None:
    """A warm worker: torch, scikit-learn and the data split are loaded before it takes a task,
    which is what a pool buys over a job per trial (a job pays this start-up every time)."""
    from hpclab.trial import digits_split

    digits_split(0)


# The worker's app (celery -A hpclab.search.tasks): only when a broker is configured.
app = app_for(os.environ[BROKER_ENV]) if os.environ.get(BROKER_ENV) else None
