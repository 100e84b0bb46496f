"""Chapter 04's checks accept the solutions and reject plausible wrong answers with advice."""

from __future__ import annotations

import os
import tarfile

import lmdb
import numpy as np
import torch
from torch.utils.data import Dataset

from hpclab.check import storage as check
from hpclab.storage.dataset import read_manifest


# --- (a) a lazy LMDB Dataset --------------------------------------------------------------
class LazyLMDB(Dataset):
    """The solution: remember the path, open in the first __getitem__ of each process."""

    def __init__(self, path):
        m = read_manifest(path)
        self.path, self.n, self.shape = path, m.samples, m.shape
        self.env, self.pid = None, None

    def __len__(self):
        return self.n

    def _txn(self):
        if self.env is None or self.pid != os.getpid():
            self.env = lmdb.open(self.path, readonly=True, lock=False, readahead=False)
            self.pid = os.getpid()
        return self.env.begin()

    def __getitem__(self, i):
        with self._txn() as txn:
            value = txn.get(b"%08d" % i)
        label = int.from_bytes(value[:8], "little", signed=True)
        x = np.frombuffer(value, np.uint8, offset=8).reshape(self.shape).copy()
        return torch.from_numpy(x), label


class EagerLMDB(LazyLMDB):
    def __init__(self, path):
        super().__init__(path)
        self.env = lmdb.open(path, readonly=True, lock=False)  # opened in __init__: wrong
        self.pid = os.getpid()


class LabelInImage(LazyLMDB):
    def __getitem__(self, i):
        with self._txn() as txn:
            value = txn.get(b"%08d" % i)
        x = np.frombuffer(value, np.uint8)  # forgot the 8 label bytes
        return torch.from_numpy(x.copy()), 0


class BigEndianLabel(LazyLMDB):
    def __getitem__(self, i):
        x, _ = super().__getitem__(i)
        with self._txn() as txn:
            value = txn.get(b"%08d" % i)
        return x, int.from_bytes(value[:8], "big", signed=True)


def test_lazy_dataset_accepts_the_solution():
    r = check.lazy_dataset(LazyLMDB)
    assert r.passed, r.message


def test_lazy_dataset_rejects_a_handle_opened_in_init():
    r = check.lazy_dataset(EagerLMDB)
    assert not r.passed and "__init__ opened LMDB" in r.message and "'env'" in r.message


def test_lazy_dataset_rejects_wrong_decoding():
    r = check.lazy_dataset(LabelInImage)
    assert not r.passed and "8 label bytes" in r.message
    r = check.lazy_dataset(BigEndianLabel)
    assert not r.passed and "little-endian" in r.message


# --- (b) tar shards ------------------------------------------------------------------------
def pack_shards(folder, out, per_shard):
    names = sorted(os.listdir(folder))
    for s in range(0, len(names), per_shard):
        with tarfile.open(os.path.join(out, f"shard-{s // per_shard:06d}.tar"), "w") as tar:
            for name in names[s : s + per_shard]:
                tar.add(os.path.join(folder, name), arcname=name)


def read_shards(out):
    for shard in sorted(p for p in os.listdir(out) if p.endswith(".tar")):
        with tarfile.open(os.path.join(out, shard), "r|") as tar:
            for member in tar:
                yield member.name, tar.extractfile(member).read()


def pack_unpadded(folder, out, per_shard):
    names = sorted(os.listdir(folder))
    for s in range(0, len(names), per_shard):
        with tarfile.open(os.path.join(out, f"shard-{s // per_shard}.tar"), "w") as tar:
            for name in names[s : s + per_shard]:
                tar.add(os.path.join(folder, name), arcname=name)


def pack_full_shards_only(folder, out, per_shard):
    names = sorted(os.listdir(folder))
    for s in range(len(names) // per_shard):
        with tarfile.open(os.path.join(out, f"shard-{s:06d}.tar"), "w") as tar:
            for name in names[s * per_shard : (s + 1) * per_shard]:
                tar.add(os.path.join(folder, name), arcname=name)


def pack_one_tar(folder, out, per_shard):
    with tarfile.open(os.path.join(out, "all.tar"), "w") as tar:
        for name in sorted(os.listdir(folder)):
            tar.add(os.path.join(folder, name), arcname=name)


def test_shards_accepts_the_solution():
    r = check.shards(pack_shards, read_shards)
    assert r.passed, r.message


def test_shards_rejects_unpadded_names_read_out_of_order():
    r = check.shards(pack_unpadded, read_shards)
    assert not r.passed and "out of order" in r.message and "shard-000010" in r.message


def test_shards_rejects_a_dropped_last_shard_and_a_single_tar():
    r = check.shards(pack_full_shards_only, read_shards)
    assert not r.passed and "found 11" in r.message and "expected 12" in r.message
    r = check.shards(pack_one_tar, read_shards)
    assert not r.passed and "found 1 " in r.message


# --- (c) bandwidth -------------------------------------------------------------------------
def test_bandwidth_accepts_the_solution():
    assert check.read_bandwidth(3000 * 110e3 / 1e6, 3000, 3000 / 1000).passed


def test_bandwidth_rejects_mib_bits_and_shard_mistakes():
    r = check.read_bandwidth(3000 * 110e3 / 2**20, 3000, 3)
    assert not r.passed and "MiB" in r.message
    r = check.read_bandwidth(3000 * 110e3 * 8 / 1e6, 3000, 3)
    assert not r.passed and "megabits" in r.message
    r = check.read_bandwidth(330, 3000, 3000)
    assert not r.passed and "one open serves 1000 images" in r.message
    r = check.read_bandwidth("lots", 3000, 3)
    assert not r.passed and "should be a number" in r.message


# --- (d) choose num_workers ----------------------------------------------------------------
TABLE = {0: 4000.0, 1: 7000.0, 2: 11500.0, 4: 12000.0, 8: 11800.0}


def test_workers_accepts_the_smallest_within_ten_percent():
    assert check.workers(2, TABLE).passed


def test_workers_rejects_the_best_when_fewer_suffice_and_too_few():
    r = check.workers(4, TABLE)
    assert not r.passed and "2 already are" in r.message
    r = check.workers(1, TABLE)
    assert not r.passed and "more than 10% below" in r.message
    r = check.workers(3, TABLE)
    assert not r.passed and "was not measured" in r.message
