"""Hints for chapter 04's lazy LMDB Dataset (check in ``hpclab/check/lazy_dataset.py``)."""

from hpclab.check.hints import Exercise

EXERCISES = (
    Exercise(
        "lazy_dataset",
        (("class", "LazyLMDB, your Dataset class"),),
        (
            "A database handle belongs to the process that opened it: open lazily, once per "
            "process, never in __init__.",
            "Compare os.getpid() with the pid saved when the handle was opened; a handle "
            "inherited through fork is closed and a new one opened. Each item is one get of its "
            "key; a value is 8 label bytes (int64, little-endian), then the uint8 image.",
            "In __getitem__: when the pid changed, close an inherited env, open the database "
            "read-only without locking, save the pid; then one get in a read transaction, the "
            "label from the first 8 bytes, the image from the rest reshaped to self.shape.",
        ),
    ),
)
