"""Data-parallel training on one node: one process per GPU (``torch.distributed``, NCCL), or per CPU process
with gloo where ``SKILLROUTER_TRAIN_PROCESSES`` asks for several (how the CPU test runs two).

Every process holds the whole model and the same global batch order; each runs the model on its contiguous
share of the batch's items (texts, or query-skill pairs) in cached mini-batches (:mod:`.grad_cache`), the
outputs of all shares are gathered so the loss is over the whole global batch — every rank's positives are
everyone's in-batch negatives, as SkillRet's ``gather_across_devices`` — and the parameter gradients, each
rank's share of that loss's gradient, are summed across processes. The steps are then identical everywhere;
rank 0 alone writes checkpoints (with every rank's RNG state, for exact resume) and the trained model, and
reports its steps to the stage's run, which the parent process holds (through a queue it drains while it waits).
"""
from __future__ import annotations

import os
import pickle
import socket
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import Tensor

from ..tracking import live

PROCESSES_ENV = "SKILLROUTER_TRAIN_PROCESSES"


def processes() -> int:
    """How many training processes this job runs: ``SKILLROUTER_TRAIN_PROCESSES``, else its visible GPUs."""
    if os.environ.get(PROCESSES_ENV):
        return max(1, int(os.environ[PROCESSES_ENV]))
    return max(1, torch.cuda.device_count()) if torch.cuda.is_available() else 1


def rank_world() -> tuple[int, int]:
    return (dist.get_rank(), dist.get_world_size()) if dist.is_available() and dist.is_initialized() else (0, 1)


def is_main() -> bool:
    return rank_world()[0] == 0


def share(n: int) -> slice:
    """This rank's contiguous share of ``n`` items (the first ``n % world`` ranks take one more)."""
    rank, world = rank_world()
    base, extra = divmod(n, world)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (rank < extra))


def gather(local: Tensor) -> Tensor:
    """Every rank's ``local`` rows, in rank order (shares may differ by one row)."""
    _, world = rank_world()
    if world == 1:
        return local
    sizes = [torch.zeros(1, dtype=torch.long, device=local.device) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([local.shape[0]], device=local.device))
    longest = int(max(s.item() for s in sizes))
    padded = torch.zeros((longest, *local.shape[1:]), dtype=local.dtype, device=local.device)
    padded[: local.shape[0]] = local
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    return torch.cat([p[: int(s.item())] for p, s in zip(parts, sizes)])


def sum_gradients(params: list[torch.nn.Parameter]) -> None:
    """Add up the ranks' gradients (a parameter a rank did not reach contributes zeros)."""
    if rank_world()[1] == 1:
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)


def gather_objects(obj: Any) -> list[Any]:
    _, world = rank_world()
    if world == 1:
        return [obj]
    out: list[Any] = [None] * world
    dist.all_gather_object(out, obj)
    return out


def barrier() -> None:
    if rank_world()[1] > 1:
        dist.barrier()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, fn: Callable[..., Any], args: tuple, result: str, steps: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    try:
        with live.reporting_to(live.QueueSink(steps) if steps is not None and rank == 0 else None):
            value = fn(*args)
        if rank == 0:
            Path(result).write_bytes(pickle.dumps(value))
    finally:
        dist.destroy_process_group()


def run(fn: Callable[..., Any], args: tuple, world: int) -> Any:
    """``fn(*args)`` in ``world`` processes (``world == 1``: in this one); rank 0's return value."""
    if world == 1:
        return fn(*args)
    import torch.multiprocessing as mp

    sink = live.current()
    steps = mp.get_context("spawn").Queue() if sink is not None else None
    with tempfile.TemporaryDirectory() as tmp:
        result = str(Path(tmp) / "result.pkl")
        workers = mp.spawn(_worker, args=(world, _free_port(), fn, args, result, steps), nprocs=world, join=False)
        while not workers.join(timeout=1.0):
            if steps is not None:
                live.drain(steps, sink)
        if steps is not None:
            live.drain(steps, sink)
        if not Path(result).exists():  # torch's spawn wrapper ends a process quietly on KeyboardInterrupt
            raise KeyboardInterrupt(f"data-parallel training interrupted ({world} processes); it resumes from its checkpoint")
        return pickle.loads(Path(result).read_bytes())
