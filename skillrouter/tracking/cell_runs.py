"""A W&B run per cell, made to be compared in the runs table.

* config: the grid's choices as top-level keys (one runs-table column each: ``encoder``, ``loss``, ``topk``...),
  the resolved config under ``cfg``, and under ``stages.<name>`` the artifact (name, digest, key) of every
  stage the cell read — online the run also declares them with ``use_artifact``, so the lineage graph
  shows which trained encoder and reranker fed which cells;
* summary: every metric (``single/``, ``multi/`` and breakdown keys included), counts, stage reuse and, with
  downstream trials, ``success@k`` of each routed condition beside ``success/none`` and ``success/gold``;
* ``per_query``: query text (capped), GT ids, the top-10 ids, each GT's rank and every metric;
* ``recall_curve`` (R@K line plot) and ``rendered_examples`` (the exact texts each stage saw).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..events import CellScored, CellStarted
from ..secrets import mask, scrub
from .settings import TrackingSettings, finish, guarded
from .stage_runs import artifact_name, artifact_record

QUERY_CAP = 300
TOP = 10


def run_name(choices: dict[str, str]) -> str:
    keep = ("encoder", "reranker", "loss", "fields", "tier", "topk", "fn_filter", "seed")
    return ",".join(f"{k}={choices[k]}" for k in keep if k in choices)


def per_query_table(scored: CellScored) -> tuple[list[str], list[list[Any]]]:
    """One row per query: its text (capped), GT ids, the top-10, each GT's rank (0: not ranked), every metric."""
    names = sorted({m for row in scored.rows.values() for m in row})
    by_qid = {r.qid: r.ids for r in scored.rankings}
    columns = ["qid", "query", "gt", f"top{TOP}", "gt_ranks", *names]
    data = []
    for q in scored.queries:
        ranked = by_qid.get(q.id, [])
        position = {sid: i + 1 for i, sid in enumerate(ranked)}
        data.append([q.id, mask(q.text[:QUERY_CAP]), " ".join(q.gt), " ".join(ranked[:TOP]),
                     " ".join(f"{g}:{position.get(g, 0)}" for g in q.gt), *[scored.rows.get(q.id, {}).get(m) for m in names]])
    return columns, data


def used_stages(scored: CellScored) -> dict[str, dict[str, Any]]:
    """Per stage name the cell read: its artifact name, key and (when its stage run logged one) digest."""
    out = {}
    for name, stage in scored.stages.items():
        record = artifact_record(Path(scored.cache_root), stage.kind, stage.key) or {}
        out[name] = {"artifact": artifact_name(stage.kind, stage.key), "type": stage.kind, "key": stage.key,
                     "digest": record.get("digest")}
    return out


class CellTracker:
    """The W&B run of one cell, from its events; every W&B call guarded (a tracking failure never fails a cell)."""

    def __init__(self, settings: TrackingSettings, started: CellStarted):
        self.settings, self.run = settings, None
        choices = dict(started.choices)
        config = {**choices, "cfg": dict(started.config)}
        with guarded("starting the cell's run"):
            self.run = settings.init(Path(started.run_dir), "cell", run_name(choices), config,
                                     tags=[f"{k}={v}" for k, v in choices.items()])

    def log_result(self, scored: CellScored) -> None:
        if self.run is None:
            return
        with guarded("logging the cell's results"):
            self._log(scored)

    def _log(self, scored: CellScored) -> None:
        import wandb

        run, result = self.run, scored.result
        stages = used_stages(scored)
        run.config.update({"stages": stages}, allow_val_change=True)
        if not run.offline:
            for s in stages.values():
                run.use_artifact(f"{s['artifact']}:latest")
        summary = {k: v for k, v in result["metrics"].items() if v is not None}
        summary.update({f"n/{k}": v for k, v in result["counts"].items()})
        summary.update({f"stage/{k}/cached": int(v["cached"]) for k, v in result["stages"].items()})
        for c in (result.get("downstream") or {}).get("conditions", []):
            name = f"success@{c['k']}" if c["condition"] == "routed" else f"success/{c['condition']}"
            summary.update({name: c["success"], f"{name}/spread": c["spread"], f"{name}/exceptions": c["exceptions"]})
        run.summary.update(summary)
        columns, data = per_query_table(scored)
        curve = wandb.Table(columns=["k", "recall"], data=[[k + 1, r] for k, r in enumerate(result.get("recall_curve", []))])
        examples = wandb.Table(columns=["item", "id", "stage", "text"], data=scrub([
            [item, scored.examples[item]["id"], stage, scored.examples[item][stage]]
            for item in ("skill", "query") if item in scored.examples for stage in ("encoder", "reranker")]))
        run.log({"per_query": wandb.Table(columns=columns, data=data), "rendered_examples": examples,
                 "recall_curve": wandb.plot.line(curve, "k", "recall", title="R@K")})

    def finish(self, failed: bool = False) -> None:
        if self.run is not None:
            with guarded("finishing the cell's run"):
                finish(self.run, exit_code=1 if failed else 0)
            self.run = None
