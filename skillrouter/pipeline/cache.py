"""The stage cache: each stage's artifact is keyed by exactly what it depends on, built once, shared.

* key = sha256(stage, stage version, a fingerprint of the source of the modules the stage runs,
  canonical JSON of the stage's config slice, the keys of its input artifacts): editing a stage's
  code invalidates its entries without anyone remembering to bump a version;
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
import inspect
import json
import logging
import os
import shutil
import socket
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Sequence

from .. import __version__
from ..data.jsonl import atomic_write_json
from .integrity import MANIFEST, WRITE_ERRNOS, StageWriteError, entry_problem, fault_point, file_sha256, file_table
from .locks import FileLock

log = logging.getLogger(__name__)


def stable_hash(obj: Any, n: int = 16) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str, ensure_ascii=False).encode()).hexdigest()[:n]


def texts_fingerprint(items: list[str]) -> str:
    """Content hash of an ordered list of strings (rendered pool, rendered queries...)."""
    h = hashlib.sha256()
    for item in items:
        h.update(item.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=4096)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    return file_sha256(path)


def files_fingerprint(paths: Sequence[str | Path]) -> str:
    """Content hash of input files, in order. A missing file hashes as missing (the load that follows
    names it). Digests are memoised per (path, size, mtime) so cells of one process hash a file once."""
    h = hashlib.sha256()
    for path in paths:
        try:
            st = os.stat(path)
            digest = _file_digest(str(path), st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            digest = "missing"
        h.update(f"{Path(path).name}\0{digest}\0".encode())
    return h.hexdigest()[:16]


@functools.cache
def _source_hash(module_file: str) -> str:
    """Read once per process, so a file edited while a grid runs cannot change the keys of code
    that is already loaded."""
    return hashlib.sha256(Path(module_file).read_bytes()).hexdigest()


def code_fingerprint(modules: Sequence[ModuleType]) -> str:
    """Hash of the package version and the source files of ``modules``."""
    h = hashlib.sha256(__version__.encode())
    for module in modules:
        h.update(_source_hash(inspect.getfile(module)).encode())
    return h.hexdigest()[:12]


@dataclass
class StageRecord:
    """What ``metrics.json["stages"]`` says about one stage of one run."""

    key: str
    cached: bool
    seconds: float
    path: str


class StageCache:
    """Get-or-build for stage artifacts under ``root``."""

    def __init__(self, root: str | Path, stale_after: float = 300.0, verify_after_days: float | None = 7.0):
        self.root, self.stale_after, self.verify_after_days = Path(root), stale_after, verify_after_days
        self.quarantined: list[dict[str, str]] = []

    def key(self, stage: str, version: int, params: dict[str, Any], inputs: list[str],
            code: Sequence[ModuleType] = ()) -> str:
        return stable_hash({"stage": stage, "version": version, "code": code_fingerprint(code), "params": params,
                            "inputs": sorted(inputs)})

    def entry(self, stage: str, key: str) -> Path:
        return self.root / stage / key

    def is_complete(self, stage: str, key: str) -> bool:
        return (self.entry(stage, key) / MANIFEST).exists()

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

    def get_or_build(self, stage: str, version: int, params: dict[str, Any], inputs: list[str],
                     build: Callable[[Path], dict[str, Any] | None], *, code: Sequence[ModuleType] = (),
                     user: str | None = None) -> StageRecord:
        """Return the artifact for these params/inputs, building it with ``build(tmp_dir)`` if absent.

        ``build`` writes its files into ``tmp_dir`` and may return extra manifest fields. ``code`` lists
        the modules whose source defines the artifact (part of the key). ``user``
        (a run directory) is appended to the entry's ``users.txt`` so the cache listing can say which
        runs use an entry.
        """
        key = self.key(stage, version, params, inputs, code)
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
                    cached = not self._build(stage, key, params, inputs, final, build)
            finally:
                lock.release()
        seconds = time.perf_counter() - start
        if user:
            with open(final / "users.txt", "a", encoding="utf-8") as fh:
                fh.write(f"{user}\n")
        log.info("stage %-16s %s %s (%.1fs)", stage, key, "reused" if cached else "built", seconds)
        return StageRecord(key=key, cached=cached, seconds=round(seconds, 3), path=str(final))

    def get_or_build_resumable(self, stage: str, params: dict[str, Any], inputs: list[str],
                               build: Callable[[Path, Path], dict[str, Any] | None], *, code: Sequence[ModuleType] = (),
                               user: str | None = None) -> StageRecord:
        """:meth:`get_or_build` for long builds that keep progress in ``<stage>/<key>.work/`` (training
        checkpoints, an LLM request log): a killed build resumes from it; it is removed on publication."""
        work = self.root / stage / f"{self.key(stage, 1, params, inputs, code)}.work"

        def run(out: Path) -> dict[str, Any] | None:
            extra = build(out, work)
            shutil.rmtree(work, ignore_errors=True)
            return extra

        return self.get_or_build(stage, 1, params, inputs, run, code=code, user=user)

    def _build(self, stage: str, key: str, params: dict, inputs: list[str], final: Path,
               build: Callable[[Path], dict[str, Any] | None]) -> bool:
        """Build into a temporary folder and publish it; False when another process published the same
        entry first (a lock taken over while this one was frozen): its copy wins, ours is discarded."""
        tmp = final.parent / f".tmp-{key}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True)
        try:
            t0 = time.perf_counter()
            extra = build(tmp) or {}
            fault_point("tmp_partial", stage)
            manifest = {"stage": stage, "key": key, "code": code_fingerprint(()), "params": params, "inputs": inputs,
                        "build_seconds": round(time.perf_counter() - t0, 3), "created": time.time(),
                        "host": socket.gethostname(), **extra, "files": file_table(tmp)}
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
        """Every complete entry with its size and users, for ``python -m skillrouter.cache``."""
        out = []
        for manifest in sorted(self.root.glob(f"*/*/{MANIFEST}")):
            entry = manifest.parent
            if entry.name.startswith(".") or entry.parent.name.startswith("."):
                continue  # a temporary build (perhaps of a killed job) or the quarantine: not an entry
            size = sum(p.stat().st_size for p in entry.rglob("*") if p.is_file())
            users_file = entry / "users.txt"
            users = sorted(set(users_file.read_text().split())) if users_file.exists() else []
            out.append({"stage": entry.parent.name, "key": entry.name, "bytes": size, "users": users,
                        "created": json.loads(manifest.read_text()).get("created")})
        return out


def record_dict(rec: StageRecord) -> dict[str, Any]:
    return {k: v for k, v in asdict(rec).items() if k != "path"}


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


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
        if unused and any(Path(u).exists() for u in e["users"]):
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


def main() -> None:
    """``python -m skillrouter.pipeline.cache [--cache-dir DIR] list|prune|verify ...``"""
    import argparse

    parser = argparse.ArgumentParser(description="Show or prune the stage cache.")
    parser.add_argument("--cache-dir", type=Path, default=Path(".cache/skillrouter"))
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="entries, sizes and the runs that use them")
    p = sub.add_parser("prune", help="remove entries matching all given criteria")
    p.add_argument("--stage")
    p.add_argument("--older-than", type=float, metavar="DAYS")
    p.add_argument("--unused", action="store_true", help="no run directory that used the entry still exists")
    p.add_argument("--all", action="store_true", help="everything, including resumable training work")
    p.add_argument("--dry-run", action="store_true")
    v = sub.add_parser("verify", help="hash every entry against its manifest; quarantine the damaged ones")
    v.add_argument("--stage")
    args = parser.parse_args()
    cache = StageCache(args.cache_dir)
    if args.command == "verify":
        entries = [e for e in cache.entries() if not args.stage or e["stage"] == args.stage]
        for e in entries:
            if not cache.check(e["stage"], e["key"], deep=True):
                bad = cache.quarantined[-1]
                print(f"quarantined {e['stage']}/{e['key']}: {bad['problem']} (moved to {bad['moved_to']}; rebuilt on next use)")
        print(f"verified {len(entries)} entries: {len(entries) - len(cache.quarantined)} intact, {len(cache.quarantined)} quarantined")
        return
    if args.command == "list":
        entries = cache.entries()
        for e in entries:
            users = f"{len(e['users'])} runs" + (f" (e.g. {e['users'][-1]})" if e["users"] else "")
            print(f"{e['stage']:<16} {e['key']}  {_human(e['bytes']):>9}  {users}")
        work = list(cache.root.glob("*/*.work"))
        print(f"{len(entries)} entries, {_human(sum(e['bytes'] for e in entries))}"
              + (f"; {len(work)} interrupted training run(s) resumable" if work else ""))
        return
    removed = prune(cache, stage=args.stage, older_than_days=args.older_than, unused=args.unused,
                    everything=args.all, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for e in removed:
        print(f"{verb} {e['stage']}/{e['key']}")
    print(f"{verb} {len(removed)} entries")


if __name__ == "__main__":
    main()
