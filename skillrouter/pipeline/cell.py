"""One grid cell: its stage graph made sure of, then its scoring sink, which writes the run directory.

Where the graph's stages come from depends on how the cell runs:

* a single run (``launch.py`` without ``-m``), or a job of cell-level dispatch: the cell builds its
  own graph here, in topological order (a stage another job is building is waited for);
* stage-level dispatch (the grid launchers' default): the launcher has built the grid's stages
  already, in this process or as SLURM jobs; the cell builds only its cheap missing inputs and, where
  a stage is missing, fails naming the stage the failure came from.

Every cell writes ``status.json`` when it starts and ``metrics.json`` (with its status) when it ends,
from inside the job, so a grid's state can be read from disk whatever the launcher did. A failing
cell records its error and never touches another cell's files.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from .. import events
from ..cache.store import StageCache, StageRecord, record_dict
from ..data import Dataset, load_descriptions
from ..data.jsonl import atomic_write_json, atomic_write_text, read_json, read_jsonl
from ..data.types import Query
from ..eval.metrics import aggregate_rows, parse_metrics, per_query_rows, recall_curve
from ..eval.strata import derive
from ..models import respect_cpu_allocation
from ..progress import quiet_library_bars
from ..rankings import Ranking, read_rankings, write_predictions, write_rankings
from ..agents.skill_use import use_rates
from ..agents.trials import TRIAL_KIND
from ..stages.agents import SETS, TRIALS, downstream_section
from ..stages.condense import QUERIES as CONDENSED
from ..stages.data import read_examples
from ..stages.graph import Stage, StageFile, dataset_at
from ..stages.training import FN_FILTER
from .compose import CellGraph, compose_cell, scored_split
from .execute.build import Builder, MissingInput, StageFailed
from .execute.local import LocalExecutor
from .execute.slurm_jobs import job_state, memory_fix, stepd_reason
from .journal import StageJournal
from .llm_server import LLMServer
from .provenance import provenance

log = logging.getLogger(__name__)


@dataclass
class GridRun:
    """What a grid launcher tells its cells: their graphs (composed once, for the whole grid), how the
    stages are dispatched (``stage``: built already; ``cell``: each cell builds its own), the sweep
    folder (the journal) and, per stage key, the cell it is built for and the SLURM job building it."""

    sweep_dir: str
    dispatch: str
    graphs: dict[int, CellGraph]
    built_for: dict[str, int] = field(default_factory=dict)
    jobs: dict[str, str] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)  # per stage key, its job's stderr


@dataclass
class Scored:
    """A scored cell: its ``metrics.json`` payload and per-query metrics, and what a tracker shows beside
    them (the queries, their rankings, the texts each stage saw, the stages the cell read by name)."""

    result: dict[str, Any]
    rows: dict[str, dict[str, float]]
    queries: list[Query]
    rankings: list[Ranking]
    examples: dict[str, Any] = field(default_factory=dict)
    stages: dict[str, Stage] = field(default_factory=dict)

    def event(self, run_dir: str, cache_root: str) -> events.CellScored:
        """What watchers are told of it (plain data: the stages by kind and key)."""
        return events.CellScored(run_dir, cache_root, self.result, self.rows, self.queries, self.rankings, self.examples,
                                 {name: events.StageRef(s.kind, s.key) for name, s in self.stages.items()})


_grid: contextvars.ContextVar[GridRun | None] = contextvars.ContextVar("grid", default=None)


@contextlib.contextmanager
def grid_run(grid: GridRun) -> Iterator[None]:
    """Run the cells inside this block as cells of ``grid``."""
    token = _grid.set(grid)
    try:
        yield
    finally:
        _grid.reset(token)


def make_cache(cfg: DictConfig) -> StageCache:
    return StageCache(cfg.cache_dir, stale_after=cfg.cache_lock_stale_s, verify_after_days=cfg.cache_verify_after_days)


def file_path(ref: Any, cache: StageCache) -> Any:
    """A user's path as it is; a stage's file as its path in the cache."""
    return str(cache.entry(ref.stage.kind, ref.stage.key) / ref.name) if isinstance(ref, StageFile) else ref


def _root_cause(missing: Stage, grid: GridRun, journal: StageJournal) -> StageFailed:
    """Why ``missing`` is not in the cache: the first failed stage upstream of it (the journal says), else
    the stage whose job died while building it (still ``running``), with SLURM's account of that job."""
    stack, seen, running = [missing], set(), []
    while stack:
        stage = stack.pop()
        if stage.key in seen:
            continue
        seen.add(stage.key)
        rec = journal.read(stage) or {}
        if rec.get("state") == "failed":
            return StageFailed(stage, rec.get("error", "failed"))
        if rec.get("state") == "running":
            running.append(stage)
        stack.extend(stage.upstream())
    stage = running[-1] if running else missing
    job = grid.jobs.get(stage.key)
    if not job:
        return StageFailed(stage, "it was never built")
    said = stepd_reason(grid.logs.get(stage.key))
    fix = memory_fix(grid.logs.get(stage.key), f"++hydra.launcher.resources.kinds.{stage.kind}.mem_gb")
    return StageFailed(stage, f"its SLURM job {job} ended without building it: {job_state(job)}" + (f": {said}" if said else "")
                       + (f"; {fix}" if fix else ""))


