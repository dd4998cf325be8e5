"""SkillRouter's LLM-made data, in our own prompts from the paper's description of them.

* ``gen_queries``: a category-stratified sample of N pool skills (never a benchmark-labelled one),
  one realistic task description each, filtered for leakage (the skill's name, a CLI command named
  in its body, length bounds) and regenerated up to ``attempts`` times, then dropped and counted;
  output ``{"query", "skill_id"}`` pairs;
* ``gen_distractors``: for each benchmark GT skill, plausible-but-wrong skills by strategy (same
  domain / different problem, same technology / different use, over-generalised) plus the release's
  two degradations of the skill itself (steps removed, constraints corrupted), which the Hard tier
  grades 1 (``variant_of`` + ``grade``);
* ``oracle_nd``: a 40-60-word functional description of each GT skill (the Oracle-ND row);
* ``gen_eval_queries`` + ``dedupe_equivalent``: held-out queries per GT skill at two difficulties
  (SkillBench-Supp), and the pool without the entries an LLM judges functionally equivalent to a GT
  skill among that skill's BM25 top-5.

Each returns its records and a report of what it made, filtered and why.
"""
from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from typing import Any

from ..data.types import Skill
from .client import LLMClient, Request
from .prompts import render, skill_blocks

DISTRACTOR_STRATEGIES = ("same_domain_different_problem", "same_technology_different_use", "over_generalised")
DEGRADATIONS = {"steps_removed": "no longer gives the concrete steps (remove the numbered or bulleted procedure)",
                "constraints_corrupted": "weakens or inverts its constraints (must / always / never / only)"}
_COMMAND = re.compile(r"`([a-z][\w.-]{2,})(?:\s[^`]*)?`|^\s*\$\s*([a-z][\w.-]{2,})", re.M)


def _text(min_words: int, max_words: int) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "x-min-words": min_words, "x-max-words": max_words}


def _object(**props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props)}


def _ask(prompt: str) -> tuple[dict[str, str], ...]:
    return ({"role": "user", "content": prompt},)


def stratified_sample(skills: list[Skill], n: int, exclude: set[str], seed: int) -> list[Skill]:
    """``n`` skills spread over categories in proportion (round-robin over shuffled categories)."""
    rng = random.Random(seed)
    by_cat: dict[str, list[Skill]] = defaultdict(list)
    for s in skills:
        if s.id not in exclude:
            by_cat[s.category or ""].append(s)
    for members in by_cat.values():
        rng.shuffle(members)
    cats = sorted(by_cat)
    rng.shuffle(cats)
    out: list[Skill] = []
    while len(out) < n and any(by_cat.values()):
        for c in cats:
            if by_cat[c] and len(out) < n:
                out.append(by_cat[c].pop())
    return out


def cli_commands(body: str) -> set[str]:
    """Command names a body tells the agent to run (first word of a code span, or of a ``$ `` line)."""
    return {m.group(1) or m.group(2) for m in _COMMAND.finditer(body)} - {"the", "and", "for"}


def leakage(query: str, skill: Skill, min_words: int, max_words: int) -> str | None:
    """Why a generated query may not train the encoder, or None."""
    words = len(query.split())
    if not min_words <= words <= max_words:
        return f"length {words} words outside [{min_words}, {max_words}]"
    low = query.lower()
    name = skill.name.strip().lower()
    if name and (name in low or name.replace("-", " ") in low or name.replace("_", " ") in low):
        return "names the skill"
    commands = [c for c in cli_commands(skill.body) if re.search(rf"(?<![\w-]){re.escape(c.lower())}(?![\w-])", low)]
    return f"names the command {commands[0]!r}" if commands else None


