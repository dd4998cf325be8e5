"""R3's LLM-made data (WRITE queries and SKIP rejections), in our own prompts from the paper.

1. cluster the pool: k-means on skill embeddings into sub-clusters, whose centroids are clustered
   again into super-domains (sizes reported);
2. sample skill sets of k = 1, 2, 3 under the hierarchy: members of a set share a super-domain and
   come from different sub-clusters (related, not redundant);
3. WRITE/SKIP: an LLM decides whether one realistic request needs the whole set and, on WRITE, writes
   it in one of 6 styles and 4 language directions (query language -> skill language);
4. a rule-based taxonomy of the SKIP reasons (reasons and coverage reported); a skill-name leakage
   check of every WRITE query, per direction;
5. a pool-level train/test split: each skill goes to one side, a query whose skills straddle both is
   dropped (counted); train pairs carry their SKIP partners (``skip``), test queries become a benchmark.
"""
from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from typing import Any

import numpy as np

from ..data.types import Skill
from .client import LLMClient, Request
from .prompts import render, skill_blocks

STYLES = ("terse command", "detailed specification", "question to a colleague", "bug report",
          "numbered list of steps", "casual chat message")
DIRECTIONS = {"en-en": ("English", "English"), "zh-zh": ("Chinese", "Chinese"), "en-zh": ("English", "Chinese"),
              "zh-en": ("Chinese", "English")}
TAXONOMY = (("redundant", r"redundan|overlap|duplicate|same (function|purpose|thing)"),
            ("conflicting", r"conflict|incompatib|contradict|mutually exclusive"),
            ("unrelated", r"unrelated|different domains?|no (common|shared)|not related|disjoint"),
            ("too generic", r"generic|vague|broad|general"),
            ("not needed together", r"not (needed|required)|unnecessary|alone|single skill|one of them"))


def cluster(embeddings: np.ndarray, n_sub: int, n_super: int, seed: int) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """``(sub label per skill, super-domain per skill, report)``: k-means twice (FAISS)."""
    import faiss

    x = np.ascontiguousarray(embeddings, dtype=np.float32)
    n_sub = max(1, min(n_sub, len(x)))
    sub_km = faiss.Kmeans(x.shape[1], n_sub, niter=25, seed=seed, verbose=False)
    sub_km.train(x)
    sub = sub_km.index.search(x, 1)[1][:, 0]
    n_super = max(1, min(n_super, n_sub))
    sup_km = faiss.Kmeans(x.shape[1], n_super, niter=25, seed=seed, verbose=False)
    sup_km.train(np.ascontiguousarray(sub_km.centroids))
    super_of_sub = sup_km.index.search(np.ascontiguousarray(sub_km.centroids), 1)[1][:, 0]
    sup = super_of_sub[sub]
    return sub, sup, {"sub_clusters": int(n_sub), "super_domains": int(n_super),
                      "super_domain_sizes": sorted(Counter(sup.tolist()).values(), reverse=True)}


