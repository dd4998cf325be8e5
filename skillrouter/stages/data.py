"""Data stages: the built-in benchmark, the parsed and validated dataset (columnar), the validated training pairs,
the dev split and pseudo-queries from the pool. All cheap: on a cluster they run inside the job of the first stage
that reads them."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..data import builtin, columnar, dataset as dataset_module, dev_split as dev_split_module, loaders, releases
from ..data.columnar import write_dataset
from ..data.dataset import load_source, source_files
from ..data.jsonl import atomic_write_jsonl, read_jsonl
from ..data.loaders import ErrorPolicy, check_ground_truth, load_queries
from ..data.types import Dataset, DataError, LoadReport
from ..data import pairs as pairs_module, pseudo_queries as pseudo_module
from ..data.pairs import TrainExample, load_pairs
from .graph import BuildContext, FileInput, FileRef, Stage, StageFile, file_inputs

LOAD_PARAMS = ("source", "pool_format", "queries_format", "on_error", "max_field_chars")
RELEASE_PARAMS = ("revision", "split", "datasets")  # keyed only where a slice sets them
DATA_FILES = ("pool", "queries", "distractors")  # what load_data reads; oracle_nd and train_pairs go elsewhere
TRAIN_POOL = "train_pool"  # what it reads instead of the pool for training, where the slice names one
EXAMPLES = "examples.jsonl"


def _build_builtin(ctx: BuildContext) -> dict[str, Any]:
    files = builtin.generate(ctx.out, **ctx.params)
    return {"files": {k: str(v.name) for k, v in files.items()}}


def builtin_data(params: Mapping[str, Any]) -> Stage:
    """The built-in synthetic benchmark, generated once per parameter set."""
    return Stage("builtin_data", _build_builtin, dict(params), cheap=True, code=(builtin.__name__,))


def builtin_file(stage: Stage, name: str) -> StageFile:
    return StageFile(stage, f"{name}.jsonl")


def _build_load(ctx: BuildContext) -> dict[str, Any]:
    p = ctx.params
    data = {**ctx.stage.options["data"], **{slot: ctx.file(slot) for slot in (*DATA_FILES, TRAIN_POOL) if ctx.file(slot)}}
    dataset = load_source(data, p["tier"], p["distractors"], p.get("role", "eval"))
    write_dataset(dataset, ctx.out)
    return {"n_skills": len(dataset.skills), "n_queries": len(dataset.queries),
            "n_training_pool": len(dataset.training_pool()), "items": len(dataset.skills)}


def load_data(data: Mapping[str, Any], tier: str, with_distractors: bool, role: str = "eval") -> Stage:
    """The parsed, validated dataset of a ``data`` slice for one tier, stored columnar: the first
    stage that reads it parses and validates, every other reads columns. Keyed by the content of the
    user's files it reads, and by the stages that made the others (built-in, generated). ``role="train"``:
    the dataset training reads, which is ``data.train_pool`` where the slice names one."""
    role = "train" if role == "train" and data.get(TRAIN_POOL) else "eval"
    refs: dict[str, FileRef | None] = {slot: data.get(slot) for slot in (*DATA_FILES, TRAIN_POOL)}
    if not with_distractors:
        refs["distractors"] = None
    if role != "train":
        refs[TRAIN_POOL] = None
    inputs, _, names, _ = file_inputs(refs)
    plain = {k: v for k, v in data.items() if not isinstance(v, StageFile)}
    user_files = source_files({**plain, **dict.fromkeys(inputs)}, tier, with_distractors, role)
    params = {**{k: data.get(k) for k in LOAD_PARAMS}, **{k: data[k] for k in RELEASE_PARAMS if data.get(k) is not None},
              "tier": tier, "distractors": with_distractors, "files": names,
              **({"role": role, "train_pool_format": data.get("train_pool_format") or "auto"} if role == "train" else {})}
    return Stage("load_data", _build_load, params, inputs=inputs, files={"source": FileInput.of(user_files)}, cheap=True, options={"data": plain},
                 code=(loaders.__name__, releases.__name__, *releases.MODULES, dataset_module.__name__, columnar.__name__))


def _build_pairs(ctx: BuildContext) -> dict[str, Any]:
    dataset = ctx.dataset("data")
    benchmark = {g for q in dataset.queries for g in q.all_gt}
    report = LoadReport()
    examples = load_pairs(ctx.file("pairs"), {s.id for s in dataset.skills}, benchmark,
                          ErrorPolicy(ctx.params["on_error"], report))
    atomic_write_jsonl(ctx.out / EXAMPLES, (asdict(ex) for ex in examples))
    return {"n_examples": len(examples), "skipped": report.skipped, "skip_examples": report.examples,
            "items": len(examples)}


def train_pairs(pairs: FileRef, base: Stage, on_error: str) -> Stage:
    """Training pairs validated against the training dataset; benchmark-labelled positives removed
    and counted (no evaluated skill is ever a training target)."""
    inputs, files, names, paths = file_inputs({"pairs": pairs})
    return Stage("train_pairs", _build_pairs, {"on_error": on_error, "files": names}, inputs={**inputs, "data": base},
                 files=files, cheap=True, options={"paths": paths},
                 code=(pairs_module.__name__,))


def _build_pseudo(ctx: BuildContext) -> dict[str, Any]:
    dataset, p = ctx.dataset("data"), ctx.params
    held = ctx.dataset("dev").queries if ctx.has("dev") else []  # the dev split's skills stay as unseen as the test's
    benchmark = {g for q in [*dataset.queries, *held] for g in q.all_gt}
    examples = pseudo_module.pseudo_queries(dataset.training_pool(), benchmark, p["sources"], p["body_lines"],
                                            p["max_chars"])
    if not examples:
        raise DataError("data.pool", None, "description",
                        "no skill of the training pool gives a pseudo-query (reranker.pretrain needs descriptions or "
                        "bodies that name one skill each)")
    atomic_write_jsonl(ctx.out / EXAMPLES, (asdict(ex) for ex in examples))
    return {"n_examples": len(examples), "items": len(examples)}


def pseudo_pairs(base: Stage, sources: Sequence[str], body_lines: int, max_chars: int, dev: Stage | None = None) -> Stage:
    """Pseudo-queries from the training pool (:mod:`skillrouter.data.pseudo_queries`) as training pairs: a drop-in for
    ``train_pairs`` where a retrieve stage lists their candidates and the reranker pre-trains on them. No skill a
    benchmark query or (``dev``) a dev query labels is made a positive."""
    return Stage("pseudo_queries", _build_pseudo, {"sources": list(sources), "body_lines": body_lines,
                                                   "max_chars": max_chars},
                 inputs={"data": base, **({"dev": dev} if dev is not None else {})}, cheap=True,
                 code=(pseudo_module.__name__,))


def _build_dev_split(ctx: BuildContext) -> dict[str, Any]:
    base, examples, p = ctx.dataset("data"), read_examples(ctx.input("pairs")), ctx.params
    path = ctx.file("dev_queries")
    if path:
        policy = ErrorPolicy(p["on_error"], LoadReport())
        queries, _ = load_queries(path, "auto", policy, p["max_field_chars"])
        queries = check_ground_truth(queries, {s.id for s in base.skills}, policy, path)
        split, source = dev_split_module.given(examples, queries), {"source": "file", "file": path}
    else:
        split = dev_split_module.carve(examples, p["share"], p["seed"], ctx.stage.options["pairs_file"], p["unit"])
        source = {"source": "share", "share": p["share"], "seed": p["seed"], "unit": p["unit"]}
    atomic_write_jsonl(ctx.out / EXAMPLES, (asdict(ex) for ex in split.train))
    write_dataset(Dataset(base.skills, split.queries, distractor_ids=base.distractor_ids), ctx.out)
    return {"split": dev_split_module.describe(split, source), "n_examples": len(split.train), "n_skills": len(base.skills),
            "n_queries": len(split.queries), "n_training_pool": len(base.training_pool()), "items": len(examples)}


def dev_split(pairs: Stage, dev_queries: FileRef | None, share: float, seed: int, on_error: str, max_field_chars: int,
              unit: str = "skill") -> Stage:
    """The training pairs less a dev split, and that split as a dataset (the training pool, the dev queries):
    a drop-in for ``train_pairs`` where training reads it and for ``load_data`` where a cell scores the dev split
    (:mod:`skillrouter.data.dev_split`)."""
    inputs, files, names, paths = file_inputs({"dev_queries": dev_queries})
    params = ({"files": names, "on_error": on_error, "max_field_chars": max_field_chars} if dev_queries
              else {"share": share, "seed": seed, "unit": unit})
    return Stage("dev_split", _build_dev_split, params, inputs={**inputs, "pairs": pairs, "data": pairs.inputs["data"]},
                 files=files, cheap=True, code=(dev_split_module.__name__,),
                 options={"paths": paths, "pairs_file": pairs.options.get("paths", {}).get("pairs", "data.train_pairs")})


def read_examples(entry: Path) -> list[TrainExample]:
    return [TrainExample(r["query"], tuple(r["positives"]), tuple(r["skip"])) for _, r in read_jsonl(entry / EXAMPLES)]


def read_descriptions(ctx: BuildContext) -> dict[str, str] | None:
    """The Oracle-ND descriptions a rendering stage reads (``oracle`` role), if it has any."""
    from ..data import load_descriptions

    path = ctx.file("oracle")
    return load_descriptions(path) if path else None


def training_subset(data: Stage) -> str:
    """The pool subset training mines from a ``load_data`` stage: a dataset loaded without a distractor
    file has no distractors, so it is the whole pool (and shares its embeddings with the evaluation of
    the Easy tier); a SkillRouter release pool marks its own variants, so its training pool is a subset."""
    return "training" if data.params["distractors"] or data.params["source"] == "skillrouter_core" else "all"
