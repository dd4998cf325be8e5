"""Prompt templates (``conf/synth/prompts/*.txt``, ``$placeholders``) and the data blocks that carry
skill text into them: each field in its own delimited block, so a skill's text stays data."""
from __future__ import annotations

from pathlib import Path
from string import Template

from ..data.types import Skill
from ..fields import as_data

PROMPTS_DIR = Path(__file__).resolve().parents[2] / "conf" / "synth" / "prompts"
BLOCKS = ("skill", "name", "description", "body")


def template(name: str, directory: str | Path | None = None) -> str:
    """The text of a template (part of each stage's cache key: editing a prompt regenerates)."""
    return (Path(directory) if directory else PROMPTS_DIR).joinpath(f"{name}.txt").read_text(encoding="utf-8")


def render(text: str, **values: str) -> str:
    return Template(text).substitute(**values)


def skill_blocks(skill: Skill, body_chars: int = 2500, label: str = "") -> str:
    """Name, description and body of a skill, each in its own data block (the structure's tags defused)."""
    attrs = {"of": label} if label else {}
    return "\n".join(as_data(tag, value, BLOCKS, **attrs) for tag, value in
                     (("name", skill.name), ("description", skill.description), ("body", skill.body[:body_chars])))
