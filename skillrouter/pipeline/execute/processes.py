"""Worker processes for the local executor (``hydra.launcher.processes=true``): each stage is built in one of
``workers`` spawned processes, each on its share of the cores.

Why processes: two reranker trainings side by side on 2 cores, one thread each, take 227 s where one after the
other on both threads take 265 s (1.16x; the grid 1.15x: ``reports/perf/stage_processes.md``). Two trainings in
two threads of one process gain nothing (0.98x per step, measured once on 2026-12-05: they share one intra-op
pool, sized per process).
The stage and its builder travel as submitit sends them to a SLURM job (cloudpickle), with this process's environment
as it is at submit time: a worker outlives what the grid sets up after it started (the LLM server of a grid's first
generation stage publishes its URL in ``SKILLROUTER_LLM_URL``), and a stage must see what it would see in a thread. What
the stage's code logs goes where this process's ``skillrouter`` logger writes (the console, a grid's ``stages.log``)."""
from __future__ import annotations

import logging
import multiprocessing
import os
import sys
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, Callable

from ...models import available_cores, use_threads

LOGGER = "skillrouter"


def _start_worker(log_files: list[str], level: int, formatter: logging.Formatter | None) -> None:
    """A worker's first act: the parent's log destinations opened again (a file handler appends whole lines, as
    SLURM jobs share a journal)."""
    logger = logging.getLogger(LOGGER)
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stdout), *(logging.FileHandler(f) for f in log_files)]
    for h in handlers:
        h.setFormatter(formatter)
        logger.addHandler(h)
    logger.setLevel(level)
    logger.propagate = False


def _call(payload: bytes, threads: int, environ: dict[str, str]) -> Any:
    """Run one pickled call on ``threads`` torch threads, in the submitting process's ``environ``."""
    import cloudpickle

    for name in set(os.environ) - set(environ):
        del os.environ[name]
    os.environ.update(environ)
    use_threads(threads)
    fn, args = cloudpickle.loads(payload)
    return fn(*args)


class StageProcesses:
    """A pool of ``workers`` spawned processes with a thread pool's ``submit``: ``fn`` and its arguments are
    cloudpickled, its result comes back pickled. A call ``sharing`` the cores with others started beside it gets
    ``available_cores() // sharing`` threads (at least one): a stage that starts alone, such as the encoder training
    the rerankers wait for, keeps every core. The price: a stage's thread count, so its float sums, depends on what
    runs beside it when it starts."""

    def __init__(self, workers: int):
        self.cores = available_cores()
        logger = logging.getLogger(LOGGER)
        files = [h.baseFilename for h in logger.handlers if isinstance(h, logging.FileHandler)]
        formatter = next((h.formatter for h in logger.handlers if h.formatter), None)
        self.pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
                                        initargs=(files, logger.getEffectiveLevel(), formatter))

    def submit(self, fn: Callable[..., Any], *args: Any, sharing: int = 1) -> Future:
        import cloudpickle

        return self.pool.submit(_call, cloudpickle.dumps((fn, args)), max(1, self.cores // max(1, sharing)),
                                dict(os.environ))

    def __enter__(self) -> StageProcesses:
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
