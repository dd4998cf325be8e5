"""W&B tracking, checked by reading the offline run files back (W&B's own record log), not our calls."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from skillrouter.events import CellStarted
from skillrouter.tracking.cell_runs import CellTracker
from skillrouter.tracking.offline import offline_runs, table
from skillrouter.secrets import REDACTED, redact_arg, scrub
from skillrouter.tracking.settings import TrackingSettings
from skillrouter.tracking.stage_runs import artifact_name, artifact_record
from skillrouter.tracking.sync import sync
from skillrouter.tracking.workspace import main as workspace_main

from .conftest import ROOT, write_jsonl
from .tracking_job import STEPS, build, stage

OFFLINE = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
SECRET, WANDB_KEY = "sk-test-0123456789abcdef", "sk-secret-never-logged-0123456789"


@pytest.fixture
def offline(monkeypatch):
    """W&B offline in this process; afterwards its service is shut down and forgotten (``WANDB_SERVICE``,
    which later tests' child processes would otherwise connect to)."""
    import wandb

    for k, v in OFFLINE.items():
        monkeypatch.setenv(k, v)
    yield
    wandb.teardown()
    os.environ.pop("WANDB_SERVICE", None)


def _env(**extra: str) -> dict[str, str]:
    """A child's environment with W&B's own service left out: this process's (from the in-process tests) would
    outlive a killed child and keep its run open, which a real requeued job never finds."""
    return {k: v for k, v in {**os.environ, **OFFLINE, **extra}.items() if k != "WANDB_SERVICE"}


def _job(root: Path, *extra: str) -> subprocess.CompletedProcess:
    env = _env()
    return subprocess.run([sys.executable, "-m", "tests.tracking_job", str(root), *extra], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_secrets_are_redacted_by_key_and_masked_by_value(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    assert scrub({"llm": {"api_key": "x", "api_key_env": "OPENAI_API_KEY", "note": f"key {SECRET}"}}) == \
        {"llm": {"api_key": REDACTED, "api_key_env": "OPENAI_API_KEY", "note": f"key {REDACTED}"}}
    assert redact_arg("+llm.api_key=abc") == f"+llm.api_key={REDACTED}"
    assert redact_arg(f"note={SECRET}") == f"note={REDACTED}" and redact_arg("topk=10") == "topk=10"


def test_a_built_training_stage_logs_its_curve_and_references_its_entry(tmp_path, offline, caplog):
    with caplog.at_level(logging.WARNING, logger="skillrouter.tracking"):
        builder = build(tmp_path)
    assert not [r.getMessage() for r in caplog.records if r.getMessage().startswith("W&B:")]
    (run,) = offline_runs(tmp_path / "sweep")
    s = stage()
    assert (run.run_id, run.job_type, run.group) == (artifact_name(s.kind, s.key), "train_encoder", "sweep")
    curve = [float(v) for v in (builder.cache.entry(s.kind, s.key) / "curve.txt").read_text().split()]
    assert run.steps == list(range(1, STEPS + 1))
    assert [h["train/loss"] for h in run.history] == pytest.approx(curve, abs=1e-6)
    assert all(h["train/lr"] >= 0 and h["train/grad_norm"] >= 0 and h["train/examples_per_s"] > 0 for h in run.history)
    (art,) = run.artifacts
    entry = builder.cache.entry(s.kind, s.key).resolve()
    assert art["name"] == artifact_name(s.kind, s.key) and art["type"] == "train_encoder"
    assert {e["path"]: e["ref"] for e in art["entries"]}["curve.txt"] == (entry / "curve.txt").as_uri()
    assert all(e["digest"] for e in art["entries"])  # checksummed references, nothing uploaded
    assert artifact_record(builder.cache.root, s.kind, s.key)["digest"] == art["digest"]
    build(tmp_path)  # reused: no new run
    assert len(offline_runs(tmp_path / "sweep")) == 1


def test_a_killed_training_continues_its_run_from_the_checkpoint(tmp_path):
    killed = _job(tmp_path, "6")  # SIGKILL inside step 6; the last checkpoint is step 4
    assert killed.returncode == -9, killed.stderr[-2000:]
    resumed = _job(tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    attempts = offline_runs(tmp_path / "sweep")
    run_id = artifact_name(stage().kind, stage().key)
    assert len(attempts) == 2 and all(r.folder.name.endswith(run_id) for r in attempts)  # one run id, not a duplicate
    (again,) = [r for r in attempts if r.artifacts]  # the attempt that finished (the killed one may have written nothing)
    assert again.run_id == run_id and again.steps == list(range(1, STEPS + 1))  # restored steps, then on from 5
    entry = next((tmp_path / "cache" / "train_encoder").glob("*/curve.txt"))  # the curve (exact resume: test_training)
    assert [h["train/loss"] for h in again.history] == pytest.approx([float(v) for v in entry.read_text().split()], abs=1e-6)
    assert len(again.artifacts) == 1


def test_tracking_that_fails_costs_one_warning_and_never_the_cell(tmp_path, caplog, offline):
    broken = TrackingSettings("p", None, "no-such-mode", "g")
    with caplog.at_level(logging.WARNING):
        tracker = CellTracker(broken, CellStarted(str(tmp_path), "g", {"encoder": "bm25"}, {"a": 1}))
    assert tracker.run is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith("W&B: starting the cell's run failed")
    tracker.finish()


class StandIn:
    """The W&B service at its one boundary: what sync uploads and which artifact reads it declares."""

    def __init__(self):
        self.uploaded, self.links = [], []

    def upload(self, folders):
        self.uploaded += list(folders)

    def link(self, entity, project, run_id, artifact):
        self.links.append((run_id, artifact))


def test_a_tracked_grid_with_a_failed_cell(tmp_path, pool_records):
    """Cell, stage and grid runs of a two-cell grid whose second cell fails; sync and the workspace view;
    no secret anywhere under the sweep, though one is in the environment and on the command line."""
    good = write_jsonl(tmp_path / "good.jsonl", pool_records)
    bad = write_jsonl(tmp_path / "bad.jsonl", [pool_records[0], pool_records[0]])
    queries = write_jsonl(tmp_path / "q.jsonl", [{"id": "q1", "query": "dedupe my csv rows", "gt": ["a"]},
                                                 {"id": "q2", "query": "pdf text and thumbnails", "gt": ["b", "c"]}])
    sweep = tmp_path / "grid"
    env = _env(OPENAI_API_KEY=SECRET, WANDB_API_KEY=WANDB_KEY, HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, str(ROOT / "launch.py"), "-m", f"hydra.sweep.dir={sweep}",
                           f"cache_dir={tmp_path / 'cache'}", "progress=false", "encoder=bm25", "data=jsonl",
                           f"data.pool={good},{bad}", f"data.queries={queries}", "tracking=wandb", f"+llm.api_key={SECRET}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stderr[-3000:]  # one cell failed
    runs = offline_runs(sweep)
    cells = {r.config["cfg"]["data"]["pool"]: r for r in runs if r.job_type == "cell"}
    ok, failed = cells[str(good)], cells[str(bad)]
    assert (ok.exit_code, failed.exit_code) == (0, 1)
    assert ok.config["encoder"] == "bm25" and ok.config["data"] == "jsonl"  # choices: one runs-table column each
    assert ok.summary["hit@1"] is not None and any(k.startswith("single/") for k in ok.summary)
    per_query = table(ok, "per_query")
    assert per_query["columns"][:5] == ["qid", "query", "gt", "top10", "gt_ranks"] and len(per_query["data"]) == 2
    assert {row[0]: row[2] for row in per_query["data"]} == {"q1": "a", "q2": "b c"}
    assert table(ok, "recall_curve_table")["columns"] == ["k", "recall"] and table(ok, "rendered_examples")["data"]
    built = {a["name"] for r in runs if r.job_type not in ("cell", "grid") for a in r.artifacts}
    assert {s["artifact"] for s in ok.config["stages"].values()} <= built  # every stage the cell used, by artifact
    assert all(s["digest"] for s in ok.config["stages"].values())
    (grid,) = [r for r in runs if r.job_type == "grid"]
    rows = table(grid, "cells")
    status = rows["columns"].index("status")
    assert sorted(row[status] for row in rows["data"]) == ["completed", "failed"]
    assert grid.summary["failed"] == 1
    logged = [p for p in sweep.rglob("*") if p.is_file() and ("wandb" in p.parts or p.name == "provenance.json")]
    assert len(logged) > 20  # Hydra's own .hydra/ keeps the command line as typed
    assert not [p for p in logged for secret in (SECRET, WANDB_KEY) if secret.encode() in p.read_bytes()]

    service = StandIn()
    report = sync(sweep, service)
    assert sorted(service.uploaded) == sorted(r.folder for r in runs if r.run_id) and not report.failed
    kinds = [next(r.job_type for r in runs if r.folder == f) for f in service.uploaded]
    assert kinds.index("cell") > max(i for i, k in enumerate(kinds) if k not in ("cell", "grid"))  # producers first
    assert {a for run_id, a in service.links if run_id == ok.run_id} == {s["artifact"] for s in ok.config["stages"].values()}
    assert {a for _, a in service.links} <= built

    assert workspace_main([str(sweep)]) == 0
    view = json.dumps(json.loads((sweep / "workspace.json").read_text()))
    assert view.count("Bar Chart") == 3 and "train/loss" in view and sweep.name in view


def test_the_report_goes_to_wandb_as_one_artifact(tmp_path, offline):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from skillrouter.tracking.grid_run import log_report

    out = tmp_path / "reports"
    out.mkdir()
    (out / "encoder_results.md").write_text("| a |\n|---|\n| 1 |\n")
    (out / "encoder_results.tex").write_text("\\begin{tabular}{l}a\\end{tabular}\n")
    plt.plot([1, 2], [0.5, 1.0])
    plt.savefig(out / "recall_at_k.png")
    written = sorted(out.iterdir())
    log_report(written, [tmp_path / "sweep"], out)
    (run,) = offline_runs(out / ".tracking")
    (artifact,) = run.artifacts
    assert run.job_type == "report" and artifact["type"] == "report"
    assert sorted(e["path"] for e in artifact["entries"]) == sorted(p.name for p in written)
    assert list((run.folder / "files" / "media" / "images").glob("recall_at_k_*.png"))
