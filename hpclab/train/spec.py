"""What a training run is: :class:`TrainSpec`, its validation, and the one rule for its data size.

A spec travels unchanged to every rank (it is frozen and picklable; the multi-node launcher
writes it as JSON). Bad fields fail here, when the spec is made, with the allowed values named,
not later inside a rank.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from hpclab.train.cost import block_bounds
from hpclab.train.data import DATASETS
from hpclab.train.optim import OPTIMIZERS, SCHEDULES, WARMUP_SCHEDULES
from hpclab.train.step import MODELS, make_model

MEMORY_FORMATS = ("contiguous", "channels_last")
DTYPES = ("fp32", "bf16", "fp16")  # the training precisions (refused in the rank: see below)
MIN_SAMPLES = 4096  # the smallest synthetic data set a run trains on


def samples_for(global_batch: int) -> int:
    """The one sizing rule: at least :data:`MIN_SAMPLES`, and at least two global batches, so
    every rank gets two or more batches per epoch whatever the world size."""
    return max(MIN_SAMPLES, 2 * global_batch)


@dataclass(frozen=True)
class TrainSpec:
    """Everything one rank needs (picklable; travels to the ranks unchanged)."""

    model: str = "tiny"
    side: int = 28  # images are 1 x side x side, flattened to side**2 features (MNIST: 28)
    per_rank_batch: int = 32
    steps: int = 20  # timed steps
    warmup: int = 3  # untimed steps first (DDP rebuilds its buckets after step 1)
    lr: float = 0.05
    seed: int = 0
    samples: int = MIN_SAMPLES
    bucket_cap_mb: float = 25.0  # 0 means one bucket per parameter tensor
    micro_batches: int = 1
    measure_compute: bool = True
    measure_allreduce: bool = True
    return_params: bool = False
    loader_workers: int = 0  # DataLoader worker processes per rank (0: load in the rank)
    # "bf16": forward and backward under bf16 autocast (weights stay fp32); "fp16": under fp16
    # autocast with a gradient scaler (loss scaling, chapter 09)
    dtype: str = "fp32"
    memory_format: str = "contiguous"  # "channels_last": convolution weights channels-last
    optimizer: str = "sgd"  # hpclab.train.optim.OPTIMIZERS: sgd, sgd-momentum, adam, adamw
    schedule: str = "constant"  # "warmup-decay": linear warm-up over lr_warmup steps, then decay
    lr_warmup: int = 0  # steps of the schedule's warm-up (not the untimed ``warmup`` steps)
    checkpoint: bool = False  # recompute activations in backward (chapter 09)
    checkpoint_every: int = 1  # blocks per checkpointed segment: 1 every block, k every k-th
    data: str = "synthetic"  # hpclab.train.data.DATASETS: synthetic, digits, teacher
    val_samples: int = 0  # held out after the training samples (0: no validation split)
    val_every: int = 0  # steps between validations (0: once per epoch); target runs only
    target_acc: float = 0.0  # stop once validation accuracy reaches it (0: no target)

    def __post_init__(self) -> None:
        # dtype is refused in the rank (hpclab.train.worker), not here: a screened candidate
        # with a dtype its rank cannot train must come back as that candidate's failure.
        for name, allowed in (
            ("model", tuple(MODELS)),
            ("memory_format", MEMORY_FORMATS),
            ("optimizer", OPTIMIZERS),
            ("schedule", SCHEDULES),
            ("data", tuple(DATASETS)),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is not known; allowed: {', '.join(allowed)}"
                )
        lows = {"side": 1, "per_rank_batch": 1, "steps": 1, "samples": 1, "micro_batches": 1}
        lows["checkpoint_every"] = 1
        zeros = {"warmup": 0, "loader_workers": 0, "lr_warmup": 0, "val_samples": 0, "val_every": 0}
        for name, low in (lows | zeros).items():
            value = getattr(self, name)
            if not isinstance(value, int) or value < low:
                raise ValueError(f"{name}={value!r}; allowed: a whole number >= {low}")
        if self.bucket_cap_mb < 0:
            raise ValueError(f"bucket_cap_mb={self.bucket_cap_mb!r}; allowed: >= 0 (0: per tensor)")
        if self.checkpoint and self.checkpoint_every > 1:
            blocks = len(block_bounds(make_model(self.model, self.side * self.side))) - 1
            if self.checkpoint_every > blocks:
                raise ValueError(
                    f"checkpoint_every={self.checkpoint_every} is larger than model "
                    f"{self.model!r}'s {blocks} blocks; allowed: 1..{blocks}"
                )
        self._check_target()

    def _check_target(self) -> None:
        """A target the split can measure, and a warm-up that fits in the run."""
        if not 0.0 <= self.target_acc <= 1.0:
            raise ValueError(
                f"target_acc={self.target_acc!r}; allowed: a validation accuracy in (0, 1] "
                "(0: no target)"
            )
        if self.target_acc > 0 and self.val_samples == 0:
            raise ValueError(
                f"target_acc={self.target_acc} needs a validation split: val_samples >= 1"
            )
        total = max(1, self.warmup) + self.steps
        if self.schedule in WARMUP_SCHEDULES and self.lr_warmup > total:
            raise ValueError(
                f"lr_warmup={self.lr_warmup} steps is longer than the run ({total} steps); "
                f"allowed: lr_warmup <= {total}"
            )

    @classmethod
    def sized(cls, ranks: int, **fields_: object) -> TrainSpec:
        """A spec for ``ranks`` ranks whose ``samples`` follow :func:`samples_for` (its global
        batch is ``per_rank_batch x ranks``), unless ``samples`` is given."""
        spec = cls(**fields_)  # type: ignore[arg-type]
        if "samples" in fields_:
            return spec
        return cls(**{**spec.as_dict(), "samples": samples_for(spec.per_rank_batch * ranks)})

    def as_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def check_ranks(self, ranks: int) -> None:
        """Refuse a world this spec cannot feed: each rank must get a whole batch per epoch
        (with fewer samples its data loader would yield no batch at all)."""
        if self.samples // ranks < self.per_rank_batch:
            raise ValueError(
                f"samples={self.samples} gives each of {ranks} ranks {self.samples // ranks} "
                f"samples, fewer than per_rank_batch={self.per_rank_batch}; allowed: samples >= "
                f"{self.per_rank_batch * ranks} (or TrainSpec.sized)"
            )
