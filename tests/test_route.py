"""Serving a cell (``python -m skillrouter.route``): the real server as a subprocess, talked to with the ``mcp``
SDK's own client over stdio and HTTP, with a plain HTTP client and with schemathesis (property-based requests made
from the server's own ``/openapi.json``). The rankings are the cell's ``rankings.jsonl``; a watched folder picks up a
new skill without a restart and without re-embedding the others; bad input of any shape is refused with a 4xx;
stdout over stdio is JSON-RPC alone; a restart re-embeds nothing. One HTTP server serves every test that only
reads from it."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from skillrouter.agents.skill_sets import skill_md
from skillrouter.data.columnar import read_dataset
from skillrouter.data.loaders import ErrorPolicy, load_pool_tree
from skillrouter.data.types import LoadReport
from skillrouter.rankings import read_rankings

from .conftest import ROOT, bf16_numbers, pythonpath

TOKEN = "test-token"
# a fine-tuned encoder; the reranker in bf16 autocast on every machine (the default where the CPU has bf16)
CELL = ("data=tiny", "encoder=trained", "reranker=minilm_ce", "reranker.backend=bf16", "topk=5", "retrieve_k=10")


@pytest.fixture(scope="module")
def cell(tmp_path_factory) -> dict:
    """One built cell (MiniLM fine-tuned on the tiny built-in data + the MiniLM cross-encoder): its run folder,
    rankings and dataset. (A fine-tuned reranker loads through the same path as score_pairs; training one here
    would add two minutes.)"""
    tmp = tmp_path_factory.mktemp("route")
    proc = subprocess.run([sys.executable, str(ROOT / "launch.py"), f"hydra.run.dir={tmp / 'run'}",
                           f"cache_dir={tmp / 'cache'}", "progress=false", *CELL],
                          cwd=ROOT, capture_output=True, text=True, timeout=900, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp / "run"
    metrics = json.loads((run / "metrics.json").read_text())
    dataset = read_dataset(tmp / "cache" / "load_data" / metrics["stages"]["load_data"]["key"])
    return {"tmp": tmp, "run": run, "metrics": metrics, "dataset": dataset,
            "rankings": read_rankings(run / "rankings.jsonl")}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``route serve --transport http`` in a subprocess, up once ``/health`` answers."""

    def __init__(self, cwd: Path, *args: str, token: str | None = TOKEN):
        self.port = _port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.log = open(cwd / f"serve-{self.port}.log", "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "skillrouter.route", "serve", "--transport", "http",
                                      "--port", str(self.port), *(["--token", token] if token else []), *args],
                                     cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "HF_HUB_OFFLINE": "1"})
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, Path(self.log.name).read_text()[-3000:]
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.5)
        raise AssertionError("server did not start: " + Path(self.log.name).read_text()[-3000:])

    def health(self) -> dict:
        return httpx.get(f"{self.url}/health", timeout=10).json()

    def post(self, payload, **kw) -> httpx.Response:
        return httpx.post(f"{self.url}/route", json=payload, headers=self.headers, timeout=300, **kw)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)
        self.proc.wait(60)
        self.log.close()


@pytest.fixture(scope="module")
def served(cell):
    """The cell served over HTTP once, for the tests that only talk to it."""
    server = Server(cell["tmp"], "--run", str(cell["run"]), "--batch-wait-ms", "50")
    yield server
    server.stop()