class CellRun:
    """The stages and scoring of one cell, with the records ``metrics.json`` lists."""

    def __init__(self, cfg: DictConfig, run_dir: Path, grid: GridRun | None):
        self.cfg, self.run_dir, self.grid = cfg, run_dir, grid
        self.cache = make_cache(cfg)
        self.job = HydraConfig.get().job.num if grid else None
        self.graph = grid.graphs[self.job] if grid and self.job in grid.graphs else compose_cell(cfg)
        self.journal = StageJournal(grid.sweep_dir) if grid else None
        group = Path(grid.sweep_dir).name if grid else "single"
        self.builder = Builder(self.cache, self.journal, progress=cfg.progress, user=str(run_dir),
                               observers=events.observers_of(cfg, group))
        self.needed: set[str] = set()  # the stages this run read or built (the others: upstream of a cached stage)

    def build(self) -> None:
        """Make sure every stage the sink reads is in the cache (see the module docstring)."""
        if self.grid is None or self.grid.dispatch == "cell":
            server = None if self.grid else LLMServer(OmegaConf.to_container(self.cfg.llm, resolve=True), self.cfg.cache_dir)
            executor = LocalExecutor(self.builder, fail_fast=self.grid is None, server=server)
            outcomes = executor.run([self.graph.sink])
            failure = next((o.failure for o in outcomes.values() if o.failure), None)
            if failure:
                raise failure
            self.needed = set(outcomes)
            return
        try:
            self.builder.ensure_inputs(self.graph.sink, self.needed)
        except MissingInput as missing:
            raise _root_cause(missing.stage, self.grid, self.journal) from None

    def stage_records(self) -> dict[str, dict[str, Any]]:
        """Per stage name: its key, whether this cell reused it, and the seconds it took. A stage the grid
        built counts as built by the first cell that uses it, and as reused by the others. A stage the cell did
        not need (a stage downstream of it was in the cache) says so, and whether its entry is in the cache. A stage
        in the cache adds the hardware it was built on, and a model stage what its build computed (``throughput``:
        tokens, padding, tokens/s, FLOPs per token)."""
        return {name: {**self._record(stage), **code_record(stage), **self._from_manifest(stage)}
                for name, stage in self.graph.named.items()}

    def _from_manifest(self, stage: Stage) -> dict[str, Any]:
        if not self.cache.is_complete(stage.kind, stage.key):
            return {}
        manifest = self.cache.manifest(stage.kind, stage.key)
        return {k: manifest[k] for k in ("hardware", "throughput") if manifest.get(k)}

    def _record(self, stage: Stage) -> dict[str, Any]:
        own = self.builder.records.get(stage.key)  # what this cell got or built itself
        if own and not own.cached:
            return record_dict(own)
        if self.grid and self.grid.dispatch == "stage" and self.grid.built_for.get(stage.key) == self.job:
            journaled = self.journal.read(stage) or {}
            if journaled.get("state") == "built":
                return {"key": stage.key, "cached": False, "seconds": float(journaled.get("seconds", 0.0))}
        if own:
            return record_dict(own)
        if stage.key in self.needed:
            return {"key": stage.key, "cached": True, "seconds": 0.0}
        return {"key": stage.key, "cached": self.cache.is_complete(stage.kind, stage.key), "needed": False, "seconds": 0.0}

    def score(self, choices: dict[str, str]) -> Scored:
        sink, cache = self.graph.sink, self.cache
        dataset = dataset_at(str(cache.entry(sink.inputs["data"].kind, sink.inputs["data"].key)))
        rankings = read_rankings(cache.entry(sink.inputs["rankings"].kind, sink.inputs["rankings"].key) / "rankings.jsonl")
        oracle_path = file_path(self.graph.oracle, cache)
        examples = rendered_examples(self.graph, dataset, load_descriptions(oracle_path) if oracle_path else None)
        pairs = self.graph.named.get("score_pairs")
        if pairs is not None and cache.is_complete(pairs.kind, pairs.key):  # what truncation left the reranker
            examples["reranker_truncation"] = cache.manifest(pairs.kind, pairs.key).get("truncation")
        atomic_write_json(self.run_dir / "rendered_examples.json", examples)
        ordered = [rankings.get(q.id, Ranking(q.id, [], [])) for q in dataset.queries]
        data = {k: file_path(v, cache) for k, v in self.graph.data.items()}
        t0 = time.perf_counter()
        scored = score_rankings(self.cfg, self.run_dir, dataset, ordered, choices, data)
        result = scored.result
        result["split"] = split_record(self.cfg, cache, self.graph.named.get("dev_split"))
        positives = training_positives(self.graph, cache, ordered, int(self.cfg.topk))
        if positives is not None:
            result["training_positives"] = positives
        training = training_record(self.graph, cache)
        if training:
            result["training"] = training
        if self.graph.cascade:
            result["cascade"] = cascade_record(self.graph, cache, dataset)
        condensed = self.graph.named.get("condense")
        if condensed is not None:
            manifest = cache.manifest(condensed.kind, condensed.key)
            result["query"] = {"method": manifest["method"], "apply": str(self.cfg.query.apply),
                               "fallbacks": manifest["fallbacks"], "median_chars": manifest["median_chars"]}
            atomic_write_text(self.run_dir / "condensed_queries.jsonl",
                              (cache.entry(condensed.kind, condensed.key) / CONDENSED).read_text(encoding="utf-8"))
        reordered = self.graph.named.get("rerank") or self.graph.named.get(self.graph.cascade[-1][3] if self.graph.cascade else "")
        if reordered is not None and "fusion" in reordered.params:  # the fusion applied, and where its weight came from
            result["fusion"] = cache.manifest(reordered.kind, reordered.key)["fusion"]
        evaluate = StageRecord(key="-", cached=False, seconds=round(time.perf_counter() - t0, 3), path="")
        if "mine_negatives" in sink.inputs:
            negatives = sink.inputs["mine_negatives"]
            atomic_write_json(self.run_dir / FN_FILTER, read_json(cache.entry(negatives.kind, negatives.key) / FN_FILTER))
        if "train_pairs" in sink.inputs:
            pairs = cache.manifest(sink.inputs["train_pairs"].kind, sink.inputs["train_pairs"].key)
            for reason, n in pairs.get("skipped", {}).items():
                result["data"]["skipped"][reason] = result["data"]["skipped"].get(reason, 0) + n
                result["data"]["skip_examples"].setdefault(reason, pairs["skip_examples"][reason])
        stages = self.stage_records()
        result["stages"] = {**stages, "evaluate": {**record_dict(evaluate), **code_record(sink)}}
        noted = [r["quarantined"] for s in self.graph.stages() if self.journal
                 for r in [self.journal.read(s) or {}] if "quarantined" in r]
        result["cache"] = {"quarantined": [*noted, *(q for q in cache.quarantined if q not in noted)]}
        result["synth"] = {role.removeprefix("synth:"): {"key": s.key, "cached": stages.get(s.kind, {}).get("cached", True),
                                                         **cache.manifest(s.kind, s.key)["report"],
                                                         "usage": cache.manifest(s.kind, s.key)["usage"]}
                           for role, s in sink.inputs.items() if role.startswith("synth:")}
        downstream = {role.removeprefix("downstream:"): s for role, s in sink.inputs.items() if role.startswith("downstream:")}
        if downstream:
            result["downstream"] = downstream_section(cache, downstream)
            with_skill_use(result["downstream"], cache, downstream, dataset)
        scored.examples, scored.stages = examples, dict(self.graph.named)
        return scored


