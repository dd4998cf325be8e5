"""Render skills and queries into the exact text each stage reads.

Field modes: ``nd`` = name + description (what progressive-disclosure agents see), ``all`` =
name | description | body (the SkillRouter finding: the body is the routing signal), ``oracle_nd`` =
name + a replacement description for the skills an oracle file covers. Caps are per stage because
the encoder and the reranker see different budgets (paper defaults: encoder 300/2,500, reranker
500/2,000, query 1,500).

Text styles, so a released checkpoint reads what its evaluator fed it, character for character:

* ``joined`` (ours): parts stripped, capped, empty parts dropped, joined by `` | ``; queries stripped;
* ``skillrouter``: ``f"{name} | {description[:d]} | {body[:b]}"`` as the SkillRouter release
  writes it (always every part, nothing stripped); queries cut, not stripped;
* ``release``: the release's own text verbatim, as its reader stored it (``extra["text"]``: R3-Skill's
  ``text`` field, SkillRet's ``name | description | skill_md``, SRA-Bench's ``name\ndescription\ncontent``);
  their models truncate by tokens, not characters. A skill without one gets ``name | description | body``.

Reranker documents (``prompt_format``): ``qwen3`` (Qwen3-Reranker's own ``<Document>:`` prompt, built
in :mod:`skillrouter.rerank.scorers`), the SkillRouter release's ``flat-full`` / ``flat-nd`` /
``struct`` blocks, ``r3`` (the text of :func:`render_skill` in ``release`` style) and ``skillret``
(``<Document>: `` + that text, SkillRet's ``_format_pair``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from .data.types import Skill

FIELD_MODES = ("nd", "all", "oracle_nd")
TEXT_STYLES = ("joined", "skillrouter", "release")
PROMPT_FORMATS = ("qwen3", "flat-full", "flat-nd", "struct", "r3", "skillret")
SEPARATOR = " | "


@dataclass(frozen=True)
class Caps:
    """Characters kept per field; ``None`` keeps everything."""

    description: int | None
    body: int | None


def _cap(text: str, n: int | None) -> str:
    return text if n is None else text[:n]


def _description(skill: Skill, mode: str, oracle: Mapping[str, str] | None) -> str:
    if mode not in FIELD_MODES:
        raise ValueError(f"fields.mode must be one of {FIELD_MODES}, got {mode!r}")
    if mode != "oracle_nd":
        return skill.description
    if oracle is None:
        raise ValueError("fields=oracle_nd needs data.oracle_nd (a JSONL of {id, description})")
    return oracle.get(skill.id, skill.description)


def render_skill(skill: Skill, mode: str, caps: Caps, oracle: Mapping[str, str] | None = None,
                 style: str = "joined") -> str:
    description = _description(skill, mode, oracle)
    if style == "release" and mode == "all" and isinstance(skill.extra.get("text"), str):
        return skill.extra["text"]
    parts = [skill.name, description] + ([skill.body] if mode == "all" else [])
    if style == "joined":
        capped = [parts[0], _cap(parts[1].strip(), caps.description)] + [_cap(p, caps.body) for p in parts[2:]]
        return SEPARATOR.join(p.strip() for p in capped if p.strip())
    if style in ("skillrouter", "release"):
        limits = (None, caps.description, caps.body) if style == "skillrouter" else (None, None, None)
        return SEPARATOR.join(_cap(p, c) for p, c in zip(parts, limits))
    raise ValueError(f"text style must be one of {TEXT_STYLES}, got {style!r}")


def render_reranker_document(skill: Skill, prompt_format: str, mode: str, caps: Caps,
                             oracle: Mapping[str, str] | None = None, style: str = "joined") -> str:
    """The document part of a reranker prompt (SkillRouter's ``format_rerank_prompt`` blocks); ``style``:
    the ``qwen3`` document's text style."""
    if prompt_format == "qwen3":
        return render_skill(skill, mode, caps, oracle, style)
    if prompt_format in ("flat-full", "flat-nd"):
        flat_mode = "nd" if prompt_format == "flat-nd" and mode == "all" else mode
        return "<Document>: " + render_skill(skill, flat_mode, caps, oracle, style="skillrouter")
    if prompt_format == "struct":
        return (f"<Skill>:\n<Name>: {skill.name}\n<Description>: {_cap(_description(skill, mode, oracle), caps.description)}\n"
                f"<Body>: {_cap(skill.body, caps.body) if mode == 'all' else ''}")
    if prompt_format == "r3":
        return render_skill(skill, mode, caps, oracle, style="release")
    if prompt_format == "skillret":
        return "<Document>: " + render_skill(skill, mode, caps, oracle, style="release")
    raise ValueError(f"reranker.prompt_format must be one of {PROMPT_FORMATS}, got {prompt_format!r}")


def render_query(text: str, cap: int | None, instruction: str = "", style: str = "joined") -> str:
    """``instruction`` is the encoder's query prefix, e.g. Qwen3's ``Instruct: ...\\nQuery: ``. Our own
    style strips the text; the release styles keep it as written (their evaluators do)."""
    return f"{instruction}{_cap(text.strip() if style == 'joined' else text, cap)}"


@dataclass(frozen=True)
class TextSpec:
    """How one stage renders skills and queries: field mode, style, caps and query prefix."""

    mode: str
    style: str = "joined"
    caps: Caps = Caps(None, None)
    query_cap: int | None = None
    query_instruction: str = ""
    prompt_format: str | None = None  # rerankers only

    @classmethod
    def from_dict(cls, d: Mapping) -> TextSpec:
        """The inverse of ``dataclasses.asdict``: how a stage's params carry its rendering."""
        return cls(**{**d, "caps": Caps(**d["caps"])})

    def skill(self, skill: Skill, oracle: Mapping[str, str] | None = None) -> str:
        if self.prompt_format is not None:
            return render_reranker_document(skill, self.prompt_format, self.mode, self.caps, oracle, self.style)
        return render_skill(skill, self.mode, self.caps, oracle, self.style)

    def query(self, text: str) -> str:
        return render_query(text, self.query_cap, self.query_instruction, self.style)


def render_pool(skills: list[Skill], mode: str, caps: Caps, oracle: Mapping[str, str] | None = None) -> list[str]:
    return [render_skill(s, mode, caps, oracle) for s in skills]


def as_data(tag: str, text: str, reserved: tuple[str, ...] = (), **attrs: str) -> str:
    """``text`` wrapped in ``<tag ...>`` / ``</tag>`` for an LLM prompt, with every tag of the prompt's
    own structure inside it (``tag`` and ``reserved``) defused (``<`` -> ``&lt;``), so text from a
    crawled skill can neither close its block nor forge another one: whatever it says stays data."""
    names = "|".join(re.escape(t) for t in (tag, *reserved))
    defused = re.sub(rf"<(\s*/?\s*(?:{names})\b)", r"&lt;\1", text, flags=re.IGNORECASE)
    opening = " ".join([tag, *(f'{k}="{v}"' for k, v in attrs.items())])
    return f"<{opening}>\n{defused}\n</{tag}>"