def test_http_api_serves_the_cells_rankings_and_refuses_bad_requests(cell, served):
    queries, server = cell["dataset"].queries, served
    health = server.health()
    assert health["measured"]["hit@1"] == cell["metrics"]["metrics"]["hit@1"]  # the cell's own measurement
    assert (health["encoder"], health["reranker"], health["topk"], health["embedded"]) == ("trained", "minilm_ce", 5, 0)
    assert health["encoder_weights"] == f"train_encoder {cell['metrics']['stages']['train_encoder']['key']}"

    results = server.post({"tasks": [q.text for q in queries], "k": 10}).json()["results"]
    for q, hits in zip(queries, results):
        expected = cell["rankings"][q.id]
        assert [h["id"] for h in hits] == expected.ids[:10], q.id
        assert [h["score"] for h in hits] == pytest.approx(expected.scores[:10], abs=1e-4)
    pairs = cell["tmp"] / "cache" / "score_pairs" / cell["metrics"]["stages"]["score_pairs"]["key"] / "scores.jsonl"
    scores = [s for line in pairs.read_text().splitlines() for s in json.loads(line)["scores"]]
    assert bf16_numbers(scores).mean() < 0.1  # not rounded to bf16 (the score layer is fp32)
    one = server.post({"task": queries[0].text, "k": 3}).json()["hits"]
    assert one == results[0][:3]

    async def concurrent(texts: list[str]) -> list[dict]:
        async with httpx.AsyncClient(headers=server.headers, timeout=300) as client:
            replies = await asyncio.gather(*(client.post(f"{server.url}/route", json={"task": t, "k": 10})
                                             for t in texts))
        return [r.json()["hits"] for r in replies]

    hits_before = server.health()["cache_hits"]
    assert asyncio.run(concurrent([q.text for q in queries[:8]])) == results[:8]  # asked again: the cache answers
    assert server.health()["cache_hits"] - hits_before == 8
    before = server.health()["batches"]
    asyncio.run(concurrent([f"{q.text} (asked anew)" for q in queries[:8]]))
    assert 0 < server.health()["batches"] - before < 8  # micro-batched: fewer model calls than requests

    refusals = {
        "no token": httpx.post(f"{server.url}/route", json={"task": "x"}, timeout=30),
        "wrong token": httpx.post(f"{server.url}/route", json={"task": "x"}, headers={"Authorization": "Bearer no"},
                                  timeout=30),
        "mcp without token": httpx.post(f"{server.url}/mcp", json={}, timeout=30),
        "too many tasks": server.post({"tasks": ["x"] * 65}),
        "too long a task": server.post({"task": "x" * 20_001}),
        "too big a body": httpx.post(f"{server.url}/route", content=b" " * 1_000_001, headers=server.headers, timeout=30),
        "k too large": server.post({"task": "x", "k": 11}),
        "k not a number": server.post({"task": "x", "k": "3"}),
        "neither task nor tasks": server.post({"k": 3}),
        "not json": httpx.post(f"{server.url}/route", content=b"{", headers=server.headers, timeout=30),
        "traversal id": httpx.get(f"{server.url}/skills/..%2F..%2F..%2Fetc%2Fpasswd", headers=server.headers, timeout=30),
        "unknown id": httpx.get(f"{server.url}/skills/no-such-skill", headers=server.headers, timeout=30),
    }
    statuses = {name: r.status_code for name, r in refusals.items()}
    assert statuses == {"no token": 401, "wrong token": 401, "mcp without token": 401, "too many tasks": 413,
                        "too long a task": 413, "too big a body": 413, "k too large": 400, "k not a number": 400,
                        "neither task nor tasks": 400, "not json": 400, "traversal id": 404, "unknown id": 404}
    assert all(r.text.count("\n") == 1 for r in refusals.values())  # one line saying what is wrong
    assert "at most 64" in refusals["too many tasks"].text and "from 1 to 10" in refusals["k too large"].text

    skill = next(s for s in cell["dataset"].skills if s.id == results[0][0]["id"])
    text = httpx.get(f"{server.url}/skills/{skill.id}", headers=server.headers, timeout=30).text
    assert text == skill_md(skill, skill.name)  # the pool's record as a SKILL.md
    assert set(httpx.get(f"{server.url}/openapi.json", headers=server.headers, timeout=30).json()["paths"]) == \
        {"/route", "/skills/{id}", "/health", "/metrics"}


