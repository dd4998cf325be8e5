"""Data synthesis through real HTTP: the client against the stub server (faults, retries, resumption,
budget), the stages' filters, and grids that generate, train and evaluate end to end."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from skillrouter.data.types import Skill
from skillrouter.report.synth import synth_table
from skillrouter.tracking.offline import offline_runs, table as offline_table
from skillrouter.synth import r3, stub
from skillrouter.synth.client import LLMClient, LLMConfig, LLMUnavailable, Request
from skillrouter.synth.skillrouter import cli_commands, leakage, stratified_sample

from .conftest import ROOT
from .test_launch import launch

SCHEMA = {"type": "object", "required": ["query"], "properties": {"query": {"type": "string", "x-min-words": 5, "x-max-words": 9}}}
SKILL = Skill("s", "csv-cleaner", "Clean CSV files", "Run `csvkit clean` then\n$ dedupe rows\nKeep the header.")


def _requests(n: int) -> list[Request]:
    return [Request("q", ({"role": "user", "content": f"<body>\nrows of table number {i} to clean\n</body>"},), SCHEMA,
                    tag=str(i)) for i in range(n)]


@pytest.fixture
def server():
    srv = stub.serve(timeout_every=0)
    yield srv
    srv.shutdown()


def _client(server, tmp_path, **kw) -> LLMClient:
    cfg = LLMConfig(url=f"http://127.0.0.1:{server.server_address[1]}/v1", model="stub", timeout=1.0, backoff=0.01, **kw)
    return LLMClient(cfg, tmp_path / "requests.jsonl")


def test_faults_are_retried_and_counted(server, tmp_path):
    server.state.every.update({"timeout": 5, "429": 3, "malformed": 4})
    server.state.timeout_sleep = 1.5
    client = _client(server, tmp_path, concurrency=2, retries=6)
    answers = client.map(client.ask, _requests(12))
    assert all(a and 5 <= len(a["query"].split()) <= 9 for a in answers)
    u = client.usage
    assert u.failed == 0 and u.retries == u.requests - 12 > 0
    assert u.errors.get("http 429") and u.errors.get("timeout") and u.errors.get("invalid reply") and u.invalid
    assert server.state.served["429"] and server.state.served["timeout"] and server.state.served["malformed"]


def test_an_answer_that_never_validates_is_recorded_as_a_failure(server, tmp_path):
    client = _client(server, tmp_path, retries=2)
    strict = {"type": "object", "required": ["query"], "properties": {"query": {"type": "string", "pattern": "^[0-9]+$"}}}
    assert client.ask(Request("q", ({"role": "user", "content": "x"},), strict, tag="t")) is None
    assert client.usage.failed == 1 and client.usage.invalid == 3
    logged = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert logged == [{"key": logged[0]["key"], "tag": "t", "name": "q", "ok": False, "error": logged[0]["error"]}]
    assert logged[0]["error"].startswith("invalid reply (schema:")


def test_the_log_resumes_without_asking_again_and_the_budget_caps(server, tmp_path):
    first = _client(server, tmp_path, budget=5, retries=0)
    answers = first.map(first.ask, _requests(8))
    assert sum(a is not None for a in answers) == 5 and first.usage.requests == 5 and first.usage.failed == 3
    served = server.state.count
    again = _client(server, tmp_path)
    answers = again.map(again.ask, _requests(8))
    assert all(answers) and again.usage.resumed == 5 and again.usage.requests == 3
    assert server.state.count == served + 3


def test_no_llm_is_a_clear_error(tmp_path):
    with pytest.raises(LLMUnavailable, match="llm=stub"):
        LLMClient(LLMConfig(url=None, model="none"), tmp_path / "log.jsonl")


def test_leakage_filter():
    assert cli_commands(SKILL.body) == {"csvkit", "dedupe"}
    assert leakage("Please clean my csv file and keep the header row", SKILL, 5, 40) is None
    assert leakage("Use csv-cleaner on my exported rows please", SKILL, 5, 40) == "names the skill"
    assert leakage("Use csv cleaner on my exported rows please", SKILL, 5, 40) == "names the skill"
    assert leakage("Run csvkit over my exported table please", SKILL, 5, 40) == "names the command 'csvkit'"
    assert leakage("too short", SKILL, 5, 40).startswith("length 2")


def test_stratified_sample_spreads_categories_and_skips_labelled():
    skills = [Skill(f"{c}{i}", f"n{c}{i}", category=c) for c in "abc" for i in range(10)]
    sample = stratified_sample(skills, 9, {"a0", "a1"}, seed=0)
    assert len(sample) == 9 and {s.category for s in sample} == {"a", "b", "c"}
    assert all(sum(s.category == c for s in sample) == 3 for c in "abc") and not {"a0", "a1"} & {s.id for s in sample}


def test_r3_hierarchy_taxonomy_and_split():
    rng = np.random.default_rng(0)
    emb = np.concatenate([rng.normal(c, 0.05, size=(10, 8)) for c in (-3, 0, 3)]).astype(np.float32)
    ids = [f"s{i}" for i in range(30)]
    sub, sup, report = r3.cluster(emb, n_sub=6, n_super=3, seed=0)
    assert report["sub_clusters"] == 6 and sum(report["super_domain_sizes"]) == 30
    sets = r3.sample_sets(ids, sub, sup, {1: 5, 2: 5, 3: 3}, seed=0)
    index = {sid: i for i, sid in enumerate(ids)}
    for s in sets:
        assert len({sup[index[m]] for m in s}) == 1 and len({sub[index[m]] for m in s}) == len(s)
    assert r3.rejection_reason("The two skills are redundant") == "redundant"
    assert r3.rejection_reason("They come from unrelated domains") == "unrelated"
    assert r3.rejection_reason("Banana") == "other"
    records = [{"skills": ["a", "b"], "decision": "WRITE", "query": "q1", "leaks_name": False, "direction": "en-en", "style": "x"},
               {"skills": ["a", "c"], "decision": "SKIP", "leaks_name": False},
               {"skills": ["a"], "decision": "WRITE", "query": "q2", "leaks_name": True, "direction": "en-zh", "style": "x"}]
    train, test, split = r3.split_pairs(records, ["a", "b", "c"], test_fraction=0.0, seed=0)
    assert train == [{"query": "q1", "skill_ids": ["a", "b"], "skip": ["c"]}] and not test
    assert split["leaking_dropped"] == 1
    _, _, split = r3.split_pairs(records[:2], ["a", "b", "c", "d", "e", "f"], test_fraction=0.5, seed=3)
    assert split["straddling_dropped"] + split["train_pairs"] + split["test_queries"] == 1


@pytest.mark.slow
def test_generate_train_evaluate_easy_and_hard_then_reuse(tmp_path, monkeypatch):
    """llm=stub synth=skillrouter encoder=trained tier=easy,hard: training pairs generated once,
    distractors for Hard (degraded variants graded 1), a rerun reuses every generation, and the key
    named by llm.api_key_env reaches no file."""
    secret = "sk-synth-secret-never-written-0123456789"
    monkeypatch.setenv("SKILLROUTER_TEST_KEY", secret)
    grid = ("llm=stub", "synth=skillrouter", "encoder=trained", "encoder.train.epochs=1", "tier=easy,hard", "data=tiny",
            "llm.api_key_env=SKILLROUTER_TEST_KEY", "llm.stub.rate_limit_every=7", "llm.stub.malformed_every=11",
            "tracking=wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    proc = launch(tmp_path, *grid)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    runs = {json.loads(f.read_text())["choices"]["tier"]: json.loads(f.read_text()) for f in (tmp_path / "grid").glob("*/metrics.json")}
    easy, hard = runs["easy"], runs["hard"]
    assert easy["synth"]["gen_queries"]["made"] > 0 and not easy["synth"]["gen_queries"]["cached"]
    assert hard["synth"]["gen_queries"]["cached"] and hard["synth"]["gen_distractors"]["made"] > 0
    usage = easy["synth"]["gen_queries"]["usage"]
    assert usage["errors"].get("http 429") and usage["errors"].get("invalid reply") and usage["failed"] == 0
    assert hard["data"]["n_skills"] > easy["data"]["n_skills"]
    cache = tmp_path / "cache"
    degraded = [json.loads(line) for line in next(cache.glob("gen_distractors/*/distractors.jsonl")).read_text().splitlines()
                if "variant_of" in line]
    assert degraded and all(d["grade"] == 1 for d in degraded)
    assert hard["counts"]["graded"] == hard["counts"]["all"]
    again = launch(tmp_path, *grid, "hydra.sweep.dir=" + str(tmp_path / "again"))
    assert again.returncode == 0, again.stdout[-2000:]
    rerun = [json.loads(f.read_text()) for f in (tmp_path / "again").glob("*/metrics.json")]
    assert all(s["cached"] for r in rerun for s in r["synth"].values())
    leaked = [p for p in tmp_path.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaked == []
    generated = {r.job_type: r for r in offline_runs(tmp_path / "grid") if r.job_type.startswith("gen_")}
    assert sorted(generated) == ["gen_distractors", "gen_queries"]  # a run per generation stage built, none on reuse
    assert generated["gen_queries"].summary["usage/requests"] == usage["requests"] > 0
    assert generated["gen_queries"].summary["usage/retries"] == usage["retries"] > 0
    sample = offline_table(generated["gen_queries"], "generated")
    assert sample["columns"] == ["file", "row", "record"] and sample["data"][0][0] == "pairs.jsonl"
    assert not [r for r in offline_runs(tmp_path / "again") if r.job_type.startswith("gen_")]
    table = synth_table([tmp_path / "grid", tmp_path / "again"])
    assert sorted(table["stage"]) == ["gen_distractors", "gen_queries"]  # one row per artifact, not per cell
    assert (table["requests"] > 0).all() and table.loc[table["stage"] == "gen_queries", "retries"].item() > 0


@pytest.mark.slow
def test_a_killed_stage_resumes_without_asking_again(tmp_path):
    args = [sys.executable, str(ROOT / "launch.py"), "llm=stub", "synth=skillrouter", "encoder=trained", "data=tiny",
            "llm.concurrency=1", "llm.stub.delay=0.3", f"hydra.run.dir={tmp_path / 'run'}", f"cache_dir={tmp_path / 'cache'}", "progress=false"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 300
    logs: list[Path] = []
    while time.time() < deadline and proc.poll() is None and not (logs and len(logs[0].read_text().splitlines()) >= 4):
        logs = list((tmp_path / "cache" / "gen_queries").glob("*.work/requests.jsonl"))
        time.sleep(0.05)
    assert proc.poll() is None, "the stage finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    answered = len(logs[0].read_text().splitlines())
    assert answered >= 4
    again = subprocess.run([*args[:-3], f"hydra.run.dir={tmp_path / 'again'}", *args[-2:]], cwd=tmp_path, env=env,
                           capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    report = json.loads((tmp_path / "again" / "metrics.json").read_text())["synth"]["gen_queries"]
    assert report["usage"]["resumed"] >= answered - 1  # the last line may have been cut by the kill
    assert report["usage"]["requests"] + report["usage"]["resumed"] >= report["sampled"]
    assert not list((tmp_path / "cache" / "gen_queries").glob("*.work"))


def test_no_llm_for_a_generating_grid_is_one_line(tmp_path):
    proc = launch(tmp_path, "synth=skillrouter", "encoder=trained", "data=tiny", multirun=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("skillrouter: no LLM: this stage needs an LLM: choose llm=stub")


@pytest.mark.slow
def test_r3_synthesis_feeds_graded_reranker_training(tmp_path):
    proc = launch(tmp_path, "llm=stub", "synth=r3", "data=tiny", "encoder=bm25", "reranker=trained", "loss=graded",
                  "reranker.train.epochs=1",
                  "synth.r3.n_sub=6", "synth.r3.n_super=2", "synth.r3.sets={1: 8, 2: 8, 3: 6}", "synth.r3.test_fraction=0.2",
                  "reranker.train.batch_size=8", "reranker.list_size=4", multirun=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((tmp_path / "run" / "metrics.json").read_text())["synth"]["r3_pairs"]
    assert report["judgements"]["write"] + report["judgements"]["skip"] == report["judgements"]["sets"]
    assert set(report["judgements"]["name_leaks_by_direction"]) == {"en-en", "en-zh", "zh-en", "zh-zh"}
    assert report["split"]["train_pairs"] > 0 and report["clusters"]["super_domains"] == 2
    from skillrouter.report.r3_stats import from_run, skip_protocols, write_r3_stats  # R3's statistics of this output

    data = from_run(tmp_path / "run")
    steps = dict(data.construction)
    assert steps["judged WRITE"] == report["judgements"]["write"] and steps["sub-clusters"] == 6 and data.used_k == 6
    assert sum(q["split"] == "test" for q in data.queries) == report["split"]["test_queries"]
    written = write_r3_stats(data, tmp_path / "stats", "r3", ks=(2, 3))
    text = written[0].read_text()
    protocols = skip_protocols(data.judgements, data.train_pairs).set_index("protocol")
    assert protocols.loc["judged sets", "SKIP"] == report["judgements"]["skip"] and "judged sets" in text and "{" not in text
    assert {p.name for p in written} >= {"r3-reasons.png", "r3-clusters.pdf", "r3-skill_length.png", "r3.tex"}
    from skillrouter.report.__main__ import generate  # make report finds the R3 source and links its statistics

    generate([tmp_path / "run"], tmp_path / "reports")
    index = (tmp_path / "reports" / "index.md").read_text()
    name = f"synth-{json.loads((tmp_path / 'run' / 'metrics.json').read_text())['stages']['r3_pairs']['key'][:8]}"
    assert f"- [{name}](r3_stats/{name}.md)" in index and (tmp_path / "reports" / "r3_stats" / f"{name}-reasons.png").exists()


@pytest.mark.slow
def test_a_sweep_file_that_sets_the_llm_gets_its_server(tmp_path):
    """`llm: stub` among a sweep file's sweeper params (sweeps/synth_demo.yaml) starts the grid's server."""
    args = [sys.executable, str(ROOT / "launch.py"), "-m", "-cd", str(ROOT / "sweeps"), "-cn", "synth_demo", "data=tiny",
            f"hydra.sweep.dir={tmp_path / 'grid'}", f"cache_dir={tmp_path / 'cache'}", "progress=false"]
    proc = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "2 cells: 2 completed" in proc.stdout


@pytest.mark.slow
def test_skillbench_supp_replaces_the_benchmark(tmp_path):
    proc = launch(tmp_path, "llm=stub", "synth=skillrouter_supp", "data=tiny", "encoder=bm25", multirun=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    report = m["synth"]["supp"]
    assert report["queries"]["made"] == m["n_queries"] > 0 and report["dedupe"]["judged_pairs"] > 0
    assert m["data"]["config"]["queries"].endswith("queries.jsonl") and m["data"]["n_skills"] == report["dedupe"]["pool"]
    queries = [json.loads(line) for line in Path(m["data"]["config"]["queries"]).read_text().splitlines()]
    assert {q["difficulty"] for q in queries} <= {"easy", "hard"} and all(q["id"].startswith("supp/") for q in queries)
