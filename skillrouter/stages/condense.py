"""The query-condensation stage (the ``query`` group): every query of a dataset rewritten short, written as a dataset
of its own (the same skills, the condensed queries) that the retrieve or rerank stages read in place of the original,
so their code and keys are the ones they always had; and ``queries.jsonl`` (each query raw and condensed, and whether
it fell back to the raw instruction), which a cell copies beside its rankings."""
from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from typing import Any, Mapping

from ..data.columnar import write_dataset
from ..data.jsonl import atomic_write_jsonl
from ..data.types import Dataset
from ..synth import condense as condense_module
from ..synth.client import LLMClient
from .graph import BuildContext, Stage
from .synthesis import LLM_IDENTITY, llm_config

QUERIES = "queries.jsonl"
METHOD_PARAMS = {"raw": (), "head": ("words",), "keywords": ("top", "max_ngram"), "llm": ("max_words",)}


def _build(ctx: BuildContext) -> dict[str, Any]:
    dataset, p = ctx.dataset(), ctx.params
    client = LLMClient(llm_config(ctx.stage.options["llm"]), ctx.work / "requests.jsonl") if p["method"] == "llm" else None
    texts = [q.text for q in dataset.queries]
    condensed = condense_module.condense(texts, p["method"], p, client, p.get("prompt"))
    queries = [dataclasses.replace(q, text=c.text) for q, c in zip(dataset.queries, condensed)]
    write_dataset(Dataset(dataset.skills, queries, dataset.report, dataset.distractor_ids), ctx.out)
    atomic_write_jsonl(ctx.out / QUERIES, ({"qid": q.id, "raw": t, "query": c.text, "fallback": c.fallback}
                                           for q, t, c in zip(dataset.queries, texts, condensed)))
    kept = [c for c in condensed if c.fallback is None]
    return {"n_queries": len(queries), "items": len(queries), "method": p["method"],
            "fallbacks": dict(Counter(c.fallback for c in condensed if c.fallback)),
            "median_chars": {"raw": statistics.median(len(t) for t in texts) if texts else 0,
                             "condensed": statistics.median(len(c.text) for c in kept) if kept else 0},
            **({"usage": dataclasses.asdict(client.usage)} if client else {})}


def condense_queries(data: Stage, query: Mapping[str, Any], llm: Mapping[str, Any], prompt: str | None) -> Stage:
    """``data`` with its queries condensed as ``query`` says (``llm``: the ``llm`` group, for ``method=llm``; the
    server's address is not part of the key, its model and sampling are; ``prompt``: the template's text)."""
    method = str(query["method"])
    if method not in METHOD_PARAMS:
        raise ValueError(f"query.method must be one of {', '.join(METHOD_PARAMS)}, got {method!r}")
    params: dict[str, Any] = {"method": method, **{k: query[k] for k in METHOD_PARAMS[method]}}
    if method == "llm":
        params.update(prompt=prompt, llm={k: llm[k] for k in LLM_IDENTITY})
    return Stage("condense", _build, params, inputs={"data": data}, resource="llm" if method == "llm" else "cpu",
                 cheap=method in ("head", "keywords"), options={"llm": dict(llm)}, code=(condense_module.__name__,))