def test_bodies_of_any_shape_are_a_400_in_one_line(served):
    bodies = {
        "nested 100,000 deep": b"[" * 100_000 + b"]" * 100_000,
        "nested in an object": b'{"task": ' + b"[" * 50 + b'"x"' + b"]" * 50 + b"}",
        "a list": b'["a task"]',
        "a number": b"12",
        "task an object": b'{"task": {"text": "x"}}',
        "tasks of numbers": b'{"tasks": [1, 2]}',
        "k a fraction": b'{"task": "x", "k": 2.5}',
        "k huge": b'{"task": "x", "k": 1' + b"0" * 400 + b"}",
        "not UTF-8": b'{"task": "\xff\xfe"}',
        "brackets inside a string are text": b'{"task": "' + b"[" * 100 + b'", "k": 0}',
    }
    replies = {name: httpx.post(f"{served.url}/route", content=body, headers=served.headers, timeout=60)
               for name, body in bodies.items()}
    assert {name: r.status_code for name, r in replies.items()} == {name: 400 for name in bodies}
    assert all(r.text.count("\n") == 1 and "Traceback" not in r.text for r in replies.values())
    assert replies["nested 100,000 deep"].text.startswith("body nests 100000 levels deep")
    assert "'k' must be an integer" in replies["brackets inside a string are text"].text  # parsed, not refused for depth


def test_metrics_in_prometheus_format_behind_the_token(served, cell):
    from prometheus_client.parser import text_string_to_metric_families

    assert httpx.get(f"{served.url}/metrics", timeout=30).status_code == 401
    served.post({"task": cell["dataset"].queries[1].text, "k": 3})
    reply = httpx.get(f"{served.url}/metrics", headers=served.headers, timeout=30)
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/plain")
    samples = {s.name: s.value for f in text_string_to_metric_families(reply.text) for s in f.samples
               if not s.labels or s.labels.get("api") == "http"}
    assert samples["skillrouter_route_requests_total"] >= 1 and samples["skillrouter_route_request_seconds_count"] >= 1
    assert samples["skillrouter_route_index_skills"] == len(cell["dataset"].skills)
    assert samples["skillrouter_route_batches"] >= 1 and "skillrouter_route_parse_failures" in samples


