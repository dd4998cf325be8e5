"""What a condition injects into a task, and the SKILL.md folders it is written as.

Conditions: ``none`` (an empty skills folder), ``gold`` (the task's labelled skills), ``routed`` (the top-k of
a cell's final ranking). A skill is written from its pool record — YAML front matter ``name`` and
``description``, then the body — or, for a pool read from a SKILL.md tree, as a copy of its whole folder
(scripts, references, assets). Folder names are the skills' names where they are valid and unique; a name
that is not a valid folder name (the Agent Skills rule: lowercase letters, digits and hyphens, at most 64
characters) or that clashes is made so, and the front matter's ``name`` follows the folder (agents match the
two); every such change is recorded. A set's digest is the content of its folders: two routers that inject
the same files share their trials."""
from __future__ import annotations

import functools
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import yaml

from ..cache.store import tree_fingerprint
from ..data.types import Query, Skill
from ..rankings import Ranking

CONDITIONS = ("none", "gold", "routed")
_INVALID = re.compile(r"[^a-z0-9-]+")
MAX_NAME = 64


@dataclass(frozen=True)
class Placed:
    """A skill of a set and the folder it is written to; ``renamed``: why the folder is not the skill's name."""

    skill: Skill
    folder: str
    renamed: str | None = None

    def to_json(self) -> dict:
        return {"id": self.skill.id, "name": self.skill.name, "folder": self.folder,
                **({"renamed": self.renamed} if self.renamed else {})}


def condition_label(condition: str, k: int | None) -> str:
    """``none``, ``gold``, ``routed@10``: how tables and ``metrics.json`` name a condition."""
    return f"{condition}@{k}" if condition == "routed" else condition


def chosen_ids(condition: str, k: int | None, query: Query, ranking: Ranking | None) -> list[str]:
    """The skill ids a condition injects for one task."""
    if condition == "none":
        return []
    if condition == "gold":
        return list(query.all_gt or query.gt)
    if condition == "routed":
        if k is None or k < 1:
            raise ValueError("downstream.k must be a positive number of routed skills")
        return list(ranking.ids[:k]) if ranking else []
    raise ValueError(f"downstream.skills must be one of {', '.join(CONDITIONS)}, got {condition!r}")


def folder_name(name: str) -> str:
    """A valid skill folder name for ``name`` (lowercase, hyphens for anything else, at most 64 characters)."""
    return _INVALID.sub("-", name.lower()).strip("-")[:MAX_NAME].strip("-") or "skill"


def place(skills: Sequence[Skill]) -> list[Placed]:
    """Each skill with a unique, valid folder (see the module docstring), in order."""
    taken: set[str] = set()
    out = []
    for skill in skills:
        base = folder_name(skill.name or skill.id)
        folder, n = base, 1
        while folder in taken:
            n += 1
            folder = f"{base[:MAX_NAME - len(str(n)) - 1]}-{n}"
        taken.add(folder)
        reason = None if folder == skill.name else "clash" if base == skill.name else "invalid folder name"
        out.append(Placed(skill, folder, reason))
    return out


def skill_md(skill: Skill, name: str) -> str:
    """A SKILL.md from a pool record: front matter ``name`` and ``description``, then the body."""
    front = yaml.safe_dump({"name": name, "description": skill.description}, sort_keys=False, allow_unicode=True,
                           width=10**9)
    return f"---\n{front}---\n{skill.body}"


def write_set(dest: Path, placed: Sequence[Placed], pool_tree: Path | None = None) -> str:
    """Write a set's folders into ``dest`` (created, empty for ``none``); returns the set's content digest.
    ``pool_tree``: the pool's SKILL.md tree, whose folder of each skill (its id) is copied whole."""
    dest.mkdir(parents=True, exist_ok=True)
    for p in placed:
        target = dest / p.folder
        source = pool_tree / p.skill.id if pool_tree else None
        if source is not None and (source / "SKILL.md").is_file():
            shutil.copytree(source, target)
            if p.renamed:  # the front matter's name follows the folder
                (target / "SKILL.md").write_text(skill_md(p.skill, p.folder), encoding="utf-8")
        else:
            target.mkdir()
            (target / "SKILL.md").write_text(skill_md(p.skill, p.folder), encoding="utf-8")
    return tree_fingerprint(dest)


@functools.cache
def empty_digest() -> str:
    """The digest of the empty set (``none``): known before anything is built."""
    with tempfile.TemporaryDirectory() as empty:
        return tree_fingerprint(empty)