def gen_queries(client: LLMClient, skills: list[Skill], benchmark_ids: set[str], params: dict[str, Any],
                prompt: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    sample = stratified_sample(skills, params["n_skills"], benchmark_ids, params["seed"])
    schema = _object(query=_text(params["min_words"], params["max_words"]))

    def one(skill: Skill) -> tuple[Skill, dict | None, list[str]]:
        answer, why = client.ask_checked(
            lambda attempt: Request("training_query", _ask(render(prompt, skill=skill_blocks(skill))), schema,
                                    tag=f"{skill.id}#{attempt}"),
            lambda a: leakage(a["query"], skill, params["min_words"], params["max_words"]), params["attempts"])
        return skill, answer, why

    pairs, rejected, dropped = [], Counter(), 0
    for skill, answer, why in client.map(one, sample):
        rejected.update(w.split(" ")[0] if w.startswith("length") else w.split(" '")[0] for w in why)
        if answer is None:
            dropped += 1
        else:
            pairs.append({"query": answer["query"], "skill_id": skill.id})
    return pairs, {"sampled": len(sample), "made": len(pairs), "dropped": dropped,
                   "categories": len({s.category or "" for s in sample}), "rejections": dict(rejected)}


def gen_distractors(client: LLMClient, gt_skills: list[Skill], params: dict[str, Any], prompts: dict[str, str]
                    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    strategies = list(params["strategies"])
    item = _object(strategy={"type": "string", "enum": strategies}, name=_text(1, 4), description=_text(8, 20),
                   body=_text(40, 120))
    schema = _object(distractors={"type": "array", "items": item, "minItems": len(strategies), "maxItems": len(strategies)})
    degrade_schema = _object(body=_text(40, 160))

    def one(skill: Skill) -> list[dict[str, Any]]:
        out = []
        answer = client.ask(Request("distractors", _ask(render(prompts["gen_distractors"], skill=skill_blocks(skill),
                                                               n=str(len(strategies)),
                                                               strategies="\n".join(f"- {s}" for s in strategies))),
                                    schema, tag=skill.id))
        for i, d in enumerate((answer or {}).get("distractors", [])):
            out.append({"id": f"synth-distractor/{skill.id}/{i}-{d['strategy']}", "name": d["name"],
                        "description": d["description"], "body": d["body"], "category": skill.category,
                        "strategy": d["strategy"], "source": "synth:gen_distractors"})
        for kind in params["degradations"]:
            answer = client.ask(Request("degraded_skill", _ask(render(prompts["degrade"], skill=skill_blocks(skill),
                                                                      how=DEGRADATIONS[kind])), degrade_schema,
                                        tag=f"{skill.id}#{kind}"))
            if answer:
                out.append({"id": f"degraded/{skill.id}_{kind}", "name": skill.name, "description": skill.description,
                            "body": answer["body"], "category": skill.category, "strategy": kind, "variant_of": skill.id,
                            "grade": 1, "source": "synth:gen_distractors"})
        return out

    records = [r for rows in client.map(one, gt_skills) for r in rows]
    return records, {"gt_skills": len(gt_skills), "made": len(records),
                     "by_strategy": dict(Counter(r["strategy"] for r in records)),
                     "missing": len(gt_skills) * (len(strategies) + len(params["degradations"])) - len(records)}


def oracle_nd(client: LLMClient, gt_skills: list[Skill], params: dict[str, Any], prompt: str
              ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    lo, hi = params["min_words"], params["max_words"]
    schema = _object(description=_text(lo, hi))

    def words_ok(a: dict[str, Any]) -> str | None:
        n = len(a["description"].split())
        return None if lo <= n <= hi else f"length {n} words"

    def one(skill: Skill):
        return skill, *client.ask_checked(
            lambda attempt: Request("oracle_description", _ask(render(prompt, skill=skill_blocks(skill))), schema,
                                    tag=f"{skill.id}#{attempt}"), words_ok, params["attempts"])

    records, dropped = [], 0
    for skill, answer, _ in client.map(one, gt_skills):
        if answer is None:
            dropped += 1
        else:
            records.append({"id": skill.id, "description": answer["description"]})
    return records, {"gt_skills": len(gt_skills), "made": len(records), "dropped": dropped}


def gen_eval_queries(client: LLMClient, gt_skills: list[Skill], params: dict[str, Any], prompt: str
                     ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    schema = _object(easy=_text(params["min_words"], params["max_words"]), hard=_text(params["min_words"], params["max_words"]))

    def one(skill: Skill):
        return skill, client.ask(Request("eval_queries", _ask(render(prompt, skill=skill_blocks(skill))), schema, tag=skill.id))

    records = []
    for skill, answer in client.map(one, gt_skills):
        for difficulty in ("easy", "hard"):
            if answer and not leakage(answer[difficulty], skill, params["min_words"], params["max_words"]):
                records.append({"id": f"supp/{skill.id}/{difficulty}", "query": answer[difficulty], "gt": [skill.id],
                                "difficulty": difficulty})
    return records, {"gt_skills": len(gt_skills), "made": len(records), "dropped": 2 * len(gt_skills) - len(records)}


def dedupe_equivalent(client: LLMClient, pool: list[Skill], gt_skills: list[Skill], neighbours: list[list[str]],
                      prompt: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The pool minus every skill judged equivalent to a GT skill among that skill's BM25 top-5."""
    by_id = {s.id: s for s in pool}
    gt_ids = {s.id for s in gt_skills}
    schema = _object(equivalent={"type": "boolean"}, reason=_text(4, 20))
    pairs = [(g, c) for g, cands in zip(gt_skills, neighbours) for c in cands if c not in gt_ids]

    def one(pair: tuple[Skill, str]) -> tuple[str, bool]:
        g, c = pair
        answer = client.ask(Request("equivalence", _ask(render(prompt, first=skill_blocks(g, label="first"),
                                                              second=skill_blocks(by_id[c], label="second"))),
                                    schema, tag=f"{g.id}|{c}"))
        return c, bool(answer and answer["equivalent"])

    removed = {c for c, same in client.map(one, pairs) if same}
    kept = [s for s in pool if s.id not in removed]
    records = [{"id": s.id, "name": s.name, "description": s.description, "body": s.body, "category": s.category,
                "source": s.source, **s.extra} for s in kept]
    return records, {"judged_pairs": len(pairs), "removed": len(removed), "removed_ids": sorted(removed)[:50], "pool": len(records)}