def test_the_http_api_holds_against_requests_made_from_its_own_openapi(served):
    """schemathesis generates requests, valid and not, from ``/openapi.json``: no 5xx, and every response (status,
    content type, body) is one the schema allows."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings

    schema = schemathesis.openapi.from_url(f"{served.url}/openapi.json", headers=served.headers)
    failures = []

    def fuzz(operation) -> None:
        @settings(max_examples=25, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
        @given(case=operation.as_strategy())
        def check(case):
            case.call_and_validate(base_url=served.url, headers=served.headers, timeout=120)

        check()

    for result in schema.get_all_operations():
        operation = result.ok()
        try:
            fuzz(operation)
        except Exception as exc:  # noqa: BLE001 - every operation's failure is reported together
            failures.append(f"{operation.label}: {str(exc)[:1000]}")
    assert not failures, "\n".join(failures)


def test_a_request_in_flight_when_sigterm_arrives_is_answered(cell):
    server = Server(cell["tmp"], "--run", str(cell["run"]))
    tasks = [f"{q.text} (in flight)" for q in cell["dataset"].queries]

    async def in_flight() -> int:
        async with httpx.AsyncClient(headers=server.headers, timeout=300) as client:
            pending = asyncio.ensure_future(client.post(f"{server.url}/route", json={"tasks": tasks, "k": 10}))
            await asyncio.sleep(0.3)
            server.proc.send_signal(signal.SIGTERM)
            return (await pending).status_code

    try:
        assert asyncio.run(in_flight()) == 200
        assert server.proc.wait(60) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it drained on
    finally:
        if server.proc.poll() is None:
            server.stop()


def _mcp_calls(target, first_query: str) -> tuple[list[str], list[dict], str, bool, bool]:
    from mcp.client.client import Client

    async def go():
        async with Client(target) as client:
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            found = await client.call_tool("find_skills", {"task": first_query, "k": 5})
            hits = found.structured_content["result"]
            read = await client.call_tool("read_skill", {"id": hits[0]["id"]})
            traversal = await client.call_tool("read_skill", {"id": "../../../etc/passwd"})
            too_many = await client.call_tool("find_skills", {"task": first_query, "k": 500})
            return tools, hits, read.content[0].text, traversal.is_error, too_many.is_error

    return asyncio.run(go())


def test_mcp_over_stdio_and_http_with_the_sdks_client(cell, served, tmp_path):
    """Over stdio, stdout carries JSON-RPC and nothing else, whatever prints while the server starts: here W&B's
    offline notice (transformers prints it at import with ``WANDB_MODE=offline``) and a Hydra plugin that prints at
    import (found on ``PYTHONPATH``, imported by Hydra's plugin discovery when the cell is composed)."""
    from mcp.client.stdio import StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client
    import httpx2

    noisy = tmp_path / "noisy" / "hydra_plugins" / "noisy_at_import"
    noisy.mkdir(parents=True)
    (noisy / "__init__.py").write_text('print("noise from a plugin at import")\n')
    wire = tmp_path / "stdout.jsonl"  # what the server wrote to its stdout, as the client received it
    command = " ".join([sys.executable, "-m", "skillrouter.route", "serve", *CELL, f"cache_dir={cell['tmp'] / 'cache'}"])
    query = cell["dataset"].queries[0]
    expected = cell["rankings"][query.id].ids[:5]
    stdio = StdioServerParameters(  # by overrides, as launch.py takes them (the HTTP server loads the run folder)
        command="bash", args=["-c", f"set -o pipefail; {command} | tee {wire}"], cwd=str(cell["tmp"]),
        env={**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline",
             "PYTHONPATH": pythonpath(tmp_path / "noisy", ROOT)})
    http = streamable_http_client(f"{served.url}/mcp", http_client=httpx2.AsyncClient(headers=served.headers))
    for target in (stdio, http):
        tools, hits, text, traversal_refused, oversized_refused = _mcp_calls(target, query.text)
        assert tools == ["find_skills", "read_skill"]
        assert [h["id"] for h in hits] == expected
        assert set(hits[0]) == {"id", "name", "description", "score", "encoder_rank"}
        assert text.startswith("---\n") and f"name: {hits[0]['name']}" in text
        assert traversal_refused and oversized_refused
    lines = [line for line in wire.read_text().splitlines() if line.strip()]
    assert lines and all(json.loads(line)["jsonrpc"] == "2.0" for line in lines), lines[:3]


def _write_skill(root: Path, folder: str, name: str, description: str, body: str) -> None:
    (root / folder).mkdir(parents=True, exist_ok=True)
    (root / folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n---\n{body}\n")


def test_a_watched_folder_updates_without_restart_and_a_restart_embeds_nothing(cell, tmp_path):
    skills = tmp_path / "skills"
    for s in cell["dataset"].skills:
        (skills / s.name).mkdir(parents=True, exist_ok=True)
        (skills / s.name / "SKILL.md").write_text(skill_md(s, s.name), encoding="utf-8")
    (skills / "broken").mkdir()
    (skills / "broken" / "SKILL.md").write_text("no front matter here\n")
    n = len(cell["dataset"].skills)
    args = ("--run", str(cell["run"]), "--skills", str(skills), "--watch-seconds", "0.5")
    server = Server(tmp_path, *args)
    try:
        health = server.health()
        assert (health["skills"], health["embedded"]) == (n, n)
        assert list(health["skipped"]) == [str(skills / "broken" / "SKILL.md")]
        assert "front matter" in health["skipped"][str(skills / "broken" / "SKILL.md")]

        task = "calibrate the zorblax telescope mirror alignment"
        _write_skill(skills, "zorblax-aligner", "zorblax-aligner", "Align zorblax telescope mirrors.",
                     "Calibrate zorblax telescope mirror alignment step by step.")
        deadline = time.monotonic() + 60
        while server.health()["skills"] != n + 1:
            assert time.monotonic() < deadline, "the new skill never became searchable"
            time.sleep(0.5)
        assert server.health()["embedded"] == n + 1  # the new skill alone was embedded
        found = {h["id"]: h for h in server.post({"task": task, "k": 5}).json()["hits"]}
        assert found["zorblax-aligner"]["encoder_rank"] == 1  # (the untrained cross-encoder may move it in the top 5)
        before = server.post({"task": task, "k": 5}).json()["hits"]

        first = sorted(p.name for p in skills.iterdir() if p.name not in ("broken", "zorblax-aligner"))[0]
        for f in (skills / first).iterdir():
            f.unlink()
        (skills / first).rmdir()
        while server.health()["skills"] != n:
            assert time.monotonic() < deadline + 60, "the removed skill never left the index"
            time.sleep(0.5)
        assert first not in [h["id"] for h in server.post({"task": task, "k": 10}).json()["hits"]]
        assert server.health()["embedded"] == n + 1
    finally:
        server.stop(signal.SIGKILL)

    restarted = Server(tmp_path, *args)  # on the same cache, after a SIGKILL
    try:
        assert restarted.health()["embedded"] == 0  # every vector came from the cache
        assert restarted.post({"task": task, "k": 5}).json()["hits"] == before
    finally:
        restarted.stop()
    _write_skill(skills, first, first, "Restored while the server was down.", "A new body.")
    again = Server(tmp_path, *args)
    try:
        assert (again.health()["skills"], again.health()["embedded"]) == (n + 1, 1)  # the changed skill alone
    finally:
        again.stop()


def test_install_writes_skill_folders_an_agent_loads(cell, tmp_path):
    query = cell["dataset"].queries[0]
    into = tmp_path / ".claude" / "skills"
    args = [sys.executable, "-m", "skillrouter.route", "install", "--run", str(cell["run"]), "--task", query.text,
            "--k", "3", "--into", str(into)]
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    installed = load_pool_tree(into, ErrorPolicy("raise", LoadReport()), 200_000)
    names = {s.id: s.name for s in installed}
    expected = [s for i in cell["rankings"][query.id].ids[:3] for s in cell["dataset"].skills if s.id == i]
    assert sorted(names.values()) == sorted(s.name for s in expected) and all(k == v for k, v in names.items())
    assert not [p for p in into.iterdir() if p.name.startswith(".")]  # nothing left of the staging folder

    again = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 2 and "--replace" in again.stderr.strip().splitlines()[-1]
    assert subprocess.run([*args, "--replace"], cwd=ROOT, capture_output=True, text=True, timeout=600).returncode == 0


def test_a_cell_that_is_not_built_names_the_stage_and_the_command(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "skillrouter.route", "serve", "data=tiny", "encoder=minilm",
                           f"cache_dir={tmp_path / 'cache'}"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    line = proc.stderr.strip().splitlines()[-1]
    assert "stage embed_pool" in line and "is not built" in line and "python launch.py data=tiny encoder=minilm" in line


def test_a_live_folder_with_a_base_encoder_needs_nothing_built(tmp_path):
    """``--skills DIR`` reads only the weights it serves: with MiniLM as it ships and no reranker, on an empty cache
    (a fresh checkout: the default data's pool was never embedded), the server starts and routes the folder."""
    skills = tmp_path / "skills"
    _write_skill(skills, "csv-deduper", "csv-deduper", "Remove duplicate rows from CSV files.", "Hash each row; keep the first.")
    _write_skill(skills, "pdf-splitter", "pdf-splitter", "Split PDF files into pages.", "Write one file per page.")
    server = Server(tmp_path, "encoder=minilm", f"cache_dir={tmp_path / 'empty-cache'}", "--skills", str(skills), token=None)
    try:
        assert server.health()["skills"] == 2
        assert server.post({"task": "drop the duplicate rows of my csv", "k": 1}).json()["hits"][0]["id"] == "csv-deduper"
    finally:
        server.stop()
