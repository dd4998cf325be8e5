"""What makes a published cache entry trustworthy: the manifest's per-file sizes and sha256, the
check of an entry against it, the one-line error of a write that ran out of room, and the
fault-injection hook the fault suite kills or freezes processes with at each publish step."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
NOT_CHECKSUMMED = (MANIFEST, "users.txt", ".verified")  # written after publication
FAULT_ENV = "SKILLROUTER_FAULT"
WRITE_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS)


class StageWriteError(OSError):
    """A stage could not write its artifact (disk full, file-size limit, read-only filesystem)."""

    def __str__(self) -> str:
        return self.strerror


def fault_point(name: str, stage: str) -> None:
    """The fault-injection hook: a no-op unless ``SKILLROUTER_FAULT`` (``point[@stage][:action]``)
    names this point (and this stage)."""
    where, _, action = os.environ.get(FAULT_ENV, "").partition(":")
    point, _, only = where.partition("@")
    if point != name or (only and only != stage):
        return
    if action.startswith("hog="):  # hold this much memory from here on (a cell over its --mem limit)
        fault_point.ballast = b"\x01" * (int(action[4:]) * 2**20)  # type: ignore[attr-defined]  # filled: resident
        return
    os.kill(os.getpid(), signal.SIGSTOP if action == "stop" else signal.SIGKILL)


def file_sha256(path: str | Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def file_table(entry: Path) -> dict[str, dict[str, Any]]:
    """``{relative path: {"size", "sha256"}}`` of an entry's files (what its manifest vouches for)."""
    out = {}
    for path in sorted(p for p in entry.rglob("*") if p.is_file()):
        rel = path.relative_to(entry).as_posix()
        if rel in NOT_CHECKSUMMED:
            continue
        out[rel] = {"size": path.stat().st_size, "sha256": file_sha256(path)}
    return out


def entry_problem(entry: Path, deep: bool) -> str | None:
    """Why an entry cannot be trusted (sizes always, hashes when ``deep``), or None."""
    try:
        files = json.loads((entry / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return "manifest unreadable or without checksums"
    for rel, want in files.items():
        path = entry / rel
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return f"{rel}: missing"
        if size != want["size"]:
            return f"{rel}: {size} bytes, manifest says {want['size']}"
        if deep and file_sha256(path) != want["sha256"]:
            return f"{rel}: content differs from its manifest checksum"
    return None
