"""Data-parallel training on one node: one process per GPU (``torch.distributed``, NCCL), or per CPU process
with gloo where ``SKILLROUTER_TRAIN_PROCESSES`` asks for several (how the CPU test runs two).

Every process holds the whole model and the same global batch order; each runs the model on its contiguous
share of the batch's items (texts, or query-skill pairs) in cached mini-batches (:mod:`.grad_cache`), the
outputs of all shares are gathered so the loss is over the whole global batch — every rank's positives are
everyone's in-batch negatives, as SkillRet's ``gather_across_devices`` — and the parameter gradients, each
rank's share of that loss's gradient, are summed across processes. The steps are then identical everywhere;
rank 0 alone writes checkpoints (with every rank's RNG state, for exact resume) and the trained model, and
reports its steps to the stage's run, which the parent process holds (through a queue it drains while it waits).

Several nodes: a stage job submitted with ``nodes`` / ``tasks_per_node`` (``resources.kinds.<kind>``) runs one
task per node (each spawning a process per local GPU) or one per GPU. The first task builds the stage as any
job does; when it reaches the training it hands the training function and its arguments (a pickle in a folder
every task of the job sees, :data:`HANDOFF_ENV`) to the other tasks, which run their ranks of it and nothing
else: the process group spans every task, the first task's rank 0 writes checkpoints and the model.
"""
from __future__ import annotations

import contextlib
import logging
import os
import pickle
import socket
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
from torch import Tensor

from .. import events

PROCESSES_ENV = "SKILLROUTER_TRAIN_PROCESSES"
HANDOFF_ENV = "SKILLROUTER_DDP_HANDOFF"  # set by a multi-task stage job: where its first task hands trainings over
DONE = "done"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobTasks:
    """This process's place among the tasks of its SLURM job (one task, outside a multi-task stage job)."""

    index: int = 0
    count: int = 1
    per_node: int = 1
    nodes: int = 1
    local_id: int = 0

    @classmethod
    def from_slurm(cls) -> JobTasks:
        env = os.environ

        def number(name: str) -> int:  # SLURM writes e.g. SLURM_TASKS_PER_NODE=2(x3)
            return int((env.get(name) or "1").split("(")[0].split(",")[0])

        return cls(index=int(env.get("SLURM_PROCID", 0)), count=number("SLURM_NTASKS"),
                   per_node=number("SLURM_NTASKS_PER_NODE") if env.get("SLURM_NTASKS_PER_NODE") else number("SLURM_TASKS_PER_NODE"),
                   nodes=number("SLURM_NNODES"), local_id=int(env.get("SLURM_LOCALID", 0)))

    @classmethod
    def current(cls) -> JobTasks:
        """The job's tasks inside a multi-task stage job (the one that set :data:`HANDOFF_ENV`), else one."""
        return cls.from_slurm() if os.environ.get(HANDOFF_ENV) else cls()

    def local_processes(self) -> int:
        """Processes this task spawns: one per visible GPU with one task per node, else one (a task per GPU)."""
        return processes() if self.per_node == 1 else 1


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
        s.bind(("", 0))
        return s.getsockname()[1]


def _worker(local_rank: int, offset: int, world: int, master: str, port: int, fn: Callable[..., Any], args: tuple,
            result: str | None, steps: Any, gpu: int | None) -> None:
    """Rank ``offset + local_rank`` of ``world``; global rank 0 writes ``fn``'s value to ``result``."""
    rank = offset + local_rank
    if rank == 0:  # a spawned process starts without logging; its progress lines go where the parent's do
        logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    os.environ.update(MASTER_ADDR=master, MASTER_PORT=str(port))
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local_rank if gpu is None else gpu)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    try:
        with events.forwarding(steps) if steps is not None and rank == 0 else contextlib.nullcontext():
            value = fn(*args)
        if rank == 0 and result is not None:
            Path(result).write_bytes(pickle.dumps(value))
    finally:
        dist.destroy_process_group()


