"""The model the ``serve`` experiment serves (chapter 08): loaded once per process, and by a
Celery worker before it takes its first request (``$HPCLAB_SERVE_MODEL``)."""

from __future__ import annotations

import os
from typing import Any

MODEL_ENV = "HPCLAB_SERVE_MODEL"
_MODELS: dict[str, Any] = {}  # path -> model, loaded once per process


def predict(rows: list[list[float]], path: str) -> list[int]:
    """The classes of ``rows`` (``[b, features]`` as lists) by the model saved at ``path``: the
    body of the task ``hpclab.predict`` and of the direct call alike."""
    import torch

    model = _MODELS[path] if path in _MODELS else _load(path)
    with torch.inference_mode():
        return model(torch.tensor(rows, dtype=torch.float32)).argmax(1).tolist()


def _load(path: str) -> Any:
    from hpclab.trial import load_model

    _MODELS[path] = load_model(path)
    return _MODELS[path]


def forget(path: str) -> None:
    """Drop the model loaded from ``path`` (its file is going away)."""
    _MODELS.pop(path, None)


def register_warm_model() -> None:
    """A worker loads the served model at start, before it takes its first request."""
    from celery.signals import worker_init

    worker_init.connect(_load_served_model, weak=False)


def _load_served_model(**_: Any) -> None:
    if os.environ.get(MODEL_ENV):
        _load(os.environ[MODEL_ENV])