def cascade_record(graph: CellGraph, cache: StageCache, dataset: Dataset) -> list[dict[str, Any]]:
    """Per cascade step: its reranker, depth, the share of each query's GT within that depth of the ranking it reads
    (mean over the queries with GT), and its stages' build seconds per query (scoring and reordering; no training)."""
    queries = [q for q in dataset.queries if q.gt]
    out = []
    for preset, depth, source, target in graph.cascade:
        before = graph.named[source]
        ranked = read_rankings(cache.entry(before.kind, before.key) / "rankings.jsonl")
        recall = [len(set(q.gt) & set(ranked[q.id].ids[:depth] if q.id in ranked else ())) / len(q.gt) for q in queries]
        tag = target.removeprefix("rerank")
        seconds = sum(cache.manifest(s.kind, s.key).get("build_seconds", 0.0) for name, s in graph.named.items()
                      if name in (f"score_pairs{tag}", target) and cache.is_complete(s.kind, s.key))
        out.append({"reranker": preset, "depth": depth, "gt_recall": round(sum(recall) / len(recall), 6) if recall else None,
                    "seconds_per_query": round(seconds / max(len(dataset.queries), 1), 6)})
    return out


def with_skill_use(section: dict[str, Any], cache: StageCache, conditions: dict[str, Stage], dataset: Dataset) -> None:
    """Each downstream condition's skill-use rates (:func:`skillrouter.agents.skill_use.use_rates`) from its trials'
    kept agent logs: whether the agent read any skill the condition injected, and a GT skill's."""
    gt = {q.id: q.gt for q in dataset.queries}
    for condition in section["conditions"]:
        stage = conditions[condition["label"]]
        sets = read_json(cache.entry(stage.inputs["sets"].kind, stage.inputs["sets"].key) / SETS)
        trials = [(r["task"], cache.entry(TRIAL_KIND, r["key"])) for _, r in read_jsonl(cache.entry(stage.kind, stage.key) / TRIALS)
                  if r["reward"] is not None]
        condition.update(use_rates(trials, sets, gt))


