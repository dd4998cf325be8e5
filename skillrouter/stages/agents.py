"""Downstream stages: what each condition injects into each task (``skill_sets``), and agent trials run by
Harbor in containers (``agent_trials``, resource class ``agent``).

``skill_sets`` joins the task tree to the benchmark's queries by task id, validates it, leaves out (counted,
named) the tasks whose verifier reads the skills folder, and writes each distinct set once as SKILL.md folders.
``none`` and ``gold`` read no ranking, so their stages — and trials — are one for every router of a grid.

``agent_trials`` owns a condition's trials, one Harbor job per batch of missing trials (Harbor's own
concurrency and retries inside it). Each trial is a cache entry of its own (:mod:`skillrouter.agents.trials`),
published the moment Harbor finishes it: a killed or requeued build resumes with the finished trials kept,
and two conditions (or routers) that inject the same set for a task share its trials. Tasks run from copies
whose ``environment/skills/`` holds exactly the set; the task tree is never touched."""
from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping

from ..agents import harbor as harbor_module, skill_sets as sets_module, tasks as tasks_module, trials as trials_module
from ..agents.harbor import AgentSpec
from ..agents.skill_sets import chosen_ids, place, write_set
from ..agents.tasks import SKILLS_DIR, read_tasks
from ..agents.trials import RESULT, TRIAL_KIND, TrialRow, copy_masked, summarize, trial_key, uplift_recovered
from ..cache.store import StageCache, tree_fingerprint
from ..data.jsonl import atomic_write_json, atomic_write_jsonl, read_json, read_jsonl
from ..data.types import DataError
from ..rankings import read_rankings
from .. import events
from .graph import BuildContext, FileInput, Items, Stage

log = logging.getLogger(__name__)
SETS, TASKS, TRIALS = "sets.json", "tasks.json", "trials.jsonl"


def _build_sets(ctx: BuildContext) -> dict[str, Any]:
    p, opts = ctx.params, ctx.stage.options
    dataset = ctx.dataset()
    tasks = read_tasks(opts["tasks_root"], p["tasks"])
    queries = {q.id: q for q in dataset.queries}
    rankings = read_rankings(ctx.input("rankings") / "rankings.jsonl") if ctx.has("rankings") else {}
    skills = {s.id: s for s in dataset.skills}
    pool_tree = Path(opts["pool_tree"]) if opts.get("pool_tree") else None
    folder = ctx.out / "sets"
    sets, kept, excluded, missing = {}, [], [], {}
    for task in tasks:
        if task.id not in queries:
            raise DataError(task.path, None, None, f"task {task.id!r}: no query of the benchmark has this id (tasks join "
                                                   "queries by id; pick tasks with downstream.tasks=[...])")
        if task.verifier_reads_skills and not p["verifier_reading"]:
            excluded.append({"task": task.id, "reason": f"its verifier reads the skills folder ({task.verifier_reads_skills})"})
            continue
        ids = chosen_ids(p["condition"], p.get("k"), queries[task.id], rankings.get(task.id))
        if [i for i in ids if i not in skills]:
            missing[task.id] = [i for i in ids if i not in skills]
        placed = place([skills[i] for i in ids if i in skills])
        staging = folder / f".{task.id}"
        digest = write_set(staging, placed, pool_tree)
        if (folder / digest).exists():
            shutil.rmtree(staging)
        else:
            staging.rename(folder / digest)
        sets[task.id] = {"digest": digest, "skills": [x.to_json() for x in placed]}
        kept.append(task.to_json())
    atomic_write_json(ctx.out / SETS, sets)
    atomic_write_json(ctx.out / TASKS, {"tasks": kept, "excluded": excluded, "missing_skills": missing,
                                        "queries_without_task": len(set(queries) - {t.id for t in tasks})})
    return {"n_tasks": len(kept), "n_excluded": len(excluded), "items": len(kept)}


def skill_sets(condition: str, k: int | None, tasks_root: str, tasks: list[str] | None, verifier_reading: bool,
               data: Stage, rankings: Stage | None, pool_tree: str | None = None) -> Stage:
    """The skills ``condition`` injects into each task of ``tasks_root`` (``rankings``: the cell's final ranking,
    for ``routed``). Keyed by the task tree's content (and a SKILL.md pool tree's, whose folders are copied)."""
    if condition not in sets_module.CONDITIONS:
        raise ValueError(f"downstream.skills must be among {', '.join(sets_module.CONDITIONS)}, got {condition!r}")
    params = {"condition": condition, **({"k": k} if condition == "routed" else {}), "tasks": tasks,
              "verifier_reading": verifier_reading}
    files = {"tasks": FileInput((tasks_root,), tree_fingerprint(tasks_root))}
    if pool_tree:
        files["pool_tree"] = FileInput((pool_tree,), tree_fingerprint(pool_tree))
    inputs = {"data": data, **({"rankings": rankings} if condition == "routed" else {})}
    return Stage("skill_sets", _build_sets, params, inputs=inputs, files=files, cheap=True,
                 options={"tasks_root": tasks_root, "pool_tree": pool_tree},
                 code=(tasks_module.__name__, sets_module.__name__))


