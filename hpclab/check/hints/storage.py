"""Hints for chapter 04's exercises (checks in ``hpclab/check/storage.py``)."""

from hpclab.check.hints import Exercise

EXERCISES = (
    Exercise(
        "shards",
        (
            ("function", "pack_shards(folder, out, per_shard)"),
            ("function", "read_shards(out) yielding (name, bytes)"),
        ),
        (
            "Many small files cost one open each: pack them into a few large archives, and read "
            "each archive front to back.",
            "tarfile writes and reads archives. Sort the file names, cut them into groups of "
            "per_shard, and give the shards zero-padded numbers so that their names sort in "
            "order; read the shards sorted by name, their members in order.",
            "pack: a loop over start offsets in steps of per_shard, one archive opened for "
            "writing per shard, each file added under its own name. read: a generator over the "
            "sorted shard names that yields (member name, member bytes).",
        ),
    ),
    Exercise(
        "read_bandwidth",
        (
            ("number", "mb_per_s, in MB/s"),
            ("number", "files_per_s, file opens per second"),
            ("number", "shard_files_per_s, shard opens per second"),
        ),
        (
            "A job's I/O demand is its images per second times what each image costs: its bytes, "
            "and an open when it is a file of its own.",
            "kB and MB are powers of ten here (1 kB = 1000 bytes, 1 MB = 10^6 bytes). With one "
            "file per image every image is one open; a shard holds per_shard images, so one "
            "open serves that many.",
            "Three one-line products or quotients of target_img_s, sample_kb and per_shard.",
        ),
    ),
    Exercise(
        "workers",
        (("function", "choose_workers(table) returning a num_workers value of the table"),),
        (
            "Loader workers overlap loading with training; more than needed only take cores and "
            "memory from the job.",
            "Take the best samples/s of the table: the answer is the fewest workers (at least "
            "1) within 10% of it (90% of the best counts as within); 0 only when every worker "
            "count is more than 10% slower.",
            "The best rate; the worker counts >= 1 whose rate is at least 0.9 x the best, in "
            "order; the first of them, or 0 if there is none.",
        ),
    ),
)
