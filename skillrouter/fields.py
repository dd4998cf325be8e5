"""Render skills and queries into the exact text each stage reads.

``nd`` = name + description (what progressive-disclosure agents see), ``all`` = name | description |
body (the SkillRouter finding: the body is the routing signal), ``oracle_nd`` = name + a replacement
description for the skills an oracle file covers. Caps are per stage because the encoder and the
reranker see different budgets (paper defaults: encoder 300/2,500, reranker 500/2,000, query 1,500).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .data.types import Skill

FIELD_MODES = ("nd", "all", "oracle_nd")
SEPARATOR = " | "


@dataclass(frozen=True)
class Caps:
    description: int
    body: int


def render_skill(skill: Skill, mode: str, caps: Caps, oracle: Mapping[str, str] | None = None) -> str:
    if mode not in FIELD_MODES:
        raise ValueError(f"fields.mode must be one of {FIELD_MODES}, got {mode!r}")
    description = skill.description
    if mode == "oracle_nd":
        if oracle is None:
            raise ValueError("fields=oracle_nd needs data.oracle_nd (a JSONL of {id, description})")
        description = oracle.get(skill.id, description)
    parts = [skill.name, description[: caps.description]]
    if mode == "all":
        parts.append(skill.body[: caps.body])
    return SEPARATOR.join(p.strip() for p in parts if p and p.strip())


def render_query(text: str, cap: int, instruction: str = "") -> str:
    """``instruction`` is the encoder's query prefix, e.g. Qwen3's ``Instruct: ...\\nQuery: ``."""
    return f"{instruction}{text.strip()[:cap]}"


def render_pool(skills: list[Skill], mode: str, caps: Caps, oracle: Mapping[str, str] | None = None) -> list[str]:
    return [render_skill(s, mode, caps, oracle) for s in skills]
