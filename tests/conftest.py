"""Shared fixtures: tiny pools and benchmarks written on the spot (no ../shared, no hub)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test` runs two workers on two cores: one torch thread each
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
HARBOR = ROOT / ".venv-harbor" / "bin" / "harbor"


DURATIONS = ROOT / "reports" / "perf" / "test_durations.json"  # benchmarks/test_durations.py's last measure of CI


def _seconds_per_file() -> dict[str, float]:
    try:
        return json.loads(DURATIONS.read_text())["figures"]["seconds per file (phases over 1 s)"]
    except (OSError, KeyError, ValueError):
        return {}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Longest first. Under pytest-xdist (``--dist loadfile --no-loadscope-reorder``) a free worker takes the next file
    as one unit: the SLURM tests (one cluster, whose jobs they count) start at once on one worker, and the other files
    follow longest first (by their last measured seconds), so the short ones even the two workers out at the end."""
    seconds = _seconds_per_file()
    items.sort(key=lambda item: (item.get_closest_marker("slurm") is None, -seconds.get(item.nodeid.split("::")[0], 0.0)))


def bf16_numbers(values) -> np.ndarray:
    """Which scores are exactly bfloat16 numbers (as float32, their low 16 bits zero): all of them when a score layer
    ran in bf16, almost none when it ran in fp32."""
    return (np.asarray(values, dtype=np.float32).view(np.uint32) & 0xFFFF) == 0


def pythonpath(*paths: Path | str) -> str:
    """``paths`` ahead of the caller's own ``PYTHONPATH``, for a subprocess: where the dependencies come from a path
    (the GPU kit, ``benchmarks/gpu_check.sh``), replacing it leaves the child without them."""
    return os.pathsep.join([*map(str, paths), *filter(None, [os.environ.get("PYTHONPATH")])])


def write_jsonl(path: Path, records) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def cpu_only(monkeypatch):
    """Run a test's every side on the CPU, on a GPU machine too (and in the processes it spawns): the tests that pin an
    identity of the training math (cached gradients, data-parallel ranks, an exact resume) compare two ways of
    computing the same thing, which only the same device and precision can hold to float tolerance."""
    import torch

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def device_tolerance(cpu: float, cuda: float = 2e-2) -> float:
    """The tolerance of a comparison across two computations of the same embeddings or scores on this machine's device:
    fp32 on the CPU, bf16 on CUDA (the encoders run in bf16 there)."""
    from skillrouter.models import device

    return cpu if device() == "cpu" else cuda


@pytest.fixture
def pool_records():
    return [
        {"id": "a", "name": "csv-cleaner", "description": "Clean CSV files.", "body": "Remove duplicate rows from csv."},
        {"id": "b", "name": "pdf-reader", "description": "Read PDF files.", "body": "Extract text from pdf pages."},
        {"id": "c", "name": "image-resizer", "description": "Resize images.", "body": "Make thumbnails of photos."},
    ]


@pytest.fixture
def small_files(tmp_path, pool_records):
    pool = write_jsonl(tmp_path / "pool.jsonl", pool_records)
    queries = write_jsonl(tmp_path / "queries.jsonl", [
        {"id": "q1", "query": "dedupe my csv rows", "gt": ["a"]},
        {"id": "q2", "query": "thumbnails and pdf text", "gt": ["b", "c"], "grades": {"b": 3, "c": 1}},
    ])
    return pool, queries


@pytest.fixture(scope="session")
def agent_engine() -> Path:
    """A Docker engine with Compose v2 and the tasks' base image (scripts/docker_engine.sh, idempotent), and
    Harbor's CLI (make harbor); returns the CLI's path. Outside CI a machine without them skips; in CI they
    must work."""
    problem = None if HARBOR.exists() else f"no Harbor at {HARBOR} (make harbor)"
    if problem is None:
        proc = subprocess.run(["bash", str(ROOT / "scripts" / "docker_engine.sh"), "up"], capture_output=True, text=True)
        problem = None if proc.returncode == 0 else f"no Docker engine: {proc.stderr.strip()[-500:]}"
    if problem:
        if os.environ.get("CI"):
            pytest.fail(problem)
        pytest.skip(problem)
    return HARBOR


RELIABILITY: list[dict[str, str]] = []


def reliability_row(fault: str, happened: str, lost: str, recovery_s: float) -> None:
    """One row of the reliability table a fault-injection test proved (written at the end of the session
    to $SKILLROUTER_RELIABILITY_REPORT, e.g. reports/reliability.md, by `make reliability`)."""
    RELIABILITY.append({"fault": fault, "what happened": happened, "what was lost": lost,
                        "time to recover": f"{recovery_s:.1f} s"})


def pytest_sessionfinish(session, exitstatus):
    target = os.environ.get("SKILLROUTER_RELIABILITY_REPORT")
    if not target or not RELIABILITY:
        return
    rows = sorted(RELIABILITY, key=lambda r: r["fault"])
    cols = list(rows[0])
    lines = ["# Reliability: injected faults and what they cost", "",
             "Generated by the fault-injection suite (`make reliability`): each row is a passing test that killed, froze, "
             "starved or damaged a real process or artifact. Time to recover = the next run's wall time, model and data "
             "loading included (tiny data, 2-core CPU).", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(r[c] for c in cols) + " |" for r in rows]
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    Path(target).write_text("\n".join(lines) + "\n", encoding="utf-8")
