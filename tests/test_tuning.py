"""Optuna studies (``hydra/sweeper=optuna``, Hydra's plugin) whose trials are grid cells, on the tiny data: stages
shared across trials and batches, resuming after a kill, the test split refused as objective, the dev split
recorded; and the dev split itself (carved or from a file)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from hydra import compose, initialize_config_dir

from skillrouter.data import builtin
from skillrouter.data.dev_split import carve, given
from skillrouter.data.types import DataError, Query
from skillrouter.report.tuning import tuning_table
from skillrouter.tracking.offline import offline_runs, table
from skillrouter.data.pairs import TrainExample
from skillrouter.tuning.study import StudyRefused, check

from .conftest import ROOT, write_jsonl

TINY = {"seed": 0, "n_domains": 3, "techs_per_domain": 2, "siblings": 3, "eval_siblings": 1, "n_multi": 3, "train_techs": 1}
STUDY = ["data=tiny", "encoder=trained", "reranker=trained", "eval.split=dev", "hydra/sweeper=optuna",
         "hydra.sweeper.direction=maximize", "hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=2",
         "reranker.train.lr=tag(log,interval(1e-5,1e-3))", "reranker.list_size=4", "tracking=wandb",
         "encoder.train.epochs=1", "reranker.train.epochs=1"]  # one epoch each (early stopping still scores it on dev)


def _command(tmp_path: Path, *overrides: str, multirun: bool = True) -> list[str]:
    return [sys.executable, str(ROOT / "launch.py"), *(["-m"] if multirun else []), f"hydra.sweep.dir={tmp_path / 'study'}",
            f"hydra.run.dir={tmp_path / 'run'}", f"cache_dir={tmp_path / 'cache'}", "progress=false", *overrides]


def _env() -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HYDRA_FULL_ERROR": "0", "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    env.pop("WANDB_SERVICE", None)
    return env


def _run(tmp_path: Path, *overrides: str, multirun: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(_command(tmp_path, *overrides, multirun=multirun), cwd=tmp_path, capture_output=True, text=True,
                          env=_env(), timeout=1200)


def _states(storage: str) -> dict[str, list[int]]:
    """The study's trials by state, read from its SQLite file read-only: opening it through Optuna from here would
    create its tables too, racing the study's own process that is creating them."""
    import sqlite3

    path = Path(storage.removeprefix("sqlite:///"))
    if not path.exists():
        return {}
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            rows = db.execute("SELECT number, state FROM trials ORDER BY number").fetchall()
    except sqlite3.OperationalError:  # the study's tables are not created yet
        return {}
    out: dict[str, list[int]] = {}
    for number, state in rows:
        out.setdefault(str(state), []).append(number)
    return out


def _metrics(cell: Path) -> dict:
    return json.loads((cell / "metrics.json").read_text())


