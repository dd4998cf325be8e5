"""The pool a server searches, as immutable snapshots: a query reads one snapshot from start to end, and an
update builds the next one aside and swaps a single reference, so a query sees the index before or after an
update, never a mix.

Two sources: a cell's own pool (the ``embed_pool`` cache entry, never re-embedded), or a SKILL.md folder that
is watched for changes (an agent's skills folder, a registry checkout). A folder's embeddings are kept in the
stage cache by the content hash of each skill's rendered text, so an edit re-embeds that skill alone and a
restarted server re-embeds nothing."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..data.loaders import parse_skill_md
from ..data.types import DataError, LoadReport, Skill

log = logging.getLogger(__name__)

Embed = Callable[[list[str]], np.ndarray]  # rendered skill texts -> unit-norm float32 rows


@dataclass(frozen=True)
class Snapshot:
    """One consistent state of the served pool."""

    ids: list[str]
    embeddings: np.ndarray  # (len(ids), dim) float32, unit-norm
    skills: dict[str, Skill]
    files: dict[str, Path] = field(default_factory=dict)  # id -> its SKILL.md, for pools read from a folder
    version: int = 0


class EmbeddingStore:
    """Embeddings by content hash, one ``.npz`` replaced atomically (a crash leaves the previous one)."""

    def __init__(self, folder: Path):
        self.path = folder / "embeddings.npz"

    def load(self) -> dict[str, np.ndarray]:
        if not self.path.is_file():
            return {}
        with np.load(self.path) as data:
            return dict(zip(data["hashes"].tolist(), data["embeddings"]))

    def save(self, rows: dict[str, np.ndarray]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{uuid.uuid4().hex}.npz")
        hashes = sorted(rows)
        np.savez(tmp, hashes=np.array(hashes, dtype=str),
                 embeddings=np.stack([rows[h] for h in hashes]) if hashes else np.zeros((0, 0), np.float32))
        os.replace(tmp, self.path)


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class FolderIndex:
    """A watched SKILL.md tree. ``refresh`` rescans (cheap when nothing changed: one ``stat`` per SKILL.md),
    parses with the project's loader (a file that fails to parse is reported once per version and skipped),
    embeds only skills whose rendered text is new, and swaps the snapshot."""

    def __init__(self, root: Path, embed: Embed, render: Callable[[Skill], str], store: EmbeddingStore,
                 max_field_chars: int = 200_000):
        self.root, self.embed, self.render, self.store = root.resolve(), embed, render, store
        self.max_field_chars = max_field_chars
        self.rows = store.load()
        self.embedded = 0  # skills embedded by this process (a restart on a kept store embeds none)
        self.errors: dict[str, str] = {}  # SKILL.md path -> why it was skipped
        self._signature: tuple = ()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.current = Snapshot([], np.zeros((0, 0), np.float32), {})
        if not self.root.is_dir():
            raise FileNotFoundError(f"--skills {root}: not a folder")
        self.refresh()

    def _scan(self) -> tuple:
        files = []
        for path in sorted(self.root.rglob("SKILL.md")):
            try:
                st = path.stat()
            except FileNotFoundError:  # removed while we walked
                continue
            files.append((str(path), st.st_mtime_ns, st.st_size))
        return tuple(files)

    def refresh(self) -> bool:
        """Bring the snapshot up to date with the folder; True if it changed."""
        with self._lock:
            signature = self._scan()
            if signature == self._signature:
                return False
            skills, files, errors = self._parse(signature)
            texts = {s.id: self.render(s) for s in skills}
            hashes = {i: content_hash(t) for i, t in texts.items()}
            new = sorted({h for h in hashes.values() if h not in self.rows})
            if new:
                by_hash = {hashes[i]: texts[i] for i in texts}
                emb = self.embed([by_hash[h] for h in new])
                self.rows.update(zip(new, emb.astype(np.float32)))
                self.embedded += len(new)
            kept = set(hashes.values())
            if new or len(kept) != len(self.rows):
                self.rows = {h: self.rows[h] for h in kept}
                self.store.save(self.rows)
            ids = [s.id for s in skills]
            matrix = np.stack([self.rows[hashes[i]] for i in ids]) if ids else np.zeros((0, 0), np.float32)
            self.current = Snapshot(ids, matrix, {s.id: s for s in skills}, files, self.current.version + 1)
            self._signature = signature
            self._report(errors)
            log.info("skills folder %s: %d skills (%d embedded now, %d skipped)", self.root, len(ids), len(new),
                     len(errors))
            return True

    def _parse(self, signature: tuple) -> tuple[list[Skill], dict[str, Path], dict[str, str]]:
        skills, files, errors, seen = [], {}, {}, set()
        for path_str, _, _ in signature:
            path = Path(path_str)
            try:
                skill = parse_skill_md(path, self.root, self.max_field_chars, LoadReport())
            except (DataError, OSError) as exc:
                errors[path_str] = str(exc)
                continue
            if skill.id in seen:
                errors[path_str] = f"{path}: duplicate skill id {skill.id!r}"
                continue
            seen.add(skill.id)
            skills.append(skill)
            files[skill.id] = path
        return skills, files, errors

    def _report(self, errors: dict[str, str]) -> None:
        for path, why in errors.items():
            if self.errors.get(path) != why:
                log.warning("skipping SKILL.md that does not parse: %s", why)
        self.errors = errors

    def watch(self, interval_s: float) -> threading.Thread:
        """Poll the folder every ``interval_s`` in a daemon thread. Polling, not inotify: it also sees changes
        on network filesystems (a registry checkout on a cluster's shared storage)."""
        def loop() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.refresh()
                except Exception:  # noqa: BLE001 - a bad update must not stop serving the last good snapshot
                    log.exception("skills folder refresh failed; serving the previous snapshot")

        thread = threading.Thread(target=loop, name="skills-watch", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()


def store_folder(cache_root: Path, identity: dict) -> Path:
    """Where a folder index's embeddings live: by everything that shapes a skill's vector (encoder, weights,
    rendering), so two cells with the same encoder share it."""
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root / "route_index" / digest
