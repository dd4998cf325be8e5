"""The records every stage exchanges: skills, queries, a loaded dataset, and data errors."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class DataError(ValueError):
    """A bad input record, located precisely enough for a user to fix it.

    Carries the file, the 1-based line (or record key) and the field so that the message reads
    ``pool.jsonl:17: field 'name': missing or empty`` instead of a traceback wall.
    """

    def __init__(self, path: str, where: int | str | None, field_name: str | None, message: str):
        message = " ".join(message.split())  # one line, whatever a parser's own message looked like
        self.path, self.where, self.field, self.reason = str(path), where, field_name, message
        loc = self.path if where is None else f"{self.path}:{where}"
        what = f" field '{field_name}':" if field_name else ""
        super().__init__(f"{loc}:{what} {message}")


@dataclass(frozen=True)
class Skill:
    """One SKILL.md: the routing target. ``extra`` keeps any other record fields (licence, tags...)."""

    id: str
    name: str
    description: str = ""
    body: str = ""
    category: str | None = None
    source: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Query:
    """One routing task.

    ``gt`` holds the ids metrics score against (the *core* ground truth under the SkillRouter
    protocol); ``all_gt`` keeps every labelled id, generic file-type skills included.
    ``grades`` maps skill id to a graded gain (R3 style); ``skip`` lists SKIP partners, skills an LLM
    rejected as companions under this query; ``tags`` carries task type, language direction, etc.
    """

    id: str
    text: str
    gt: tuple[str, ...]
    all_gt: tuple[str, ...] = ()
    grades: dict[str, float] = field(default_factory=dict, compare=False, hash=False)
    skip: tuple[str, ...] = ()
    tags: dict[str, str] = field(default_factory=dict, compare=False, hash=False)


@dataclass
class LoadReport:
    """Counted skips and truncations, so nothing is dropped silently."""

    skipped: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)

    def count(self, reason: str, example: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        self.examples.setdefault(reason, example)

    def merge(self, other: LoadReport) -> None:
        for reason, n in other.skipped.items():
            self.skipped[reason] = self.skipped.get(reason, 0) + n
            self.examples.setdefault(reason, other.examples[reason])


@dataclass
class Dataset:
    """A skill pool plus the labelled queries evaluated against it."""

    skills: list[Skill]
    queries: list[Query]
    report: LoadReport = field(default_factory=LoadReport)
    distractor_ids: frozenset[str] = frozenset()  # Hard-tier additions: evaluated against, never trained on

    def training_pool(self) -> list[Skill]:
        """The pool without Hard-tier distractors: what training mines from, whatever the tier."""
        return [s for s in self.skills if s.id not in self.distractor_ids]
