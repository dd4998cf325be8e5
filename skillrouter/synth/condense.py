"""Query condensation: a long task instruction rewritten into a short query before it is retrieved or reranked with.

SkillsBench instructions run to a median of 1,356 characters; a cross-encoder's 256-token window then keeps about 127
tokens of the skill. Methods (the ``query`` group):

* ``raw``: the instruction as it is (the default);
* ``head``: its first ``words`` words;
* ``keywords``: YAKE's top ``top`` key phrases (up to ``max_ngram`` words each), in the order they appear. YAKE, not
  KeyBERT: it reads only the instruction (statistical, no model), so the condensed query does not depend on the
  encoder being evaluated (KeyBERT ranks phrases by that encoder's own embeddings: the query would be tuned to it),
  it is deterministic and takes milliseconds per instruction on a CPU;
* ``llm``: the ``llm`` group's model rewrites it with the prompt in ``conf/query/prompts/condense.txt``.

A query that comes back empty, or whose LLM request fails, falls back to the raw instruction, and is counted.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..fields import as_data
from .client import LLMClient, Request
from .prompts import render

METHODS = ("raw", "head", "keywords", "llm")
PROMPTS_DIR = Path(__file__).resolve().parents[2] / "conf" / "query" / "prompts"
SCHEMA = {"type": "object", "properties": {"query": {"type": "string", "minLength": 1, "x-min-words": 4,
                                                     "x-max-words": 20}},
          "required": ["query"], "additionalProperties": False}


@dataclass(frozen=True)
class Condensed:
    """One instruction's condensed query, and whether it fell back to the raw instruction (and why)."""

    text: str
    fallback: str | None = None


def template(prompt: str) -> str:
    """``query.prompt``: a template's name in ``conf/query/prompts`` or a path to one (its text keys the stage)."""
    path = Path(prompt).expanduser()
    return (path if path.suffix and path.exists() else PROMPTS_DIR / f"{prompt}.txt").read_text(encoding="utf-8")


def head(text: str, words: int) -> str:
    return " ".join(text.split()[:words])


def keywords(texts: Sequence[str], top: int, max_ngram: int) -> list[str]:
    """Each text's words that make up its ``top`` YAKE key phrases, once each, in the order the text has them."""
    import yake

    extractor = yake.KeywordExtractor(lan="en", n=max_ngram, top=top)
    out = []
    for text in texts:
        chosen = {w.lower() for phrase, _ in extractor.extract_keywords(text) for w in phrase.split()}
        words = (w.strip(".,;:!?()[]\"'") for w in text.split())
        out.append(" ".join(dict.fromkeys(w for w in words if w.lower() in chosen)))
    return out


def clean(text: str | None) -> str:
    return re.sub(r"\s+", " ", text or "").strip()


def with_llm(client: LLMClient, texts: Sequence[str], template: str, max_words: int) -> list[str | None]:
    """Each text rewritten by the client's model (None where its request failed), ``concurrency`` at a time."""
    def ask(item: tuple[int, str]) -> str | None:
        n, text = item
        prompt = render(template, task=as_data("task", text, ("task",)), max_words=str(max_words))
        answer = client.ask(Request("condensed_query", ({"role": "user", "content": prompt},), SCHEMA, tag=str(n)))
        return None if answer is None else str(answer["query"])

    return client.map(ask, list(enumerate(texts)))


def condense(texts: Sequence[str], method: str, params: Mapping[str, Any], client: LLMClient | None = None,
             template: str | None = None) -> list[Condensed]:
    """``texts`` condensed by ``method`` (see the module docstring), each falling back to itself where the method
    gives nothing (``empty``) or its LLM request failed (``failed``)."""
    if method not in METHODS:
        raise ValueError(f"query.method must be one of {', '.join(METHODS)}, got {method!r}")
    if method == "raw":
        return [Condensed(t) for t in texts]
    if method == "head":
        made: list[str | None] = [head(t, int(params["words"])) for t in texts]
    elif method == "keywords":
        made = list(keywords(texts, int(params["top"]), int(params["max_ngram"])))
    else:
        if client is None or template is None:
            raise ValueError("query.method=llm needs the llm group's client and the prompt template")
        made = with_llm(client, texts, template, int(params["max_words"]))
    return [Condensed(t, "failed") if m is None else Condensed(clean(m)) if clean(m) else Condensed(t, "empty")
            for t, m in zip(texts, made)]
