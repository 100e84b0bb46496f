"""Chapter 04: every format stores exactly the same samples, and conversions keep them."""

from __future__ import annotations

import numpy as np
import pytest

from hpclab.storage import FORMATS, StorageError, open_dataset, pack
from hpclab.storage.data import ArraySource, DigitsImages, FolderImages, SyntheticImages
from hpclab.storage.shards_format import ShardStream

N, SHAPE = 600, (3, 16, 16)


@pytest.fixture(scope="module")
def source():
    return SyntheticImages(N, SHAPE, seed=3)


@pytest.fixture(scope="module")
def packed(source, tmp_path_factory):
    root = tmp_path_factory.mktemp("formats")
    return {fmt: (pack(source, fmt, root / fmt, per_shard=250), root / fmt) for fmt in FORMATS}


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_sample_round_trips(fmt, source, packed):
    rec, path = packed[fmt]
    ds = open_dataset(path)
    assert len(ds) == N and ds.shape == SHAPE
    for i in (0, 1, 249, 250, N - 1, -1):
        x, y = ds[i]
        want_x, want_y = source.sample(i % N)
        assert x.dtype.is_floating_point is False and tuple(x.shape) == SHAPE
        np.testing.assert_array_equal(x.numpy(), want_x)
        assert y == want_y
    with pytest.raises(IndexError):
        ds[N]


def test_all_formats_store_the_same_data(packed):
    checksums = {fmt: rec["checksum"] for fmt, (rec, _) in packed.items()}
    assert len(set(checksums.values())) == 1, checksums
    for _, path in packed.values():
        assert open_dataset(path).checksum() == checksums["lmdb"]


def test_file_counts_are_what_the_inode_quota_sees(packed):
    assert packed["files-npy"][0]["files"] == N + 2  # one per sample + labels + manifest
    assert packed["files-png"][0]["files"] == N + 2
    assert packed["shards"][0]["files"] == 3 + 2  # 600 / 250 -> 3 shards + index + manifest
    for fmt in ("lmdb", "hdf5", "memmap"):
        assert packed[fmt][0]["files"] <= 3


def test_small_files_waste_disk_blocks(packed):
    # 768-byte samples in 4 KiB blocks: one file per sample costs several times the data.
    assert packed["files-npy"][0]["bytes_on_disk"] > 3 * packed["memmap"][0]["bytes_on_disk"]


def test_convert_any_format_to_any_other(packed, tmp_path):
    src = open_dataset(packed["shards"][1])
    rec = pack(src, "hdf5", tmp_path / "h", layout="chunked", compression="gzip")
    assert rec["checksum"] == packed["lmdb"][0]["checksum"]
    rec2 = pack(open_dataset(tmp_path / "h"), "files-png", tmp_path / "p")
    assert rec2["checksum"] == rec["checksum"]


def test_gzip_chunks_shrink_smooth_images(tmp_path):
    smooth = SyntheticImages(600, SHAPE, noise=0)
    plain = pack(smooth, "hdf5", tmp_path / "a")
    packed = pack(smooth, "hdf5", tmp_path / "b", layout="chunked", compression="gzip")
    assert packed["bytes_on_disk"] < 0.5 * plain["bytes_on_disk"]


def test_png_compresses_image_like_samples(source):
    from hpclab.storage.files_format import encode_png

    raw = sum(source.sample(i)[0].nbytes for i in range(50))
    png = sum(len(encode_png(source.sample(i)[0])) for i in range(50))
    assert png < 0.9 * raw


def test_png_refuses_two_channels(tmp_path):
    with pytest.raises(StorageError, match="1 or 3 channels"):
        pack(SyntheticImages(10, (2, 8, 8)), "files-png", tmp_path / "p")
    assert not (tmp_path / "p").exists()


def test_shard_stream_reads_in_order_and_splits_across_workers(packed):
    from torch.utils.data import DataLoader

    path = packed["shards"][1]
    ref = open_dataset(packed["memmap"][1])
    labels = [y for _, y in ShardStream(path)]
    assert labels == [ref.sample(i)[1] for i in range(N)]
    seen = [
        int(y) for _, ys in DataLoader(ShardStream(path), batch_size=50, num_workers=2) for y in ys
    ]
    assert sorted(seen) == sorted(labels) and len(seen) == N


def test_digits_and_folder_sources(tmp_path):
    from PIL import Image

    digits = DigitsImages()
    assert len(digits) == 1797 and digits.sample(0)[0].shape == (1, 8, 8)
    rng = np.random.default_rng(0)
    for cls in ("cat", "dog"):
        (tmp_path / "tree" / cls).mkdir(parents=True)
        for k in range(3):
            img = rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)
            Image.fromarray(img).save(tmp_path / "tree" / cls / f"{k}.png")
    tree = FolderImages(tmp_path / "tree", (3, 8, 8))
    assert tree.classes == ["cat", "dog"] and len(tree) == 6
    assert [tree.sample(i)[1] for i in range(6)] == [0, 0, 0, 1, 1, 1]
    rec = pack(tree, "lmdb", tmp_path / "l")
    assert rec["samples"] == 6 and open_dataset(tmp_path / "l")[5][1] == 1


def test_array_source_packs_without_the_generator(source, tmp_path):
    arr = ArraySource.from_source(source)
    assert (
        pack(arr, "memmap", tmp_path / "m")["checksum"]
        == pack(source, "memmap", tmp_path / "n")["checksum"]
    )