class TrialBatch:
    """The missing trials of one ``agent_trials`` build, run as Harbor jobs from task copies in the build's work
    folder; each finished trial is published as its own cache entry while Harbor runs."""

    def __init__(self, ctx: BuildContext, agent: AgentSpec, slots: list[dict[str, Any]], tasks: Mapping[str, dict]):
        self.ctx, self.agent, self.tasks = ctx, agent, tasks
        self.cache: StageCache = ctx.cache
        self.work = ctx.work or ctx.out
        self.jobs = self.work / "jobs"
        self.consumed_file = self.work / "consumed.jsonl"
        self.consumed = {r["trial"]: r["key"] for _, r in read_jsonl(self.consumed_file)} if self.consumed_file.exists() else {}
        self.pending: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)  # (task, digest) -> slots to fill
        self.found = {slot["key"] for slot in slots if self.done(slot["key"])}  # in the cache before this attempt
        for slot in slots:
            if slot["key"] not in self.found:
                self.pending[(slot["task"], slot["digest"])].append(slot)
        self.outcomes: dict[tuple[str, str], list[harbor_module.TrialOutcome]] = defaultdict(list)
        self.published = 0

    def done(self, key: str) -> bool:
        return self.cache.is_complete(TRIAL_KIND, key) and self.cache.check(TRIAL_KIND, key)

    def copy_of(self, task: str, digest: str) -> Path:
        return (self.work / "copies" / digest[:16] / task).resolve()

    def _materialize(self, task: str, digest: str) -> Path:
        """A copy of the task whose skills folder holds exactly the set (made once; the tree is never touched)."""
        copy = self.copy_of(task, digest)
        if not (copy / tasks_module.CONFIG).exists():
            staging = copy.with_name(f".{task}")
            shutil.rmtree(staging, ignore_errors=True)
            shutil.copytree(self.tasks[task]["path"], staging, ignore=_skip_skills(Path(self.tasks[task]["path"])))
            shutil.copytree(self.ctx.input("sets") / "sets" / digest, staging / SKILLS_DIR)
            staging.rename(copy)
        return copy

    def harvest(self) -> None:
        """Publish every trial Harbor has finished into the slot it fills (the first still open of its copy)."""
        if not self.jobs.exists():
            return
        by_path = {str(self.copy_of(t, d)): (t, d) for t, d in self.pending}
        for outcome in harbor_module.finished_trials(self.jobs):
            where = by_path.get(outcome.task_path)
            if where is None or outcome.trial in self.consumed:
                continue
            if not outcome.ran:
                self.outcomes[where].append(outcome)
                continue
            open_slots = [s for s in self.pending[where] if not self.done(s["key"])]
            if not open_slots:
                continue
            self._publish(open_slots[0], outcome)

    def _publish(self, slot: dict[str, Any], outcome: harbor_module.TrialOutcome) -> None:
        record = {"task": slot["task"], "index": slot["index"], "skills": slot["digest"], "agent": self.agent.identity(),
                  "reward": outcome.reward, "exception": outcome.exception, "seconds": outcome.seconds,
                  "harbor_trial": outcome.trial}

        def build(out: Path) -> dict[str, Any]:
            atomic_write_json(out / RESULT, record)
            copy_masked(outcome.folder, out)
            return {"reward": outcome.reward}

        self.cache.get_or_build(TRIAL_KIND, slot["key"], build, manifest={"params": record})
        self.consumed[outcome.trial] = slot["key"]
        with open(self.consumed_file, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"trial": outcome.trial, "key": slot["key"]}) + "\n")
        self.published += 1
        events.log_step({"trials_done": self.published, "reward": outcome.reward}, self.published)

    def run(self, settings: Mapping[str, Any], llm_url: str | None) -> None:
        """Harvest what an earlier, killed build finished, then one Harbor job per number of missing trials."""
        self.jobs.mkdir(parents=True, exist_ok=True)
        self.harvest()
        groups: dict[int, list[Path]] = defaultdict(list)
        for (task, digest), slots in self.pending.items():
            missing = sum(1 for s in slots if not self.done(s["key"]))
            if missing:
                groups[missing].append(self._materialize(task, digest))
        env = harbor_module.harbor_env(self.agent)
        for attempts, copies in sorted(groups.items()):
            name = f"batch-{attempts}x{len(copies)}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
            log.info("harbor: %d task copies x %d trials with %s (%s)", len(copies), attempts, self.agent.name,
                     settings["environment"])
            config = harbor_module.job_config(name, self.jobs, copies, self.agent, attempts,
                                              environment=settings["environment"], concurrency=settings["concurrency"],
                                              retries=settings["retries"], timeout_multiplier=settings["timeout_multiplier"],
                                              llm_url=llm_url)
            status = harbor_module.run(settings["harbor"], config, self.work / f"{name}.yaml", env,
                                       self.work / "harbor.log", self.harvest)
            if status != 0 and not (self.jobs / name / "result.json").exists():
                raise RuntimeError(f"harbor exited with status {status} before running its job: see "
                                   f"{self.work / 'harbor.log'} — {_tail(self.work / 'harbor.log')}")

    def rows(self, slots: list[dict[str, Any]]) -> list[TrialRow]:
        """Every slot's outcome: its published trial, or the exception that kept it from running."""
        rows = []
        for slot in slots:
            if self.done(slot["key"]):
                res = read_json(self.cache.entry(TRIAL_KIND, slot["key"]) / RESULT)
                rows.append(TrialRow(slot["task"], slot["index"], slot["key"], res["reward"], res.get("exception"),
                                     reused=slot["key"] in self.found))
            else:
                raised = self.outcomes.get((slot["task"], slot["digest"]))
                rows.append(TrialRow(slot["task"], slot["index"], slot["key"], None,
                                     raised[-1].exception if raised else "never ran"))
        return rows


