"""What a stage reports while it is built — a training step's loss, a synthesis stage's counters — without
knowing where it goes: the builder points the current context at the stage's W&B run (:mod:`.stage_runs`),
and with no run these calls do nothing.

A data-parallel training reports from its rank-0 process: :class:`QueueSink` carries the records to the
parent process, which holds the run (:func:`drain`)."""
from __future__ import annotations

import contextlib
import contextvars
import queue as queue_module
from typing import Any, Iterator, Protocol, Sequence


class Sink(Protocol):
    def log(self, values: dict[str, Any], step: int | None = None) -> None: ...

    def summary(self, values: dict[str, Any]) -> None: ...

    def table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None: ...


_sink: contextvars.ContextVar[Sink | None] = contextvars.ContextVar("stage_sink", default=None)


@contextlib.contextmanager
def reporting_to(sink: Sink | None) -> Iterator[None]:
    token = _sink.set(sink)
    try:
        yield
    finally:
        _sink.reset(token)


def current() -> Sink | None:
    return _sink.get()


def log_step(values: dict[str, Any], step: int) -> None:
    """One optimisation step's figures (``step`` counts from 1 and continues across a resume)."""
    if (sink := _sink.get()) is not None:
        sink.log(values, step)


def log_summary(values: dict[str, Any]) -> None:
    if (sink := _sink.get()) is not None:
        sink.summary(values)


def log_table(name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    if (sink := _sink.get()) is not None:
        sink.table(name, columns, rows)


class QueueSink:
    """A sink in another process: every call becomes a record on a multiprocessing queue."""

    def __init__(self, queue: Any):
        self.queue = queue

    def log(self, values: dict[str, Any], step: int | None = None) -> None:
        self.queue.put(("log", (values, step)))

    def summary(self, values: dict[str, Any]) -> None:
        self.queue.put(("summary", (values,)))

    def table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self.queue.put(("table", (name, list(columns), [list(r) for r in rows])))


def drain(queue: Any, sink: Sink) -> None:
    """Replay the records waiting on ``queue`` into ``sink``."""
    while True:
        try:
            method, args = queue.get_nowait()
        except queue_module.Empty:
            return
        getattr(sink, method)(*args)
