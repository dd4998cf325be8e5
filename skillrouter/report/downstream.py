"""The downstream table in the SkillRouter paper's layout, and its cases, from the runs' ``metrics.json`` →
``downstream`` sections.

Rows: no skills, gold skills (the oracle upper bound), then each router (encoder + reranker) at each k.
Columns: task success per agent (mean over tasks of the mean over trials, in %), their average, and the share
of the no-skill -> gold uplift the row recovers (averaged over agents). † marks a router row whose per-task
success differs from the no-skill row's at p < 0.05 (two-sided paired randomization over task x agent pairs,
the test the other tables use over queries). The cases: tasks where two routers' routed sets (same agent, same
k) ended differently, with what each injected."""
from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import pandas as pd

from ..data.jsonl import atomic_write_text
from .collect import completed_runs
from .significance import paired_randomization
from .tables import system_label

NOTES = ["Success in %: per agent, the mean over tasks of the mean reward over trials that ran (a trial that never "
         "reached its verifier is counted apart); uplift recovered = (router - no skills) / (gold - no skills).",
         "Skill use in %: the trials (that ran) whose agent read a skill the condition injected (its logs or trajectory "
         "name a file in that skill's folder), and a GT skill's; averaged over agents.",
         "† p < 0.05 against no skills, two-sided paired randomization over task x agent pairs (10,000 sign flips)."]


def downstream_rows(run_roots: list[Path], data: str | None = None) -> list[dict[str, Any]]:
    """One row per (run, condition): the router, agent, condition, success and per-task rewards."""
    rows = []
    for run, metrics in completed_runs(run_roots, data):
        down, choices = metrics.get("downstream"), metrics.get("choices", {})
        if not down:
            continue
        router = system_label(pd.Series({k: choices.get(k, "none") for k in ("encoder", "reranker", "loss")}))
        for c in down["conditions"]:
            rows.append({"run": str(run), "router": router, "agent": choices.get("agent", down["agent"]),
                         "label": c["label"], "condition": c["condition"], "k": c["k"], "success": c["success"],
                         "per_task": c["per_task"], "injected": c["injected"],
                         "skill_use_rate": c.get("skill_use_rate"), "gt_skill_use_rate": c.get("gt_skill_use_rate")})
    return rows


def _row_name(r: dict[str, Any]) -> str:
    return {"none": "no skills", "gold": "gold skills"}.get(r["condition"], f"{r['router']} top-{r['k']}")


def downstream_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The paper's layout (see the module docstring); the latest run wins where several give one cell."""
    cell: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        cell[(_row_name(r), r["agent"])] = r
    agents = sorted({a for _, a in cell})
    order = ["no skills", "gold skills"] + sorted({n for n, _ in cell} - {"no skills", "gold skills"})
    out = []
    for name in [n for n in order if any((n, a) in cell for a in agents)]:
        line: dict[str, Any] = {"condition": name}
        shares, pairs = [], ([], [])
        for agent in agents:
            r, none, gold = cell.get((name, agent)), cell.get(("no skills", agent)), cell.get(("gold skills", agent))
            line[agent] = None if r is None or r["success"] is None else round(100 * r["success"], 1)
            if r is None or none is None:
                continue
            if gold is not None and r["condition"] == "routed" and gold["success"] - none["success"] > 0:
                shares.append((r["success"] - none["success"]) / (gold["success"] - none["success"]))
            for task, reward in r["per_task"].items():
                if task in none["per_task"]:
                    pairs[0].append(reward)
                    pairs[1].append(none["per_task"][task])
        present = [line[a] for a in agents if line[a] is not None]
        line["average"] = round(statistics.fmean(present), 1) if present else None
        for column, key in (("skill use", "skill_use_rate"), ("GT skill use", "gt_skill_use_rate")):
            rates = [r[key] for a in agents if (r := cell.get((name, a))) is not None and r.get(key) is not None]
            line[column] = round(100 * statistics.fmean(rates), 1) if rates else None
        line["uplift recovered"] = round(100 * statistics.fmean(shares), 1) if shares else None
        marked = name != "no skills" and pairs[0] and paired_randomization(*pairs) < 0.05
        line["average"] = f"{line['average']:.1f}†" if marked and line["average"] is not None else line["average"]
        out.append(line)
    return pd.DataFrame(out, columns=["condition", *agents, "average", "uplift recovered", "skill use", "GT skill use"])


def downstream_cases(rows: list[dict[str, Any]]) -> str:
    """Markdown: per agent and k, every task whose routed sets from two routers ended differently."""
    by: dict[tuple[str, int], dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in rows:
        if r["condition"] == "routed":
            by[(r["agent"], r["k"])][r["router"]] = r
    lines = ["# Downstream cases: tasks where routers' routed sets ended differently", ""]
    for (agent, k), routers in sorted(by.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        names = sorted(routers)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                ra, rb = routers[a], routers[b]
                diff = sorted(t for t in ra["per_task"] if t in rb["per_task"] and ra["per_task"][t] != rb["per_task"][t])
                if not diff:
                    continue
                lines += [f"## {agent}, top-{k}: {a} vs {b}", "", f"| task | {a} | {b} | injected by {a} | injected by {b} |",
                          "|---|---|---|---|---|"]
                lines += [f"| {t} | {ra['per_task'][t]:.2f} | {rb['per_task'][t]:.2f} | {', '.join(ra['injected'].get(t, []))} | "
                          f"{', '.join(rb['injected'].get(t, []))} |" for t in diff]
                lines.append("")
    if len(lines) == 2:
        lines.append("No two routers' routed sets ended differently on a task (or fewer than two routers ran).")
    return "\n".join(lines) + "\n"


def write_downstream_cases(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    path = out / "cases" / "downstream.md"
    atomic_write_text(path, downstream_cases(rows))
    return [path]
