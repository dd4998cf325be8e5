"""A build lock that works across processes and nodes on a shared filesystem: an exclusive-create lock
file with a heartbeat, taken over when its heartbeat stopped or its holder on this host is dead, and
carrying an owner token so a holder frozen past the timeout never releases or refreshes another's lock."""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class FileLock:
    """Exclusive lock file with a heartbeat and stale-lock takeover (safe on shared filesystems)."""

    def __init__(self, path: Path, stale_after: float = 300.0, poll: float = 0.5, heartbeat: float | None = None):
        self.path, self.stale_after, self.poll = path, stale_after, poll
        self.heartbeat = heartbeat if heartbeat is not None else min(30.0, stale_after / 4)
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _try_create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as fh:
            json.dump({"host": socket.gethostname(), "pid": os.getpid(), "time": time.time(), "token": self.token}, fh)
        return True

    def owned(self) -> bool:
        """The lock file is still this holder's (not taken over while it was frozen)."""
        try:
            return json.loads(self.path.read_text() or "{}").get("token") == self.token
        except (FileNotFoundError, json.JSONDecodeError):
            return False

    def _is_stale(self) -> bool:
        """No heartbeat for ``stale_after`` seconds, or a holder on this host that no longer runs
        (a killed or requeued job must not wait out the timeout on its own lock)."""
        try:
            if time.time() - self.path.stat().st_mtime > self.stale_after:
                return True
            holder = json.loads(self.path.read_text() or "{}")
        except (FileNotFoundError, json.JSONDecodeError):
            return False
        return holder.get("host") == socket.gethostname() and not _pid_alive(int(holder.get("pid", 0)))

    def acquire(self, on_wait: Callable[[], None] | None = None) -> None:
        waited = False
        while not self._try_create():
            if self._is_stale():
                log.warning("taking over stale lock %s", self.path)
                # rename first so two waiters cannot both delete a fresh lock
                aside = Path(f"{self.path}.stale-{uuid.uuid4().hex}")
                try:
                    os.replace(self.path, aside)
                    aside.unlink()
                except FileNotFoundError:
                    pass
                continue
            if not waited and on_wait:
                on_wait()
            waited = True
            time.sleep(self.poll)
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat):
            if not self.owned():
                return
            try:
                os.utime(self.path)
            except FileNotFoundError:
                return

    def release(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
        if self.owned():
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