def sample_sets(ids: list[str], sub: np.ndarray, sup: np.ndarray, per_k: dict[int, int], seed: int) -> list[tuple[str, ...]]:
    """Skill sets of each size k: one super-domain, k distinct sub-clusters (fewer when none allows it)."""
    rng = random.Random(seed)
    by_domain: dict[int, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for sid, s, d in zip(ids, sub.tolist(), sup.tolist()):
        by_domain[d][s].append(sid)
    domains = sorted(by_domain)
    sets: list[tuple[str, ...]] = []
    for k, n in sorted(per_k.items()):
        eligible = [d for d in domains if len(by_domain[d]) >= k]
        seen: set[tuple[str, ...]] = set()
        for _ in range(20 * n):
            if len(seen) >= n or not eligible:
                break
            subs = by_domain[rng.choice(eligible)]
            chosen = tuple(sorted(rng.choice(subs[s]) for s in rng.sample(sorted(subs), k)))
            if chosen not in seen:
                seen.add(chosen)
                sets.append(chosen)
    return sets


def rejection_reason(reason: str) -> str:
    for label, pattern in TAXONOMY:
        if re.search(pattern, reason, re.IGNORECASE):
            return label
    return "other"


def name_leaks(query: str, names: list[str]) -> bool:
    low = query.lower()
    return any(n and (n in low or n.replace("-", " ") in low) for n in (name.strip().lower() for name in names))


def write_or_skip(client: LLMClient, skills: dict[str, Skill], sets: list[tuple[str, ...]], prompt: str, seed: int
                  ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One judgement per set, with a style and direction drawn per set (seeded)."""
    rng = random.Random(seed)
    plans = [(s, rng.choice(STYLES), rng.choice(sorted(DIRECTIONS))) for s in sets]
    schema = {"type": "object", "required": ["decision", "query", "reason"],
              "properties": {"decision": {"type": "string", "enum": ["WRITE", "SKIP"]},
                             "query": {"type": "string", "x-min-words": 8, "x-max-words": 40},
                             "reason": {"type": "string", "minLength": 1, "x-min-words": 5, "x-max-words": 20}}}

    def one(plan):
        members, style, direction = plan
        q_lang, s_lang = DIRECTIONS[direction]
        blocks = "\n".join(skill_blocks(skills[m], body_chars=1500, label=str(i + 1)) for i, m in enumerate(members))
        answer = client.ask(Request("write_or_skip", ({"role": "user", "content": render(
            prompt, k=str(len(members)), skills=blocks, style=style, query_language=q_lang, skill_language=s_lang)},),
            schema, tag="|".join(members)))
        return plan, answer

    records, failed = [], 0
    for (members, style, direction), answer in client.map(one, plans):
        if answer is None:
            failed += 1
            continue
        write = answer["decision"] == "WRITE" and bool(answer["query"].strip())
        records.append({"skills": list(members), "decision": "WRITE" if write else "SKIP", "query": answer["query"] if write else "",
                        "reason": answer["reason"], "style": style, "direction": direction,
                        "category": None if write else rejection_reason(answer["reason"]),
                        "leaks_name": write and name_leaks(answer["query"], [skills[m].name for m in members])})
    writes = [r for r in records if r["decision"] == "WRITE"]
    skips = [r for r in records if r["decision"] == "SKIP"]
    by_category = Counter(r["category"] for r in skips)
    leaks = Counter(r["direction"] for r in writes if r["leaks_name"])
    return records, {"sets": len(sets), "write": len(writes), "skip": len(skips), "failed": failed,
                     "skip_reasons": dict(by_category),
                     "skip_reason_coverage": round(1 - by_category.get("other", 0) / len(skips), 3) if skips else None,
                     "name_leaks_by_direction": {d: leaks.get(d, 0) for d in sorted(DIRECTIONS)},
                     "by_style": dict(Counter(r["style"] for r in writes)), "by_k": dict(Counter(len(r["skills"]) for r in writes))}


def split_pairs(records: list[dict[str, Any]], ids: list[str], test_fraction: float, seed: int
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """Train pairs (with SKIP partners) and test queries from a pool-level split; leaking and
    straddling queries are dropped and counted."""
    rng = random.Random(seed)
    shuffled = sorted(ids)
    rng.shuffle(shuffled)
    test_ids = set(shuffled[: int(round(test_fraction * len(shuffled)))])
    partners: dict[str, set[str]] = defaultdict(set)
    for r in records:
        if r["decision"] == "SKIP":
            for m in r["skills"]:
                partners[m].update(x for x in r["skills"] if x != m)
    train, test, straddling, leaking = [], [], 0, 0
    for i, r in enumerate(x for x in records if x["decision"] == "WRITE"):
        if r["leaks_name"]:
            leaking += 1
            continue
        sides = {m in test_ids for m in r["skills"]}
        if len(sides) > 1:
            straddling += 1
            continue
        if True in sides:
            test.append({"id": f"r3synth-{i:06d}", "query": r["query"], "gt": r["skills"], "direction": r["direction"],
                         "style": r["style"], "k": str(len(r["skills"]))})
        else:
            skip = sorted({p for m in r["skills"] for p in partners[m]} - set(r["skills"]) - test_ids)
            train.append({"query": r["query"], "skill_ids": r["skills"], "skip": skip})
    return train, test, {"train_pairs": len(train), "test_queries": len(test), "straddling_dropped": straddling,
                         "leaking_dropped": leaking, "test_skills": len(test_ids),
                         "train_pairs_with_skip": sum(1 for t in train if t["skip"])}