def _spawn(fn: Callable[..., Any], args: tuple, local: int, offset: int, world: int, master: str, port: int,
           result: str | None, gpu: int | None = None) -> None:
    """``local`` processes, ranks ``offset``.. of ``world``; the stage's observers get rank 0's reports."""
    import torch.multiprocessing as mp

    steps = mp.get_context("spawn").Queue() if offset == 0 and events.reporting() else None
    workers = mp.spawn(_worker, args=(offset, world, master, port, fn, args, result, steps, gpu), nprocs=local, join=False)
    while not workers.join(timeout=1.0):
        if steps is not None:
            events.drain(steps)
    if steps is not None:
        events.drain(steps)


def run(fn: Callable[..., Any], args: tuple, world: int) -> Any:
    """``fn(*args)`` in ``world`` local processes (``world == 1``: in this one), or over every task of a
    multi-task stage job (the first task's call; see the module docstring); rank 0's return value."""
    tasks = JobTasks.current()
    if tasks.count == 1 and world == 1:
        return fn(*args)
    local = tasks.local_processes() if tasks.count > 1 else world
    total, port = tasks.count * local, _free_port()
    master = "127.0.0.1" if tasks.nodes == 1 else socket.gethostname()
    if tasks.count > 1:
        _hand_over(Path(os.environ[HANDOFF_ENV]), {"fn": fn, "args": args, "local": local, "world": total,
                                                   "master": master, "port": port})
        log.info("data-parallel training: %d ranks over %d tasks on %d node(s)", total, tasks.count, tasks.nodes)
    with tempfile.TemporaryDirectory() as tmp:
        result = str(Path(tmp) / "result.pkl")
        _spawn(fn, args, local, 0, total, master, port, result, gpu=tasks.local_id if tasks.per_node > 1 else None)
        if not Path(result).exists():  # torch's spawn wrapper ends a process quietly on KeyboardInterrupt
            raise KeyboardInterrupt(f"data-parallel training interrupted ({total} processes); it resumes from its checkpoint")
        return pickle.loads(Path(result).read_bytes())


def _hand_over(folder: Path, handoff: dict[str, Any]) -> None:
    """The next training of this job for the other tasks (numbered: a job may train more than once)."""
    folder.mkdir(parents=True, exist_ok=True)
    n = len(list(folder.glob("training-*.pkl")))
    tmp = folder / f".training-{n}.tmp"
    tmp.write_bytes(pickle.dumps(handoff))
    tmp.replace(folder / f"training-{n}.pkl")


def handoff_folder(root: str | Path) -> Path:
    """This job attempt's hand-over folder under ``root`` (shared by its tasks; a requeued attempt gets a new one)."""
    env = os.environ
    return Path(root) / ".ddp" / f"{env.get('SLURM_JOB_ID', 'local')}-{env.get('SLURM_RESTART_COUNT', '0')}"


@contextmanager
def leading(folder: Path) -> Iterator[None]:
    """Around the first task's work: trainings reached inside are handed over; at the end, whatever the
    outcome, the other tasks are told there is nothing more."""
    folder.mkdir(parents=True, exist_ok=True)
    os.environ[HANDOFF_ENV] = str(folder)
    try:
        yield
    finally:
        os.environ.pop(HANDOFF_ENV, None)
        (folder / DONE).touch()


def follow(folder: Path, poll_s: float = 1.0) -> int:
    """A task after the first: run this task's ranks of every training the first task hands over, until it
    says it is done; returns the number of trainings joined."""
    os.environ[HANDOFF_ENV] = str(folder)
    tasks, n = JobTasks.from_slurm(), 0
    while True:
        handoff = folder / f"training-{n}.pkl"
        if handoff.exists():
            h = pickle.loads(handoff.read_bytes())
            _spawn(h["fn"], h["args"], h["local"], tasks.index * h["local"], h["world"], h["master"], h["port"], None,
                   gpu=tasks.local_id if tasks.per_node > 1 else None)
            n += 1
        elif (folder / DONE).exists():
            return n
        else:
            time.sleep(poll_s)
