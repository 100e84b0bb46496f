"""Environment variables for a block: set (or unset) on entry, put back as they were after it.

The one way the library changes ``os.environ`` for a while: a notebook run in quick mode
(:mod:`hpclab.notebooks`), a thread count for the processes a block starts
(:func:`hpclab.dist.placement.torch_threads`), the tests' runs of every exercise notebook.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager


@contextmanager
def environ(values: Mapping[str, str], unset: Iterable[str] = ()) -> Iterator[None]:
    """``values`` set and ``unset`` removed for the block; afterwards each name is as before
    (removed again if it was not set)."""
    unset = tuple(unset)
    saved = {k: os.environ.get(k) for k in (*values, *unset)}
    os.environ.update(values)
    for k in unset:
        os.environ.pop(k, None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