def training_record(graph: CellGraph, cache: StageCache) -> dict[str, Any]:
    """Per training stage of the cell: its loss's first and last step and, when it stopped early, its dev curve (the
    objective per epoch, the epoch kept, whether the curve was flat)."""
    out = {}
    for name in ("train_encoder", "train_reranker"):
        stage = graph.named.get(name)
        if stage is None or not cache.is_complete(stage.kind, stage.key):
            continue
        manifest = cache.manifest(stage.kind, stage.key)
        out[name] = {k: manifest[k] for k in ("loss_first", "loss_last", "dev") if k in manifest}
    return out


def code_record(stage: Stage) -> dict[str, Any]:
    """The code a stage's artifact was made by (its modules and their fingerprint): what ``python -m
    skillrouter.report --check`` compares with the checkout to find the runs that code has changed since."""
    return {"code": stage.fingerprint, "modules": list(stage.modules)}


def training_positives(graph: CellGraph, cache: StageCache, rankings: list[Ranking], topk: int) -> dict[str, Any] | None:
    """Where a trained reranker put the skills it was trained on as positives, against where the first stage put
    them: their share of the reranked heads (``candidate_share``) and of the final top-1 (``top1_share``). A reranker
    that learned *which skills were positives* rather than which skill fits the query puts them first far more often
    than they are candidates (the built-in data's shortcut: 60 of 60 top-1 picks against 23 % of the candidates)."""
    trained, retrieval = graph.named.get("train_reranker"), graph.named.get("retrieve")
    if trained is None or retrieval is None or not rankings:
        return None
    pairs = trained.inputs["pairs"]
    positives = {p for ex in read_examples(cache.entry(pairs.kind, pairs.key)) for p in ex.positives}
    first = read_rankings(cache.entry(retrieval.kind, retrieval.key) / "rankings.jsonl")
    heads = [first[r.qid].ids[:topk] for r in rankings if r.qid in first]
    shown = sum(len(h) for h in heads)
    top1 = sum(1 for r in rankings if r.ids and r.ids[0] in positives)
    return {"skills": len(positives), "queries": len(rankings), "top1": top1, "top1_share": round(top1 / len(rankings), 4),
            "candidate_share": round(sum(i in positives for h in heads for i in h) / shown, 4) if shown else None}


def split_record(cfg: DictConfig, cache: StageCache, dev: Stage | None) -> dict[str, Any]:
    """The split a cell scored and the dev split its training held out: a tuned number says what it was tuned on."""
    record: dict[str, Any] = {"scored": scored_split(cfg), "allow_test_tuning": bool(cfg.get("allow_test_tuning", False))}
    if dev is not None and cache.is_complete(dev.kind, dev.key):
        record["dev"] = cache.manifest(dev.kind, dev.key)["split"]
    return record


def rendered_examples(graph: CellGraph, dataset: Dataset, oracle: dict[str, str] | None) -> dict[str, Any]:
    """The exact text of one skill and one query as each stage saw them: prompt wording is never ambiguous."""
    skill, query = dataset.skills[0], dataset.queries[0]
    enc, rr = graph.texts["encoder"], graph.texts["reranker"]
    return {"skill": {"id": skill.id, "encoder": enc.skill(skill, oracle), "reranker": rr.skill(skill, oracle)},
            "query": {"id": query.id, "encoder": enc.query(query.text), "reranker": rr.query(query.text)}}


