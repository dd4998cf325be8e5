"""The field's released benchmarks, read exactly as published, each with its evaluator's protocol.

One module per release; each module's docstring is that release's schema. A reader returns a whole
:class:`Dataset` (pool + scored queries) because the protocols tie the two together (the SkillRouter release
scores the labelled set restricted to the tier's pool). Each reader keeps the text the release's own models
read in ``Skill.extra["text"]`` where the release defines one (text style ``release``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from ..loaders import ErrorPolicy
from ..types import DataError, Dataset
from . import r3_skill, skillret, skillretbench, skillrouter_core, sra_bench, sra_prompts

Slice = Mapping[str, Any]  # a ``data`` config slice


@dataclass(frozen=True)
class ReleaseReader:
    """How one release is read: ``load(root, tier, data, policy, max_field_chars)``, the files that load reads
    (what its parsed copy is keyed on), its tiers, and the ``data`` keys its own training split fills."""

    title: str
    load: Callable[[Path, str, Slice, ErrorPolicy, int], Dataset]
    files: Callable[[Path, str, Slice], list[Path]]
    tiers: tuple[str, ...] = ("easy",)
    training: Callable[[Path, Slice], dict[str, str]] | None = None


def _skillret_training(root: Path, data: Slice) -> dict[str, str]:
    """SkillRet's train split: its queries are the training pairs (``{query, skill_ids}``), its skills the pool
    negatives and reranker candidates are drawn from — disjoint from the test pool."""
    files = skillret.split_files(root, "train")
    return {"train_pairs": str(files["queries"]), "train_pool": str(files["skills"]), "train_pool_format": "skillret"}


READERS: dict[str, ReleaseReader] = {
    "skillrouter_core": ReleaseReader(
        "SkillRouter eval-core", lambda root, tier, data, policy, n: skillrouter_core.load_skillrouter_core(root, tier, policy, n),
        lambda root, tier, data: [root / "manifest.json", root / "tasks.jsonl", root / "relevance.json", root / tier],
        tiers=skillrouter_core.SKILLROUTER_TIERS),
    "r3_skill": ReleaseReader(
        "R3-Skill", lambda root, tier, data, policy, n: r3_skill.load_r3_skill(root, policy, n),
        lambda root, tier, data: [root / "data" / "skills_test.jsonl", root / "data" / "test.jsonl"]),
    "skillret": ReleaseReader(
        "SkillRet", lambda root, tier, data, policy, n: skillret.load_skillret(root, policy, n, data.get("split") or "test"),
        lambda root, tier, data: list(skillret.split_files(root, data.get("split") or "test").values()),
        training=_skillret_training),
    "sra_bench": ReleaseReader(
        "SRA-Bench", lambda root, tier, data, policy, n: sra_bench.load_sra_bench(root, policy, n, data.get("datasets")),
        lambda root, tier, data: [root / sra_bench.CORPUS.parent, root / sra_bench.INSTANCES, root / sra_prompts.TOOLQA_SOURCE]),
    "skillretbench": ReleaseReader(
        "SkillRetBench", lambda root, tier, data, policy, n: skillretbench.load_skillretbench(root, policy, n),
        lambda root, tier, data: [skillretbench.release_file(root, skillretbench.CORPUS),
                                  skillretbench.release_file(root, skillretbench.QUERIES)]),
}
POOL_READERS = {"skillret": skillret.read_skills}  # a release's skills file as a training pool (data.train_pool_format)
MODULES = tuple(m.__name__ for m in (r3_skill, skillret, skillretbench, skillrouter_core, sra_bench, sra_prompts))  # their code keys a load


def reader(source: str) -> ReleaseReader:
    if source not in READERS:
        raise DataError("config", None, "data.source", f"expected files or one of {sorted(READERS)}, got {source!r}")
    return READERS[source]


def load_release(source: str, data: Slice, tier: str, policy: ErrorPolicy, max_field_chars: int) -> Dataset:
    release = reader(source)
    if tier not in release.tiers:
        raise DataError("config", None, "tier", f"{release.title} has a single test pool: use tier=easy"
                        if release.tiers == ("easy",) else f"{release.title} has tiers {release.tiers}, not {tier!r}")
    return release.load(Path(data["root"]), tier, data, policy, max_field_chars)