@pytest.mark.slow
def test_a_study_shares_the_encoder_resumes_after_a_kill_and_scores_its_best_trial_on_test_once(tmp_path):
    sweep, storage = tmp_path / "study", f"sqlite:///{tmp_path / 'study' / 'study.db'}"
    proc = subprocess.Popen(_command(tmp_path, *STUDY), cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:  # killed while the second batch of trials trains: the plugin asks a batch's
        states = _states(storage)       # trials one by one, so both must be running, not the first alone
        if len(states.get("COMPLETE", [])) == 2 and len(states.get("RUNNING", [])) == 2:
            break
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        time.sleep(0.5)
    else:
        pytest.fail("the study never reached its second batch")
    first = {n: (sweep / str(n) / "metrics.json").read_bytes() for n in states["COMPLETE"]}
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()

    resumed = _run(tmp_path, *STUDY)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed with 2 finished trials kept, 2 left running by a stopped study marked failed" in resumed.stdout
    states = _states(storage)
    assert states == {"COMPLETE": [0, 1, 4, 5], "FAIL": [2, 3]}  # 4 trials in all, the killed batch kept as failed
    assert {n: (sweep / str(n) / "metrics.json").read_bytes() for n in first} == first  # finished cells untouched
    for stale in (2, 3):
        if (sweep / str(stale)).exists():
            assert "stopped while this trial ran" in _metrics(sweep / str(stale))["error"]

    trials = {n: _metrics(sweep / str(n)) for n in states["COMPLETE"]}
    study = optuna.load_study(study_name="study", storage=storage)
    for n, m in trials.items():  # each trial's cell is its trial number, scored on the dev split it records
        assert m["status"] == "completed" and m["n_queries"] == 10  # the built-in data's dev queries
        assert m["split"] == trials[0]["split"]
        assert m["metrics"]["mrr@10"] == pytest.approx(study.trials[n].value)
        assert float(json.loads((sweep / str(n) / "provenance.json").read_text())["config"]["reranker"]["train"]["lr"]) \
            == pytest.approx(study.trials[n].params["reranker.train.lr"])
    split = trials[0]["split"]
    assert split["scored"] == "dev" and split["allow_test_tuning"] is False
    assert {k: split["dev"][k] for k in ("source", "n_queries", "held_out_examples")} == \
        {"source": "file", "n_queries": 10, "held_out_examples": 0}  # dev families' queries: none is a training pair
    assert split["dev"]["file"].endswith("dev_queries.jsonl")
    encoders = {m["stages"]["train_encoder"]["key"] for m in trials.values()}
    assert len(encoders) == 1  # tuning the reranker's lr trained the encoder once, in the first batch
    assert [n for n, m in trials.items() if not m["stages"]["train_encoder"]["cached"]] == [0]
    assert len({m["stages"]["train_reranker"]["key"] for m in trials.values()}) == 4

    summary = json.loads((sweep / "study.json").read_text())
    best = summary["best"]
    assert best["number"] == study.best_trial.number and summary["split"] == split
    test_cell = sweep / summary["test"]["cell"]
    assert summary["test"]["cell"] == f"test/trial_{best['number']}/0"
    tested = _metrics(test_cell)  # the best trial's models (same keys), scored on the 9 test queries
    assert tested["n_queries"] == 9 and tested["split"]["scored"] == "test" and tested["split"]["dev"] == split["dev"]
    assert tested["stages"]["train_encoder"]["key"] in encoders
    assert tested["stages"]["train_reranker"]["key"] == trials[best["number"]]["stages"]["train_reranker"]["key"]
    assert summary["test"]["metrics"] == tested["metrics"]

    (grid,) = offline_runs(sweep / "grid")  # one W&B grid run for the study (its test cell's grid has its own)
    assert grid.job_type == "grid"
    rows = table(grid, "trials")
    assert [r[0] for r in rows["data"]] == [0, 1, 2, 3, 4, 5]
    assert grid.summary["study/best_trial"] == best["number"]

    again = _run(tmp_path, *STUDY)  # a finished study: nothing left to run, its test score read back
    assert again.returncode == 0, again.stderr[-3000:]
    assert "0 to run" in again.stdout and "scoring the best trial" not in again.stdout + again.stderr
    assert _metrics(test_cell) == tested

    row = tuning_table([sweep]).iloc[0]
    assert row["trials"] == "4/6" and row["best trial"] == best["number"]
    assert row["mrr@10 (objective)"] == pytest.approx(100 * best["value"])
    assert row["test mrr@10"] == pytest.approx(100 * tested["metrics"]["mrr@10"])
    assert row["split"] == "dev: 10 queries (file dev_queries.jsonl)"


@pytest.mark.slow
def test_a_study_refuses_the_test_split_unless_allowed_and_then_says_so(tmp_path):
    bm25 = ["data=tiny", "encoder=bm25", "hydra/sweeper=optuna", "hydra.sweeper.direction=maximize",
            "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2", "encoder.k1=interval(0.5,2.0)"]
    refused = _run(tmp_path, *bm25)
    assert refused.returncode == 2
    assert "refusing to tune on the test split" in refused.stderr and "allow_test_tuning=true" in refused.stderr
    assert not (tmp_path / "study" / "study.db").exists() and not list((tmp_path / "study").glob("*/metrics.json"))

    allowed = _run(tmp_path, *bm25, "allow_test_tuning=true")
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    cells = [_metrics(p.parent) for p in (tmp_path / "study").glob("[0-9]*/metrics.json")]
    assert len(cells) == 2 and all(m["split"] == {"scored": "test", "allow_test_tuning": True} for m in cells)
    summary = json.loads((tmp_path / "study" / "study.json").read_text())
    assert summary["test"]["cell"] == str(summary["best"]["number"])  # its own test score: nothing scored again
    assert not (tmp_path / "study" / "test").exists()
    assert tuning_table([tmp_path / "study"]).iloc[0]["split"] == "test (tuned on test)"


@pytest.mark.slow
def test_dev_queries_from_a_file_are_scored_and_their_texts_left_out_of_training(tmp_path):
    files = builtin.generate(tmp_path / "tiny", **TINY)
    pairs = [json.loads(line) for line in files["train_pairs"].read_text().splitlines()][:2]
    dev = write_jsonl(tmp_path / "dev.jsonl", [{"id": f"d{i}", "query": p["query"], "gt": [p["skill_id"]]}
                                               for i, p in enumerate(pairs)])
    proc = _run(tmp_path, "data=tiny", "encoder=bm25", "eval.split=dev", f"data.dev_queries={dev}", multirun=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = _metrics(tmp_path / "run")
    assert m["n_queries"] == 2 and m["split"]["dev"]["source"] == "file" and m["split"]["dev"]["held_out_examples"] == 2
    assert m["split"]["dev"]["file"] == str(dev)


def _examples() -> list[TrainExample]:
    return [TrainExample(f"query {i // 2}", (f"s{i}",), ("x",)) for i in range(40)]  # 20 texts, two pairs each


def test_a_carved_dev_split_is_seeded_disjoint_and_keeps_every_positive_of_a_query():
    split = carve(_examples(), 0.1, seed=0, source="pairs.jsonl", unit="query")
    assert split == carve(_examples(), 0.1, seed=0, source="pairs.jsonl", unit="query")
    assert [q.text for q in split.queries] != [q.text for q in carve(_examples(), 0.1, seed=1, source="p", unit="query").queries]
    assert len(split.queries) == 2 and split.held_examples == 4 and len(split.train) == 36
    assert not {q.text for q in split.queries} & {ex.query for ex in split.train}
    first = split.queries[0]
    n = int(first.text.split()[1])
    assert first.gt == (f"s{2 * n}", f"s{2 * n + 1}") and first.skip == ("x",)
    with pytest.raises(DataError, match="data.dev_share"):
        carve(_examples(), 1.0, seed=0, source="p")
    with pytest.raises(DataError, match="pairs.jsonl.*leaves none to train on"):
        carve(_examples()[:2], 0.9, seed=0, source="pairs.jsonl", unit="query")


def test_a_dev_split_by_skill_trains_on_none_of_its_skills():
    """Carved by skill (the default), a dev query's skills are never a training positive, as a test query's never
    are: every query naming a held-out skill goes, with all its pairs."""
    examples = [TrainExample(f"query {i}", (f"s{i % 10}",)) for i in range(40)]  # 10 skills, four queries each
    split = carve(examples, 0.2, seed=0, source="pairs.jsonl")
    held = {p for q in split.queries for p in q.gt}
    assert len(held) == 2 and len(split.queries) == 8 and split.held_examples == 8 and len(split.train) == 32
    assert not held & {p for ex in split.train for p in ex.positives}
    assert split == carve(examples, 0.2, seed=0, source="p") and held != {p for q in carve(examples, 0.2, 1, "p").queries for p in q.gt}
    with pytest.raises(DataError, match="data.dev_unit"):
        carve(examples, 0.2, seed=0, source="p", unit="family")


def test_given_dev_queries_drop_their_texts_from_training():
    split = given(_examples(), [Query("d", "query 3", ("s6",))])
    assert split.held_examples == 2 and len(split.train) == 38 and split.queries[0].id == "d"


@pytest.mark.parametrize("overrides, said", [
    (["hydra.sweeper.direction=maximize", "eval.split=dev", "objective=ndcg@5"], "not a metric the cells score"),
    (["eval.split=dev"], "pass hydra.sweeper.direction=maximize"),
    (["hydra.sweeper.direction=maximize", "eval.split=dev", "plan=true"], "a study chooses its trials as it runs"),
    (["hydra.sweeper.direction=maximize"], "refusing to tune on the test split"),
])
def test_a_study_that_would_tune_on_the_wrong_thing_is_refused(overrides, said):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["hydra/sweeper=optuna", *overrides], return_hydra_config=True)
    with pytest.raises(StudyRefused, match=said):
        check(cfg)


@pytest.mark.slow
def test_a_study_from_a_config_folder_scores_its_best_trial_with_that_config(tmp_path):
    """``-cd DIR -cn NAME`` (how sweeps/ run): the best trial's test cell is composed from the same config."""
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "bm25_study.yaml").write_text(
        "defaults:\n  - config\n  - override hydra/sweeper: optuna\n  - _self_\ndata: {builtin: {seed: 0, n_domains: 3, "
        "techs_per_domain: 2, siblings: 3, eval_siblings: 1, n_multi: 3, train_techs: 1}}\neval: {split: dev}\n"
        "hydra:\n  sweeper:\n    direction: maximize\n    n_trials: 2\n    n_jobs: 2\n"
        "    params: {encoder: bm25, encoder.k1: 'interval(0.5, 2.0)'}\n")
    proc = _run(tmp_path, "-cd", str(tmp_path / "sweeps"), "-cn", "bm25_study")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((tmp_path / "study" / "study.json").read_text())
    assert summary["test"]["status"] == "completed" and summary["test"]["cell"].startswith("test/trial_")
    tested = _metrics(tmp_path / "study" / summary["test"]["cell"])
    assert tested["n_queries"] == 9 and tested["choices"]["encoder"] == "bm25"
