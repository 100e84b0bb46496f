"""A training that checkpoints on a warning signal and requeues itself (chapter 07, section 3).

``sbatch --time=T --signal=B:USR2@N --requeue`` asks Slurm to send SIGUSR2 to the batch shell N
seconds before the limit T. USR2, not USR1: NCCL 2.12 caught SIGUSR1 (NVIDIA/nccl#704, 2022; opt-in
since the next release via ``NCCL_PROXY_DUMP_SIGNAL``), and submitit moved to USR2 for that reason; ``torchrun`` forwards neither to its ranks unless told to
(``--signals-to-handle``), so here the job script ``exec``s Python and Python is the batch shell.

On the signal the handler only sets a flag (a handler that saved would run in the middle of a
step). At the next step boundary the loop saves the whole state atomically (model, optimizer,
step, the data order's epoch and position, the RNG states, the losses so far), runs
``scontrol requeue $SLURM_JOB_ID`` and stops. Slurm puts the job back in the queue (it waits
``cred_expire`` seconds, 120 by default, as ``Reason=BeginTime``) and runs the same script again
with ``SLURM_RESTART_COUNT`` set; the loop loads the newest checkpoint and continues. With the
same seed the resumed run ends with exactly the weights of an uninterrupted one.

Run: ``python -m hpclab.cluster.resumable OUT_DIR STEPS STEP_DELAY_S SEED``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from hpclab.cluster.checkpoint import load_latest, save_atomic, save_checkpoint
from hpclab.dist.placement import torch_threads
from hpclab.train import flat_params, make_model, synthetic_images, train_step

BATCH = 32
SAMPLES = 1024


def batch_at(data: tuple[torch.Tensor, torch.Tensor], epoch: int, position: int, seed: int):
    """The batch at ``position`` of ``epoch``'s shuffle (a sampler's state is these two ints)."""
    x, y = data
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed + epoch))
    idx = perm[position : position + BATCH]
    return x[idx], y[idx]


class Trainer:
    """SGD with momentum on chapter 06's tiny model; noise from the global RNG (augmentation)."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        x, y = synthetic_images(SAMPLES, (1, 28, 28), seed=seed)
        self.data = (x.reshape(len(x), -1), y)
        self.model = make_model("tiny", 28 * 28, seed=seed)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
        torch.manual_seed(seed)
        self.step, self.epoch, self.position = 0, 0, 0
        self.losses: list[tuple[int, float, int]] = []  # (step, loss, attempt)

    def train_one(self, attempt: int = 0) -> float:
        x, y = batch_at(self.data, self.epoch, self.position, self.seed)
        x = x + 0.01 * torch.randn_like(x)  # uses the global RNG: resuming must restore it
        loss = train_step(self.model, self.opt, x, y)
        self.losses.append((self.step, loss, attempt))
        self.step += 1
        self.position += BATCH
        if self.position + BATCH > SAMPLES:
            self.epoch, self.position = self.epoch + 1, 0
        return loss

    def state(self) -> dict:
        return {
            "step": self.step,
            "epoch": self.epoch,
            "position": self.position,
            "model": self.model.state_dict(),
            "optimizer": self.opt.state_dict(),
            "rng": torch.get_rng_state(),
            "losses": self.losses,
        }

    def restore(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        self.step, self.epoch, self.position = state["step"], state["epoch"], state["position"]
        self.losses = [tuple(x) for x in state["losses"]]

    def flat(self) -> torch.Tensor:
        return flat_params(self.model)


def train_uninterrupted(steps: int, seed: int = 0) -> torch.Tensor:
    """The reference: the same training in one go, no signal, no checkpoint (one thread, as
    in the job: another thread count sums in another order and differs in the last bits)."""
    with torch_threads(1):
        t = Trainer(seed)
        while t.step < steps:
            t.train_one()
        return t.flat()


def log(*parts: object) -> None:
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


def record(out: Path, event: dict) -> None:
    with open(out / "events.jsonl", "a") as f:
        f.write(json.dumps(event) + "\n")


def main(out_dir: str, steps: int, step_delay_s: float, seed: int) -> int:
    """Train (resuming if a checkpoint exists) until done or warned; 0 either way.

    Once the work is saved, a late warning must not kill the job (Slurm would call it FAILED,
    0:12): from then on USR2 is *ignored*, not handled. A Python handler would not do: at
    shutdown the interpreter puts back the default action of every signal it handled, and the
    default action of USR2 is to terminate; an ignored signal it leaves ignored."""
    warned: list[float] = []
    signal.signal(signal.SIGUSR2, lambda *_: warned.append(time.time()))
    try:
        with torch_threads(1):  # as the reference: one thread sums in one order
            return _train(Path(out_dir), steps, step_delay_s, seed, warned)
    finally:
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)


def _train(out: Path, steps: int, step_delay_s: float, seed: int, warned: list[float]) -> int:
    attempt = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
    record(out, {"event": "start", "attempt": attempt, "at": time.time()})
    t = Trainer(seed)
    state, path, refused = load_latest(out / "checkpoints")
    for line in refused:
        log("refused checkpoint", line)
    if state is not None:
        t.restore(state)
        log(f"attempt {attempt}: resumed from {path.name} at step {t.step}")
    else:
        log(f"attempt {attempt}: starting at step 0")
    while t.step < steps:
        t.train_one(attempt)
        log(f"step {t.step} loss {t.losses[-1][1]:.4f}")
        if warned and t.step < steps:  # warned after the last step: finish, do not requeue
            info = save_checkpoint(out / "checkpoints", t.step, t.state())
            record(
                out,
                {
                    "event": "checkpoint",
                    "attempt": attempt,
                    "step": t.step,
                    "signal_at": warned[0],
                    "saved_at": time.time(),
                    **info,
                },
            )
            log(f"USR2: saved step {t.step} ({info['mb']:.2f} MB, {info['mb_per_s']:.0f} MB/s)")
            job = os.environ.get("SLURM_JOB_ID")
            if job:
                subprocess.run(["scontrol", "requeue", job], check=True)
                log(f"requeued job {job}")
            return 0
        time.sleep(step_delay_s)  # stands in for a longer step
    save_atomic(t.flat(), out / "final.pt")
    (out / "losses.json.tmp").write_text(json.dumps(t.losses))
    os.replace(out / "losses.json.tmp", out / "losses.json")  # last, and whole: the job's done
    log(f"finished {steps} steps after {attempt} requeue(s)")
    return 0


if __name__ == "__main__":
    a = sys.argv[1:]
    sys.exit(main(a[0], int(a[1]), float(a[2]), int(a[3])))
