"""The stage cache: each stage's artifact is keyed by exactly what it depends on, built once, shared.

* key = sha256(stage, stage version, a fingerprint of the source of the modules the stage runs,
  canonical JSON of the stage's config slice, the keys of its named input artifacts and the content
  fingerprints of the files it reads from outside the cache) (:func:`stage_key`): editing a stage's
  code invalidates its entries without anyone remembering to bump a version, and since no key hashes
  what a stage computes, every key of a grid is known before anything is built;
* ``<root>/<stage>/<key>/`` is built under a temporary name and published by ``rename``; it is
  complete only when its ``manifest.json`` exists (written last, before the rename), so an entry
  without one is treated as absent and rebuilt;
* a lock per key (``<key>.lock``, created with O_EXCL, so it also works on NFS/Lustre) lets one
  process build while the others wait; the holder refreshes the lock's mtime from a heartbeat
  thread, and a lock whose heartbeat stopped for ``stale_after`` seconds is taken over. A lock file
  carries its holder's token: a holder that was frozen past the timeout and wakes up never releases
  or refreshes a lock that is no longer its own, and never overwrites an entry published meanwhile;
* the manifest lists the size and sha256 of every file of the entry; reuse checks the sizes always
  and the hashes on first use after ``verify_after_days`` (and on ``cache verify``); an entry that
  fails is moved to ``<root>/.quarantine/`` (logged, counted in the run's ``metrics.json``) and rebuilt;
* a write that fails for lack of space or a file-size limit stops the stage with one line naming the
  stage and the path, and leaves no partial entry;
* ``SKILLROUTER_FAULT=<point>[@<stage>][:stop|:hog=MB]`` kills (or stops, or inflates) the process at a
  named publish step (``lock_acquired``, ``tmp_partial``, ``tmp_complete``): the fault-injection suite's hook.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import socket
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .. import __version__
from ..data.jsonl import atomic_write_json
from ..models import hardware
from .integrity import MANIFEST, WRITE_ERRNOS, StageWriteError, entry_problem, fault_point, file_sha256, file_table
from .locks import FileLock

log = logging.getLogger(__name__)


def stable_hash(obj: Any, n: int = 16) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str, ensure_ascii=False).encode()).hexdigest()[:n]


@functools.lru_cache(maxsize=4096)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    return file_sha256(path)


def files_fingerprint(paths: Sequence[str | Path]) -> str:
    """Content hash of input files, in order. A missing file hashes as missing (the load that follows
    names it). Digests are memoised per (path, size, mtime) so one process hashes a file once."""
    h = hashlib.sha256()
    for path in paths:
        try:
            st = os.stat(path)
            digest = _file_digest(str(path), st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            digest = "missing"
        h.update(f"{Path(path).name}\0{digest}\0".encode())
    return h.hexdigest()[:16]


def tree_fingerprint(root: str | Path, exclude: Callable[[Path], bool] = lambda rel: False) -> str:
    """Content hash of every file under ``root`` by relative path (a task folder, a SKILL.md folder), the
    files for which ``exclude(relative path)`` holds left out. Digests are memoised as in :func:`files_fingerprint`."""
    root = Path(root)
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root)
        if exclude(rel):
            continue
        st = path.stat()
        h.update(f"{rel.as_posix()}\0{_file_digest(str(path), st.st_size, st.st_mtime_ns)}\0".encode())
    return h.hexdigest()[:16]


@functools.cache
def _source_hash(module_file: str) -> str:
    """Read once per process, so a file edited while a grid runs cannot change the keys of code
    that is already loaded."""
    return hashlib.sha256(Path(module_file).read_bytes()).hexdigest()


def code_fingerprint(modules: Sequence[str]) -> str:
    """Hash of the package version and the source files of ``modules`` (dotted names). The files are found,
    not imported: planning a grid keys its training stages without loading torch. Once per process and set of
    modules, as the sources are read once (:func:`_source_hash`)."""
    return _code_fingerprint(tuple(modules))


@functools.lru_cache(maxsize=1024)
def _code_fingerprint(modules: tuple[str, ...]) -> str:
    h = hashlib.sha256(__version__.encode())
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin:
            raise ModuleNotFoundError(f"stage code {name!r}: no such module")
        h.update(_source_hash(spec.origin).encode())
    return h.hexdigest()[:12]


def stage_key(kind: str, version: int, code: str, params: Mapping[str, Any], inputs: Mapping[str, str]) -> str:
    """A stage's cache key from what defines its artifact: ``inputs`` maps each input's role to the
    key of the stage that makes it, or to the content fingerprint of a file read from outside the cache."""
    return stable_hash({"stage": kind, "version": version, "code": code, "params": params, "inputs": inputs})


@dataclass
class StageRecord:
    """What ``metrics.json["stages"]`` says about one stage of one run."""

    key: str
    cached: bool
    seconds: float
    path: str


Build = Callable[..., "dict[str, Any] | None"]  # build(tmp_dir) or, resumable, build(tmp_dir, work_dir)


class StageCache:
    """Get-or-build for stage artifacts under ``root``."""

    def __init__(self, root: str | Path, stale_after: float = 300.0, verify_after_days: float | None = 7.0):
        self.root, self.stale_after, self.verify_after_days = Path(root), stale_after, verify_after_days
        self.quarantined: list[dict[str, str]] = []

    def entry(self, stage: str, key: str) -> Path:
        return self.root / stage / key

    def work_dir(self, stage: str, key: str) -> Path:
        """Where a resumable build keeps its progress (checkpoints, a request log) until it publishes."""
        return self.root / stage / f"{key}.work"

    def is_complete(self, stage: str, key: str) -> bool:
        return (self.entry(stage, key) / MANIFEST).exists()

    def manifest(self, stage: str, key: str) -> dict[str, Any]:
        return json.loads((self.entry(stage, key) / MANIFEST).read_text())

    def _due_for_hashing(self, entry: Path) -> bool:
        if self.verify_after_days is None:
            return False
        marker = entry / ".verified"
        last = marker.stat().st_mtime if marker.exists() else 0.0
        return time.time() - last >= self.verify_after_days * 86400

    def check(self, stage: str, key: str, deep: bool | None = None) -> bool:
        """Whether a complete entry is intact; a damaged one is quarantined (and so reads as absent)."""
        entry = self.entry(stage, key)
        deep = self._due_for_hashing(entry) if deep is None else deep
        problem = entry_problem(entry, deep)
        if problem is None:
            if deep:
                (entry / ".verified").touch()
            return True
        self.quarantine(stage, key, problem)
        return False

    def quarantine(self, stage: str, key: str, problem: str) -> Path:
        """Move a damaged entry aside (never read again, kept for inspection) and log why."""
        target = self.root / ".quarantine" / stage / f"{key}-{int(time.time())}-{uuid.uuid4().hex[:6]}"
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(self.entry(stage, key), target)
        except FileNotFoundError:  # another process moved it first
            pass
        log.warning("stage %s %s quarantined to %s: %s", stage, key, target, problem)
        self.quarantined.append({"stage": stage, "key": key, "problem": problem, "moved_to": str(target)})
        return target

    def get_or_build(self, stage: str, key: str, build: Build, *, manifest: Mapping[str, Any] | None = None,
                     user: str | None = None, resumable: bool = False) -> StageRecord:
        """Return the artifact ``stage/key``, building it with ``build(tmp_dir)`` if absent.

        ``build`` writes its files into ``tmp_dir`` and may return extra manifest fields; ``manifest``
        holds what the key was made of (params, inputs), recorded beside them. ``resumable``: ``build``
        is called as ``build(tmp_dir, work_dir)`` and keeps its progress in ``work_dir``, so a killed
        build resumes; the folder goes once the artifact is published. ``user`` (a run directory) is
        appended to the entry's ``users.txt`` so the cache listing can say which runs use an entry.
        """
        final = self.entry(stage, key)
        start = time.perf_counter()
        cached = self.is_complete(stage, key) and self.check(stage, key)
        if not cached:
            final.parent.mkdir(parents=True, exist_ok=True)
            lock = FileLock(final.parent / f"{key}.lock", stale_after=self.stale_after)
            lock.acquire(on_wait=lambda: log.info("%s %s: another job is building it; waiting", stage, key))
            try:
                fault_point("lock_acquired", stage)
                cached = self.is_complete(stage, key) and self.check(stage, key, deep=False)  # built while we waited
                if not cached:
                    work = self.work_dir(stage, key)
                    run = (lambda out: build(out, work)) if resumable else build
                    cached = not self._build(stage, key, dict(manifest or {}), final, run)
                    if resumable:
                        shutil.rmtree(work, ignore_errors=True)
            finally:
                lock.release()
        seconds = time.perf_counter() - start
        if user:
            with open(final / "users.txt", "a", encoding="utf-8") as fh:
                fh.write(f"{user}\n")
        log.info("stage %-16s %s %s (%.1fs)", stage, key, "reused" if cached else "built", seconds)
        return StageRecord(key=key, cached=cached, seconds=round(seconds, 3), path=str(final))

    def _build(self, stage: str, key: str, fields: dict[str, Any], final: Path,
               build: Callable[[Path], dict[str, Any] | None]) -> bool:
        """Build into a temporary folder and publish it; False when another process published the same
        entry first (a lock taken over while this one was frozen): its copy wins, ours is discarded."""
        tmp = final.parent / f".tmp-{key}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True)
        try:
            t0 = time.perf_counter()
            extra = build(tmp) or {}
            fault_point("tmp_partial", stage)
            manifest = {"stage": stage, "key": key, **fields, "build_seconds": round(time.perf_counter() - t0, 3),
                        "created": time.time(), "host": socket.gethostname(), "hardware": hardware(), **extra,
                        "files": file_table(tmp)}
            atomic_write_json(tmp / MANIFEST, manifest)
            (tmp / ".verified").touch()  # its hashes were just computed: the next hashing is due after the age
            fault_point("tmp_complete", stage)
            return self._publish(tmp, final)
        except OSError as exc:
            if exc.errno in WRITE_ERRNOS:
                raise StageWriteError(exc.errno, f"stage {stage}: cannot write {exc.filename or tmp}: {exc.strerror}") from None
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    @staticmethod
    def _publish(tmp: Path, final: Path) -> bool:
        if (final / MANIFEST).exists():
            return False
        if final.exists():  # an incomplete leftover: moved aside, never merged into
            aside = final.parent / f".tmp-leftover-{final.name}-{uuid.uuid4().hex[:8]}"
            os.replace(final, aside)
            shutil.rmtree(aside, ignore_errors=True)
        try:
            os.rename(tmp, final)
        except OSError:
            if (final / MANIFEST).exists():
                return False
            raise
        return True

    def entries(self) -> list[dict[str, Any]]:
        """Every complete entry with its size and users, for ``python -m skillrouter.cache``. A damaged bookkeeping
        file (``users.txt`` with bytes that are not UTF-8, a manifest that does not parse) is the entry's
        ``problem``, one line, never an exception: the command goes on."""
        out = []
        for manifest in sorted(self.root.glob(f"*/*/{MANIFEST}")):
            entry = manifest.parent
            if entry.name.startswith(".") or entry.parent.name.startswith("."):
                continue  # a temporary build (perhaps of a killed job) or the quarantine: not an entry
            size = sum(p.stat().st_size for p in entry.rglob("*") if p.is_file())
            users, problem = _users(entry / "users.txt")
            try:
                created = json.loads(manifest.read_text(encoding="utf-8")).get("created")
            except (ValueError, AttributeError):  # not JSON, not UTF-8, not an object
                created, problem = None, f"{MANIFEST}: unreadable (`cache verify` quarantines the entry)"
            out.append({"stage": entry.parent.name, "key": entry.name, "bytes": size, "users": users,
                        "created": created, "problem": problem})
        return out


def _users(path: Path) -> tuple[list[str], str | None]:
    """The runs an entry's ``users.txt`` lists, and what is wrong with the file: lines that are not UTF-8 are left
    out and named (the runs that use the entry are then partly unknown)."""
    if not path.exists():
        return [], None
    raw = path.read_bytes()
    try:
        return sorted(set(raw.decode("utf-8").split())), None
    except UnicodeDecodeError as exc:
        lines = raw.decode("utf-8", errors="replace").split()
        return sorted({ln for ln in lines if "\ufffd" not in ln}), (
            f"users.txt: not UTF-8 at byte {exc.start}; the runs using this entry are partly unknown, so prune --unused keeps it")


def record_dict(rec: StageRecord) -> dict[str, Any]:
    return {k: v for k, v in asdict(rec).items() if k != "path"}


def prune(cache: StageCache, *, stage: str | None = None, older_than_days: float | None = None, unused: bool = False,
          everything: bool = False, dry_run: bool = False) -> list[dict[str, Any]]:
    """Remove entries matching every given criterion; also abandoned temporary builds. Returns what
    was (or, with ``dry_run``, would be) removed. Resumable training work (``*.work``) is kept unless
    ``everything``."""
    now = time.time()
    chosen = []
    for e in cache.entries():
        if stage and e["stage"] != stage:
            continue
        if older_than_days is not None and now - (e["created"] or now) < older_than_days * 86400:
            continue
        if unused and (e["problem"] or any(Path(u).exists() for u in e["users"])):
            continue
        if not (everything or older_than_days is not None or unused or stage):
            continue
        chosen.append(e)
    leftovers = [p for p in cache.root.glob("*/.tmp-*") if now - p.stat().st_mtime > 3600]
    if everything:
        leftovers += list(cache.root.glob("*/*.work"))
    if not dry_run:
        for e in chosen:
            shutil.rmtree(cache.entry(e["stage"], e["key"]), ignore_errors=True)
        for p in leftovers:
            shutil.rmtree(p, ignore_errors=True)
    return chosen + [{"stage": p.parent.name, "key": p.name, "bytes": 0, "users": []} for p in leftovers]