def evaluate_cell(cfg: DictConfig, run_dir: Path, choices: dict[str, str]) -> Scored:
    """Run one cell end to end and score it."""
    t0 = time.perf_counter()
    cell = CellRun(cfg, run_dir, _grid.get())
    cell.build()
    scored = cell.score(choices)
    scored.result["seconds"] = round(time.perf_counter() - t0, 3)
    return scored


def score_rankings(cfg: DictConfig, run_dir: Path, dataset: Dataset, ordered: list[Ranking], choices: dict[str, str],
                   data: dict[str, Any]) -> Scored:
    """Score a set of rankings (one per query, in query order) under the ``eval`` config, a cell's own
    or an external system's (``skillrouter.score``): writes ``rankings.jsonl``, ``predictions.json`` and
    ``per_query.json`` to ``run_dir``."""
    write_rankings(run_dir / "rankings.jsonl", ordered)
    write_predictions(run_dir / "predictions.json", ordered)
    metrics_spec = parse_metrics(cfg.eval.metrics)
    breakdown = list(cfg.eval.breakdown)
    queries, strata = derive(dataset.queries, dataset.skills, breakdown)
    by_qid = {r.qid: r.ids for r in ordered}
    rows = per_query_rows(by_qid, queries, metrics_spec)
    metrics, counts = aggregate_rows(rows, queries, metrics_spec, breakdown)
    atomic_write_json(run_dir / "per_query.json", rows)
    return Scored({
        "choices": choices, "metrics": metrics, "counts": counts, "n_queries": counts["all"], "status": "completed",
        "recall_curve": [round(r, 6) for r in recall_curve(by_qid, dataset.queries)],
        "eval": {"metrics": [m.name for m in metrics_spec], "breakdown": breakdown, "strata": strata},
        "data": {"config": data, "tier": OmegaConf.to_container(cfg.tier), "n_skills": len(dataset.skills),
                 "skipped": dict(dataset.report.skipped), "skip_examples": dict(dataset.report.examples)},
    }, rows, queries, ordered)


def failure_record(choices: dict[str, str], exc: BaseException) -> dict[str, Any]:
    """``metrics.json`` of a failed cell: the error, and the stage it came from when it came from one."""
    if isinstance(exc, StageFailed):
        return {"choices": choices, "status": "failed", "error": str(exc),
                "failed_stage": {"stage": exc.stage.kind, "key": exc.stage.key, "error": exc.error}}
    return {"choices": choices, "status": "failed", "error": f"{type(exc).__name__}: {exc}"}


def run_cell(cfg: DictConfig, run_dir: Path, choices: dict[str, str], group: str,
             evaluate: Callable[[DictConfig, Path, dict[str, str]], Scored] = evaluate_cell) -> dict[str, Any]:
    """Run a cell (``evaluate``: a grid cell, or scoring an external prediction file) and record its
    status; failures are written, logged in one line and re-raised."""
    run_dir.mkdir(parents=True, exist_ok=True)
    respect_cpu_allocation()
    quiet_library_bars()
    atomic_write_json(run_dir / "status.json", {"status": "running", "started": time.time(), "choices": choices})
    atomic_write_json(run_dir / "provenance.json", provenance(cfg))
    observers, cell = events.observers_of(cfg, group), str(run_dir)
    events.publish(observers, events.CellStarted(cell, group, choices, OmegaConf.to_container(cfg, resolve=True)))
    try:
        scored = evaluate(cfg, run_dir, choices)
        result = scored.result
        events.publish(observers, scored.event(cell, str(cfg.cache_dir)))
    except Exception as exc:
        events.publish(observers, events.CellEnded(cell, failed=True))
        cause = exc.cause if isinstance(exc, StageFailed) and exc.cause else exc
        (run_dir / "error.txt").write_text("".join(traceback.format_exception(cause)))
        failed = failure_record(choices, exc)
        atomic_write_json(run_dir / "metrics.json", failed)
        atomic_write_json(run_dir / "status.json", {**failed, "ended": time.time()})
        log.error("cell failed: %s (traceback in %s)", failed["error"], run_dir / "error.txt")
        raise
    events.publish(observers, events.CellEnded(cell))
    atomic_write_json(run_dir / "metrics.json", result)
    atomic_write_json(run_dir / "status.json", {"status": "completed", "ended": time.time(), "choices": choices,
                                                "stages": result["stages"]})
    headline = " ".join(f"{k}={v:.4f}" for k, v in list(result["metrics"].items())[:3] if v is not None)
    log.info("%s (n=%d) -> %s", headline, result["n_queries"], run_dir / "metrics.json")
    return result
