"""Experiment ``sharded-checkpoint``: save on N ranks, load on M (chapter 09, part 2).

``torch.distributed.checkpoint`` (DCP) writes what each rank holds: under FSDP2 every rank saves
its own shards (parameters and Adam state), in parallel, one file per rank plus a ``.metadata``
file that says which slice of which tensor is where. Loading reads the metadata and fetches the
slices each rank of the *new* world needs: saved on N ranks, loaded on M (resharding), the
weights come back bit for bit (PyTorch docs, "Distributed Checkpoint"). Beside it, the classic
single file: the whole state gathered to rank 0 and written with ``torch.save``; every rank's
wait is then one rank's write, and a reload must fit the whole model in one process.

Chapter 07's requeue needs a checkpoint written before the job's time limit: the sharded one
writes 1/N of the state per rank, so its time shrinks with the ranks where a file system
writes in parallel (one local disk here: the ranks share it).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hpclab.config import Config, param
from hpclab.display import figure
from hpclab.dist import RankContext
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.sharding.wrappers import build, full_params
from hpclab.train import make_model, run_spec, train_step

SIDE = 28


@dataclass(frozen=True)
class CheckpointConfig(Config):
    save_ranks: int = param(2, min=1, max=16, help="ranks that save")
    load_ranks: int = param(3, min=1, max=16, help="ranks that load (a different world)")
    width: int = param(512, min=16, max=4096, log=True, quick=256, help="hidden width")
    depth: int = param(8, min=2, max=64, help="linear layers")
    steps: int = param(3, min=1, max=50, help="Adam steps before saving (fills its state)")


def _model(cfg: CheckpointConfig, seed: int) -> torch.nn.Module:
    return make_model("deep", SIDE * SIDE, seed=seed, depth=cfg.depth, width=cfg.width)


def _sharded(ctx: RankContext, cfg: CheckpointConfig, seed: int):
    return build("zero3", _model(cfg, seed), "adam", 1e-3, ctx.distributed)


def _state(net, opt) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(net, opt)
    return {"model": model_sd, "optim": optim_sd}


def load_sharded(net: torch.nn.Module, opt: Any, path: str) -> None:
    """Fill ``net`` and ``opt`` (sharded or not) from the DCP checkpoint at ``path``, whatever
    the number of ranks that saved it: the state dict to fill is this world's, allocated first."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    state = _state(net, opt)
    dcp.load(state, checkpoint_id=path)
    set_state_dict(net, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])


def full_adam(net: torch.nn.Module, opt: Any) -> torch.Tensor:
    """Adam's two moments of every parameter, whole, as one flat vector (a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    sd = get_optimizer_state_dict(net, opt, options=StateDictOptions(full_state_dict=True))
    parts = [
        sd["state"][key][name].reshape(-1).cpu()
        for key in sorted(sd["state"], key=str)
        for name in ("exp_avg", "exp_avg_sq")
    ]
    return torch.cat(parts)


def save_worker(ctx: RankContext, cfg: CheckpointConfig, where: str) -> dict[str, Any]:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    net, opt = _sharded(ctx, cfg, seed=0)
    gen = torch.Generator().manual_seed(ctx.rank)
    for _ in range(cfg.steps):
        x = torch.randn(16, SIDE * SIDE, generator=gen)
        train_step(net, opt, x, torch.randint(0, 10, (16,), generator=gen))
    ctx.barrier()
    t0 = time.perf_counter()
    dcp.save(_state(net, opt), checkpoint_id=f"{where}/sharded")
    ctx.barrier()
    sharded_s = time.perf_counter() - t0
    t0 = time.perf_counter()  # the single file: gathered to rank 0, one torch.save
    whole = get_state_dict(
        net, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    if ctx.rank == 0:  # the same content as the sharded one: weights and Adam's state
        torch.save({"model": whole[0], "optim": whole[1]}, f"{where}/single.pt")
    ctx.barrier()
    single_s = time.perf_counter() - t0
    params, adam = full_params(net), full_adam(net, opt)
    return {"sharded_s": sharded_s, "single_s": single_s, "params": params, "adam": adam}


def load_worker(
    ctx: RankContext, cfg: CheckpointConfig, where: str, load: Any = load_sharded
) -> dict[str, Any]:
    """A fresh sharded model and Adam on this world, then ``load(net, opt, path)``."""
    net, opt = _sharded(ctx, cfg, seed=1)  # other weights: the load must overwrite them all
    gen = torch.Generator().manual_seed(ctx.rank)
    x = torch.randn(16, SIDE * SIDE, generator=gen)
    train_step(net, opt, x, torch.randint(0, 10, (16,), generator=gen))  # Adam state exists
    ctx.barrier()
    t0 = time.perf_counter()
    load(net, opt, f"{where}/sharded")
    ctx.barrier()
    load_s = time.perf_counter() - t0
    return {"load_s": load_s, "params": full_params(net), "adam": full_adam(net, opt)}


def _bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def run_checkpoint(config: CheckpointConfig, progress: Progress) -> Result:
    where = Path(tempfile.mkdtemp(prefix="hpclab-dcp-"))  # 0700: private to this user
    try:
        saved = run_spec(config, config.save_ranks, worker=save_worker, args=(str(where),),
                         device="cpu", progress=progress)  # fmt: skip
        loaded = run_spec(config, config.load_ranks, worker=load_worker, args=(str(where),),
                          device="cpu", progress=progress)  # fmt: skip
        files = sorted(f.name for f in (where / "sharded").iterdir())
        sharded_bytes, single_bytes = _bytes(where / "sharded"), _bytes(where / "single.pt")
    finally:
        shutil.rmtree(where, ignore_errors=True)
    before, after = saved[0]["params"], loaded[0]["params"]
    common = {"tier": "live", "save_ranks": config.save_ranks, "load_ranks": config.load_ranks,
              "params": before.numel()}  # fmt: skip
    return make_result(
        "sharded-checkpoint",
        config,
        [
            {
                **common,
                "format": "sharded (DCP)",
                "bytes": sharded_bytes,
                "files": len(files),
                "save_s": max(s["sharded_s"] for s in saved),
                "load_s": max(lo["load_s"] for lo in loaded),
                "bit_equal": bool(torch.equal(before, after)),
                "adam_bit_equal": bool(torch.equal(saved[0]["adam"], loaded[0]["adam"])),
                "max_abs_diff": float((before - after).abs().max()),
                "file_names": files,
            },
            {
                **common,
                "format": "single file (rank 0)",
                "bytes": single_bytes,
                "files": 1,
                "save_s": max(s["single_s"] for s in saved),
            },
        ],
    )


@figure
def plot_checkpoint(result: Result):
    from plotly.subplots import make_subplots

    rows = result.records
    names = [r["format"] for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("MiB on disk", "seconds to save"))
    fig.add_bar(x=names, y=[r["bytes"] / 2**20 for r in rows], showlegend=False, row=1, col=1)
    fig.add_bar(x=names, y=[r["save_s"] for r in rows], showlegend=False, row=1, col=2)
    r0 = rows[0]
    same = "bit-equal" if r0["bit_equal"] else f"differ by {r0['max_abs_diff']:.2e}"
    adam = "Adam's state too" if r0.get("adam_bit_equal") else "Adam's state NOT"
    fig.update_layout(
        title=f"saved on {r0['save_ranks']} ranks, loaded on {r0['load_ranks']}: "
        f"weights {same}, {adam}",
        height=380,
    )
    return fig