def _skip_skills(task_dir: Path):
    skills = (task_dir / SKILLS_DIR).resolve()
    return lambda folder, names: [n for n in names if (Path(folder) / n).resolve() == skills]


def _tail(path: Path, n: int = 3) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])


def _llm_url(agent: AgentSpec, configured: str | None) -> str | None:
    from ..synth.client import URL_ENV

    url = os.environ.get(URL_ENV) or configured
    if agent.llm and not url:
        raise RuntimeError(f"agent {agent.name} talks to the grid's LLM: choose llm=stub|vllm|openai (llm.url)")
    return url


def _build_trials(ctx: BuildContext) -> dict[str, Any]:
    p, opts = ctx.params, ctx.stage.options
    agent = AgentSpec(**opts["agent"])
    if agent.api_key_env and not os.environ.get(agent.api_key_env):
        raise RuntimeError(f"agent {agent.name} reads its key from ${agent.api_key_env}, which is not set")
    sets = read_json(ctx.input("sets") / SETS)
    tasks = {t["id"]: {**t, "path": str(Path(ctx.stage.inputs["sets"].options["tasks_root"]) / t["id"])}
             for t in read_json(ctx.input("sets") / TASKS)["tasks"]}
    slots = [{"task": task, "index": i, "digest": s["digest"],
              "key": trial_key(tasks[task]["fingerprint"], s["digest"], agent.identity(), p["environment"],
                               p["timeout_multiplier"], i)}
             for task, s in sets.items() for i in range(p["trials"])]
    batch = TrialBatch(ctx, agent, slots, tasks)
    if batch.pending:
        batch.run({**opts["run"], "environment": p["environment"], "timeout_multiplier": p["timeout_multiplier"]},
                  _llm_url(agent, opts.get("llm_url")))
    rows = batch.rows(slots)
    atomic_write_jsonl(ctx.out / TRIALS, (r.to_json() for r in rows))
    events.log_table("trials", ["task", "index", "reward", "exception", "reused", "key"],
                   [[r.task, r.index, r.reward, r.exception, r.reused, r.key] for r in rows])
    summary = summarize(rows)
    events.log_summary({k: v for k, v in summary.items() if k in ("success", "spread", "trials", "exceptions")})
    return {"n_trials": len(rows), "ran": summary["trials"], "exceptions": summary["exceptions"],
            "reused": sum(r.reused for r in rows), "harbor_retries": harbor_module.retries(batch.jobs),
            "run_here": batch.published, "items": len(sets)}


