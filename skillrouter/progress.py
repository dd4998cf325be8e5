"""Progress of long stages, readable wherever it lands.

On a terminal: a tqdm bar. Off a terminal (a SLURM job's output file, a CI log), a bar is one endless
carriage-return line, so instead one log line per stage at an interval — items done, rate, ETA — and
a last line when it ends; nothing per batch. Third-party bars (transformers' weight loading, the
Hugging Face hub) are switched off there too. ``SKILLROUTER_PROGRESS_INTERVAL`` sets the interval
(seconds, default 30); the ``progress`` config key switches both off.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import sys
import time
from typing import Any, Iterator

log = logging.getLogger("skillrouter.progress")
INTERVAL_ENV = "SKILLROUTER_PROGRESS_INTERVAL"
_stage: contextvars.ContextVar[str] = contextvars.ContextVar("stage", default="")


def on_terminal() -> bool:
    return sys.stderr.isatty()


@contextlib.contextmanager
def stage_label(label: str) -> Iterator[None]:
    """Name the stage whose work the progress lines inside this block report (``retrieve 1a2b3c4d``)."""
    token = _stage.set(label)
    try:
        yield
    finally:
        _stage.reset(token)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class LineProgress:
    """A progress bar for log files: at most one line per ``interval`` seconds, and one at the end."""

    def __init__(self, total: int | None, desc: str, unit: str, interval: float, initial: int = 0):
        self.total, self.desc, self.unit, self.interval = total, desc, unit, interval
        self.n = self.start_n = initial
        self.t0 = self.last = time.monotonic()
        self.postfix: dict[str, Any] = {}
        self.closed = False

    def _line(self, final: bool) -> str:
        elapsed = time.monotonic() - self.t0
        done_here = self.n - self.start_n
        rate = done_here / elapsed if elapsed > 0 else 0.0
        speed = f"{_duration(elapsed / done_here)} each" if done_here and elapsed / done_here >= 10 else f"{rate:.1f}/s"
        label = f"{_stage.get()}: " if _stage.get() else ""
        done = f"{self.n}/{self.total}" if self.total is not None else str(self.n)
        extra = "".join(f", {k}={v}" for k, v in self.postfix.items())
        if final:
            return f"{label}{self.desc}: done, {done} {self.unit} in {_duration(elapsed)} ({speed}{extra})"
        eta = f", ETA {_duration((self.total - self.n) / rate)}" if self.total is not None and rate > 0 else ""
        return f"{label}{self.desc}: {done} {self.unit} ({speed}{eta}{extra})"

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= self.interval and (self.total is None or self.n < self.total):
            self.last = now
            log.info(self._line(final=False))

    def set_postfix(self, **values: Any) -> None:
        self.postfix = values

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            log.info(self._line(final=True))

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Silent:
    def update(self, n: int = 1) -> None: ...

    def set_postfix(self, **values: Any) -> None: ...

    def close(self) -> None: ...

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: object) -> None: ...


def progress(total: int | None, desc: str, unit: str = "it", enabled: bool = True, initial: int = 0):
    """A bar with ``update(n)``, ``set_postfix(**kw)`` and ``close()``: tqdm on a terminal, log lines
    off one, nothing when ``enabled`` is false."""
    if not enabled:
        return _Silent()
    if on_terminal():
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, unit=unit, initial=initial, leave=False)
    return LineProgress(total, desc, unit, float(os.environ.get(INTERVAL_ENV, "30")), initial)


def quiet_library_bars() -> None:
    """Off a terminal, switch off the bars libraries draw on their own (weight loading, downloads)."""
    if on_terminal():
        return
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
