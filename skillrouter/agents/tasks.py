"""SkillsBench/Harbor task folders as data: ``<root>/<task_id>/`` with ``instruction.md``, ``task.toml``,
``environment/Dockerfile`` (whose ``COPY skills <dest>`` lines install ``environment/skills/`` for every agent),
``solution/solve.sh`` and the verifier ``tests/test.sh``.

Reading validates each task and says what is wrong in one line naming the task and its file. A task whose
verifier reads a skills folder itself (imports a skill's scripts, runs a copied skill) scores the injected
files rather than the agent: it is flagged, with the file and the path it reads, so the study can leave it
out. A task's fingerprint covers every file but its shipped skills, which each condition replaces."""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ..cache.store import tree_fingerprint
from ..data.types import DataError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

INSTRUCTION, CONFIG, DOCKERFILE, VERIFIER, SOLUTION = (
    "instruction.md", "task.toml", "environment/Dockerfile", "tests/test.sh", "solution/solve.sh")
SKILLS_DIR = "environment/skills"
# Harbor's defaults where task.toml is silent (harbor.models.task.config): what a plan's agent-hours assume.
DEFAULT_TIMEOUTS = {"agent": 600.0, "verifier": 600.0, "build": 600.0}
_COPY = re.compile(r"^\s*(?:COPY|ADD)\s+(.*?)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Task:
    """One validated task. ``skills_copies``: the Dockerfile's ``(source, destination)`` pairs whose source is
    the skills folder or a part of it; ``verifier_reads_skills``: why its score would depend on the injected
    files (None when it does not)."""

    id: str
    path: str
    fingerprint: str
    timeouts: dict[str, float]
    skills_copies: tuple[tuple[str, str], ...]
    verifier_reads_skills: str | None = None

    @property
    def destinations(self) -> list[str]:
        """Where the Dockerfile installs the whole skills folder (every agent's skills directory)."""
        return [dest for src, dest in self.skills_copies if _is_skills_root(src)]

    def to_json(self) -> dict:
        return {"id": self.id, "fingerprint": self.fingerprint, "timeouts": self.timeouts,
                "destinations": self.destinations, "verifier_reads_skills": self.verifier_reads_skills}


def _is_skills_root(src: str) -> bool:
    return src.strip("./") == "skills"


def _copy_pairs(line: str) -> list[tuple[str, str]]:
    """``(source, destination)`` of one ``COPY``/``ADD`` line, in shell or JSON form, flags (``--chown``) dropped."""
    m = _COPY.match(line)
    if not m:
        return []
    rest = m.group(1)
    if rest.startswith("["):
        try:
            args = [str(a) for a in json.loads(rest)]
        except json.JSONDecodeError:
            return []
    else:
        args = [a for a in rest.split() if not a.startswith("--")]
    return [(src, args[-1]) for src in args[:-1]] if len(args) >= 2 else []


def dockerfile_copies(text: str) -> list[tuple[str, str]]:
    """Every ``(source, destination)`` the Dockerfile copies in (comments and continuation lines joined)."""
    joined = re.sub(r"\\\n", " ", text)
    return [pair for line in joined.splitlines() if not line.lstrip().startswith("#") for pair in _copy_pairs(line)]


def _verifier_reads(task_dir: Path, copies: Iterable[tuple[str, str]]) -> str | None:
    """The first verifier file that names a path the skills are installed at (or the task's own skills folder)."""
    paths = sorted({dest.rstrip("/") for src, dest in copies if src.strip("./").startswith("skills")} | {SKILLS_DIR},
                   key=len, reverse=True)
    tests = task_dir / "tests"
    for f in sorted(p for p in tests.rglob("*") if p.is_file()):
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        hit = next((p for p in paths if p and p in text), None)
        if hit:
            return f"{f.relative_to(task_dir).as_posix()} reads {hit}"
    return None


def _timeouts(path: Path, config: dict) -> dict[str, float]:
    out = {}
    for name, (section, key) in {"agent": ("agent", "timeout_sec"), "verifier": ("verifier", "timeout_sec"),
                                 "build": ("environment", "build_timeout_sec")}.items():
        value = (config.get(section) or {}).get(key)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0):
            raise DataError(str(path), None, f"{section}.{key}", f"must be a positive number of seconds, got {value!r}")
        out[name] = float(value) if value is not None else DEFAULT_TIMEOUTS[name]
    return out


def read_task(task_dir: Path, task_id: str) -> Task:
    """One task folder, validated (:class:`DataError` naming the task's file on the first problem)."""
    for rel in (INSTRUCTION, CONFIG, DOCKERFILE, VERIFIER):
        if not (task_dir / rel).is_file():
            raise DataError(str(task_dir / rel), None, None,
                            f"task {task_id!r}: missing (a Harbor task needs {INSTRUCTION}, {CONFIG}, {DOCKERFILE} "
                            f"and its verifier {VERIFIER})")
    try:
        config = tomllib.loads((task_dir / CONFIG).read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise DataError(str(task_dir / CONFIG), None, None, f"task {task_id!r}: not valid TOML ({exc})") from None
    copies = dockerfile_copies((task_dir / DOCKERFILE).read_text(encoding="utf-8", errors="replace"))
    skills = tuple((s, d) for s, d in copies if s.strip("./").startswith("skills"))
    if not any(_is_skills_root(s) for s, _ in skills):
        said = ", ".join(f"{s} -> {d}" for s, d in copies) or "none"
        raise DataError(str(task_dir / DOCKERFILE), None, None,
                        f"task {task_id!r}: installs no skills folder (no 'COPY skills <dest>' line; its COPY lines: "
                        f"{said}), so no condition could give the agent its skills")
    return Task(task_id, str(task_dir), tree_fingerprint(task_dir, lambda rel: rel.as_posix().startswith(SKILLS_DIR + "/")),
                _timeouts(task_dir / CONFIG, config), skills, _verifier_reads(task_dir, skills))


def task_dirs(root: Path) -> list[Path]:
    """The task folders of a tree: the non-hidden folders directly under ``root``."""
    if not root.is_dir():
        raise DataError(str(root), None, None, "downstream.tasks_root: not a folder of Harbor task folders")
    dirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not dirs:
        raise DataError(str(root), None, None, "downstream.tasks_root: holds no task folder")
    return dirs


def read_tasks(root: str | Path, only: Iterable[str] | None = None) -> list[Task]:
    """Every task of the tree (or the ids in ``only``, each of which must exist), validated."""
    root = Path(root)
    dirs = {d.name: d for d in task_dirs(root)}
    wanted = list(only) if only else list(dirs)
    missing = [t for t in wanted if t not in dirs]
    if missing:
        raise DataError(str(root), None, "downstream.tasks", f"no task folder for {', '.join(map(repr, missing))}")
    return [read_task(dirs[t], t) for t in wanted]
