"""Chapter 04's checks accept the solutions and reject plausible wrong answers with advice."""

from __future__ import annotations

import os
import tarfile

import lmdb
import numpy as np
import pytest
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
        if self.pid != os.getpid():
            if self.env is not None:
                self.env.close()  # inherited through fork (the parent read ds[0] first)
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
        with self._txn() as txn:
            value = txn.get(b"%08d" % i)
        x = np.frombuffer(value, np.uint8, offset=8).reshape(self.shape).copy()
        return torch.from_numpy(x), int.from_bytes(value[:8], "big", signed=True)


class ReadsTwice(LazyLMDB):
    def __getitem__(self, i):
        with self._txn() as txn:
            txn.get(b"%08d" % i)  # a second, useless read per item
        return super().__getitem__(i)


class KeepsInheritedOpen(LazyLMDB):
    """The lazy pattern without closing what a forked worker inherited from the parent."""

    def _txn(self):
        if self.env is None or self.pid != os.getpid():
            self.env = lmdb.open(self.path, readonly=True, lock=False, readahead=False)
            self.pid = os.getpid()
        return self.env.begin()


class OpensOnceEver(LazyLMDB):
    """Lazy, but never again after a fork: workers use the handle the parent opened."""

    def _txn(self):
        if self.env is None:
            self.env = lmdb.open(self.path, readonly=True, lock=False, readahead=False)
        return self.env.begin()


class OpensPerItem(LazyLMDB):
    def __getitem__(self, i):
        env = lmdb.open(self.path, readonly=True, lock=False)  # a new open for every item
        try:
            with env.begin() as txn:
                value = txn.get(b"%08d" % i)
        finally:
            env.close()
        x = np.frombuffer(value, np.uint8, offset=8).reshape(self.shape).copy()
        return torch.from_numpy(x), int.from_bytes(value[:8], "little", signed=True)


class ReadsAllOnFirstUse(LazyLMDB):
    """Opens lazily, once per process, but then reads the whole database into memory."""

    def __getitem__(self, i):
        if getattr(self, "cache_pid", None) != os.getpid():
            with self._txn() as txn:
                self.cache = {k: bytes(v) for k, v in txn.cursor()}
            self.cache_pid = os.getpid()
        value = self.cache[b"%08d" % i]
        x = np.frombuffer(value, np.uint8, offset=8).reshape(self.shape).copy()
        return torch.from_numpy(x), int.from_bytes(value[:8], "little", signed=True)


class ReadsAllInInit(Dataset):
    """Eager: everything read in __init__, the handle closed again (no attribute left open)."""

    def __init__(self, path):
        env = lmdb.open(path, readonly=True, lock=False)
        with env.begin() as txn:
            self.values = [bytes(txn.get(b"%08d" % i)) for i in range(env.stat()["entries"])]
        env.close()
        self.shape = read_manifest(path).shape

    def __len__(self):
        return len(self.values)

    def __getitem__(self, i):
        value = self.values[i]
        x = np.frombuffer(value, np.uint8, offset=8).reshape(self.shape).copy()
        return torch.from_numpy(x), int.from_bytes(value[:8], "little", signed=True)


class FailsInWorkers(LazyLMDB):
    def __getitem__(self, i):
        if os.getpid() != self.parent:
            raise ValueError("boom in a worker")
        return super().__getitem__(i)

    def __init__(self, path):
        super().__init__(path)
        self.parent = os.getpid()


def test_lazy_dataset_accepts_the_solution():
    r = check.lazy_dataset(LazyLMDB)
    assert r.passed, r.message
    assert "once in this process and once in each of the 2 workers" in r.message


def test_lazy_dataset_rejects_a_handle_opened_in_init():
    r = check.lazy_dataset(EagerLMDB)
    assert not r.passed and "__init__ keeps a handle in 'env'" in r.message