def trial_counts(stage: Stage, cache: StageCache) -> dict[str, float]:
    """What a plan says of an ``agent_trials`` stage before it runs: its trials (tasks x trials), those in the cache
    already (where each task's set is known: its ``skill_sets`` entry is built, or the condition injects nothing),
    and the agent-hours the others may take under their task.toml timeouts (agent + verifier, times the multiplier)."""
    sets_stage, p = stage.inputs["sets"], stage.params
    tasks = [t for t in read_tasks(sets_stage.options["tasks_root"], sets_stage.params["tasks"])
             if sets_stage.params["verifier_reading"] or not t.verifier_reads_skills]
    if cache.is_complete(sets_stage.kind, sets_stage.key):
        digests = {t: v["digest"] for t, v in read_json(cache.entry(sets_stage.kind, sets_stage.key) / SETS).items()}
    elif sets_stage.params["condition"] == "none":
        digests = {t.id: sets_module.empty_digest() for t in tasks}
    else:
        digests = {}
    cached, hours = 0, 0.0
    for task in tasks:
        for i in range(p["trials"]):
            key = trial_key(task.fingerprint, digests[task.id], p["agent"], p["environment"], p["timeout_multiplier"], i) \
                if task.id in digests else None
            if key and cache.is_complete(TRIAL_KIND, key):
                cached += 1
            else:
                hours += (task.timeouts["agent"] + task.timeouts["verifier"]) * p["timeout_multiplier"] / 3600
    return {"agent_trials": len(tasks) * p["trials"], "agent_trials_cached": cached, "agent_hours": round(hours, 3)}


def agent_trials(sets: Stage, agent: AgentSpec, trials: int, environment: str, timeout_multiplier: float,
                 run: Mapping[str, Any], llm_url: str | None = None) -> Stage:
    """``trials`` Harbor trials of ``agent`` on every task of ``sets`` (see the module docstring). ``run``: how
    Harbor runs them (its executable, concurrency, retries), which never changes a result's key."""
    if trials < 1:
        raise ValueError("downstream.trials must be at least 1")
    params = {"agent": agent.identity(), "trials": trials, "environment": environment,
              "timeout_multiplier": timeout_multiplier}
    return Stage("agent_trials", _build_trials, params, inputs={"sets": sets}, resource="agent", resumable=True,
                 options={"agent": asdict(agent), "run": dict(run), "llm_url": llm_url, "llm_server": agent.llm},
                 items=Items("sets", "n_tasks", "trials"), counts=trial_counts,
                 code=(harbor_module.__name__, trials_module.__name__))


def downstream_section(cache: StageCache, conditions: Mapping[str, Stage]) -> dict[str, Any]:
    """``metrics.json``'s ``downstream``: per condition (``label -> agent_trials stage``) its success, spread,
    per-task means, trials and exceptions, the injected skills; the tasks left out and why; the share of the
    no-skill -> gold uplift each routed condition recovers when both are present."""
    first = next(iter(conditions.values()))
    sets_stage = first.inputs["sets"]
    tasks_info = read_json(cache.entry(sets_stage.kind, sets_stage.key) / TASKS)
    out: dict[str, Any] = {"agent": first.params["agent"]["name"], "model": first.params["agent"]["model"],
                           "environment": first.params["environment"], "trials_per_task": first.params["trials"],
                           "tasks": len(tasks_info["tasks"]), "excluded": tasks_info["excluded"], "conditions": []}
    for label, stage in conditions.items():
        sets_entry = cache.entry(stage.inputs["sets"].kind, stage.inputs["sets"].key)
        rows = [TrialRow(**{k: r[k] for k in ("task", "index", "key", "reward", "exception", "reused")})
                for _, r in read_jsonl(cache.entry(stage.kind, stage.key) / TRIALS)]
        sets = read_json(sets_entry / SETS)
        injected = {t: [s["id"] for s in v["skills"]] for t, v in sets.items()}
        renamed = [{"task": t, **s} for t, v in sets.items() for s in v["skills"] if "renamed" in s]
        condition = stage.inputs["sets"].params["condition"]
        out["conditions"].append({"label": label, "condition": condition, "k": stage.inputs["sets"].params.get("k"),
                                  **summarize(rows), "injected": injected, "renamed": renamed})
    success = {c["label"]: c["success"] for c in out["conditions"]}
    if "none" in success and "gold" in success:
        out["uplift_recovered"] = {c["label"]: uplift_recovered(c["success"], success["none"], success["gold"])
                                   for c in out["conditions"] if c["condition"] == "routed"}
    return out
