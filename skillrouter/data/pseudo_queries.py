"""Pseudo-queries from the pool: training signal every pool has, with no LLM and no labels.

A skill's description, or the first lines of prose of its body, is a query whose positive is that skill (the
reranker's pre-training before the labelled pairs, ``reranker.pretrain``). A text that several skills share (a
family's one description) names none of them and is left out, as is any skill a benchmark query labels: as with the
training pairs (:func:`skillrouter.data.pairs.load_pairs`), no evaluated skill is ever a training target.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Sequence

from .pairs import TrainExample
from .types import Skill

SOURCES = ("description", "body")
SKIPPED_PREFIXES = ("#", "```", "---", "|", "<", "![", "- [")  # headings, fences, rules, tables, markup, checklists


def body_lead(body: str, lines: int, max_chars: int) -> str:
    """The body's first ``lines`` lines of prose (no headings, fences, tables or markup), joined, cut at ``max_chars``
    characters (at a word)."""
    kept: list[str] = []
    fenced = False
    for raw in body.splitlines():
        line = raw.strip()
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced or not line or line.startswith(SKIPPED_PREFIXES):
            continue
        kept.append(line.lstrip("-*0123456789. ").strip())
        if len(kept) == lines:
            break
    text = " ".join(k for k in kept if k)
    return text if len(text) <= max_chars else text[:max_chars].rsplit(" ", 1)[0]


def pseudo_queries(skills: Sequence[Skill], excluded: Iterable[str] = (), sources: Sequence[str] = SOURCES,
                   body_lines: int = 2, max_chars: int = 300) -> list[TrainExample]:
    """One example per skill and source (see the module docstring); ``excluded``: skill ids never made positives."""
    unknown = [s for s in sources if s not in SOURCES]
    if unknown:
        raise ValueError(f"pseudo-query sources must be among {', '.join(SOURCES)}, got {unknown}")
    banned = set(excluded)
    texts: dict[str, dict[str, str]] = {source: {} for source in sources}
    for skill in skills:
        if skill.id in banned:
            continue
        for source in sources:
            text = (skill.description or "").strip() if source == "description" else body_lead(skill.body or "", body_lines,
                                                                                                max_chars)
            if len(text.split()) >= 3:  # a word or two names nothing
                texts[source][skill.id] = text[:max_chars]
    owners: dict[str, set[str]] = defaultdict(set)
    for per_source in texts.values():
        for sid, text in per_source.items():
            owners[text].add(sid)
    return [TrainExample(text, (sid,)) for per_source in texts.values() for sid, text in per_source.items()
            if len(owners[text]) == 1]