@pytest.mark.parametrize(
    "cls, advice",
    [
        (ReadsAllInInit, "__init__ opens the database and reads records"),
        (OpensPerItem, "opened LMDB 2 times: open it once per process"),
        (ReadsAllOnFirstUse, "walked a cursor"),
        (ReadsTwice, "read 4 records: read only the record asked for, once"),
        (KeepsInheritedOpen, "close the inherited one before opening your own"),
        (OpensOnceEver, "used the handle inherited from the parent"),
    ],
)
def test_lazy_dataset_checks_the_mechanism_not_only_the_samples(cls, advice):
    # Each of these returns every sample exactly; what they do per process is wrong.
    r = check.lazy_dataset(cls)
    assert not r.passed and advice in r.message, r.message


def test_a_failing_worker_is_reported_once_and_leaves_no_process(no_orphans):
    r = check.lazy_dataset(FailsInWorkers)
    assert not r.passed and "ValueError: boom in a worker" in r.message
    assert "ValueError: ValueError" not in r.message  # no_orphans: no worker process is left


def test_lazy_dataset_rejects_wrong_decoding():
    r = check.lazy_dataset(LabelInImage)
    assert not r.passed and "8 label bytes" in r.message
    r = check.lazy_dataset(BigEndianLabel)
    assert not r.passed and "little-endian" in r.message


