"""Chapter 04, "Storage and data loading": small files vs LMDB vs HDF5 vs shards vs memmap.

Modules, one concept each: :mod:`~hpclab.storage.data` (sample sources),
:mod:`~hpclab.storage.dataset` (the shared Dataset interface and manifest),
:mod:`~hpclab.storage.atomic` (temporary name, verify, rename), one module per format,
:mod:`~hpclab.storage.pack` (any format to any other), :mod:`~hpclab.storage.cache` (warm/cold
page cache), and the experiments ``pack``, ``storage-read``, ``loader``, ``data-wait`` and
``staging`` in :mod:`~hpclab.storage.experiments`.
"""

from __future__ import annotations

from hpclab.storage.dataset import FORMATS, StorageError, StoredDataset
from hpclab.storage.pack import open_dataset, pack

__all__ = ["FORMATS", "StorageError", "StoredDataset", "open_dataset", "pack"]