# --- (b) tar shards ------------------------------------------------------------------------
def pack_shards(folder, out, per_shard, name="shard-{:06d}.tar", full_only=False):
    """The solution; ``name`` unpadded or ``full_only`` are the slips the check must catch."""
    names = sorted(os.listdir(folder))
    stop = len(names) - len(names) % per_shard if full_only else len(names)
    for s in range(0, stop, per_shard):
        with tarfile.open(os.path.join(out, name.format(s // per_shard)), "w") as tar:
            for member in names[s : s + per_shard]:
                tar.add(os.path.join(folder, member), arcname=member)


def read_shards(out):
    for shard in sorted(p for p in os.listdir(out) if p.endswith(".tar")):
        with tarfile.open(os.path.join(out, shard), "r|") as tar:
            for member in tar:
                yield member.name, tar.extractfile(member).read()


def pack_unpadded(folder, out, per_shard):
    pack_shards(folder, out, per_shard, name="shard-{}.tar")


def pack_full_shards_only(folder, out, per_shard):
    pack_shards(folder, out, per_shard, full_only=True)


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


def pack_fixed_four(folder, out, per_shard):
    pack_shards(folder, out, 4)  # right only for the first case's per_shard


def test_shards_rejects_an_ignored_per_shard():
    r = check.shards(pack_fixed_four, read_shards)
    assert not r.passed and "expected 3" in r.message and "all full" in r.message


def test_shards_rejects_a_dropped_last_shard_and_a_single_tar():
    r = check.shards(pack_full_shards_only, read_shards)
    assert not r.passed and "found 11" in r.message and "expected 12" in r.message
    r = check.shards(pack_one_tar, read_shards)
    assert not r.passed and "found 1 " in r.message


# --- (c) bandwidth -------------------------------------------------------------------------
def test_bandwidth_accepts_the_solution():
    assert check.read_bandwidth(3000 * 110e3 / 1e6, 3000, 3000 / 1024).passed
    assert check.read_bandwidth(3500 * 110e3 / 1e6, 3500, 3500 / 1024, target_img_s=3500).passed


def test_bandwidth_rejects_mib_bits_and_shard_mistakes():
    r = check.read_bandwidth(3000 * 110e3 / 2**20, 3000, 3000 / 1024)
    assert not r.passed and "MiB" in r.message
    r = check.read_bandwidth(3000 * 110e3 * 8 / 1e6, 3000, 3000 / 1024)
    assert not r.passed and "megabits" in r.message
    r = check.read_bandwidth(330, 3000, 3000)
    assert not r.passed and "one open serves 1024 images" in r.message
    r = check.read_bandwidth("lots", 3000, 3)
    assert not r.passed and "should be a number" in r.message


@pytest.mark.parametrize("target, per_shard", [(3000, 1024), (3500, 1000), (2000, 1024)])
def test_bandwidth_rejects_a_rounded_shard_rate(target, per_shard):
    # 3000 / 1000 was whole, so target // per_shard passed; the default case is no longer whole.
    for rounded in (target // per_shard, -(-target // per_shard)):
        r = check.read_bandwidth(
            target * 110e3 / 1e6, target, rounded, target_img_s=target, per_shard=per_shard
        )
        assert not r.passed and "a rate need not be whole" in r.message, r.message


@pytest.mark.parametrize("target", [3000, 3500])
def test_bandwidth_names_a_kb_of_1024_bytes(target):
    r = check.read_bandwidth(target * 110 * 1024 / 1e6, target, target / 1024, target_img_s=target)
    assert not r.passed and "a kB here is 1000 bytes, not 1024" in r.message
    assert "MiB" not in r.message  # the hint names the mistake made, not another


# --- (d) choose num_workers ----------------------------------------------------------------
TABLE = {0: 4000.0, 1: 7000.0, 2: 11500.0, 4: 12000.0, 8: 11800.0}


def choose_workers(table):
    best = max(table.values())
    good = [w for w, v in sorted(table.items()) if w >= 1 and v >= 0.9 * best]
    return good[0] if good else 0


def test_workers_accepts_the_rule_on_every_table():
    assert check.workers(choose_workers, TABLE).passed
    # 0 workers measured within 10% of the best is still not the answer (no overlap)
    assert check.workers(choose_workers, {0: 10000.0, 1: 9500.0, 2: 10200.0}).passed
    # cheap samples: 0 is right when every worker count is more than 10% slower
    assert check.workers(choose_workers, {0: 20000.0, 1: 9000.0, 2: 12000.0}).passed


@pytest.mark.parametrize(
    "wrong, advice",
    [
        (lambda t: max(t, key=t.get), "already are"),  # the fastest
        (lambda t: 1, "more than 10% below"),  # always one worker
        (lambda t: max(t), "already are"),  # the most workers
        (lambda t: min(w for w, v in t.items() if v >= 0.9 * max(t.values())), "never overlaps"),
        (lambda t: 3, "were not measured"),
        (
            lambda t: min(
                (w for w, v in t.items() if w >= 1 and v > 0.9 * max(t.values())), default=0
            ),
            "already are",  # > instead of >=: 180 of 200 is within 10 %
        ),
        (
            lambda t: min(
                (w for w, v in t.items() if w >= 1 and v >= 0.9 * max(t.values())), default=1
            ),
            "more than 10% below",  # never 0, even when every worker count is slower
        ),
    ],
)
def test_workers_rejects_rules_that_fit_one_measurement_only(wrong, advice):
    r = check.workers(wrong, TABLE)
    assert not r.passed and advice in r.message, r.message


def test_workers_a_wrong_rule_that_fits_this_measurement_still_fails():
    # On a measurement where 1 worker is the fastest, "the fastest" and "always 1" coincide
    # with the rule; the check's other tables catch both.
    mine = {0: 3000.0, 1: 9000.0, 2: 8800.0}
    for wrong in (lambda t: max(t, key=t.get), lambda t: 1):
        assert wrong(mine) == choose_workers(mine)
        r = check.workers(wrong, mine)
        assert not r.passed and "for the table" in r.message, r.message


def test_workers_wants_a_function():
    assert "function itself" in check.workers(2, TABLE).message


class Stub(LazyLMDB):
    def __getitem__(self, i):
        # YOUR CODE HERE
        raise NotImplementedError("exercise not done yet: replace this line with your code")


def test_the_unsolved_class_says_not_yet():
    r = check.lazy_dataset(Stub)
    assert not r.passed and "Stub is not written yet" in r.message
