"""Shared benchmark helpers: where the real sample lives, and writing figures to reports/perf/."""
from __future__ import annotations

import gzip
import itertools
import json
import os
import platform
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PERF = ROOT / "reports" / "perf"
# ../shared/data beside the checkout; on a GPU machine, where it does not travel, the copy gpu_check.sh unpacked
SHARED_DATA = Path(os.environ.get("SKILLROUTER_SHARED_DATA", ROOT.parent / "shared" / "data"))


def _rows(value, label: str = ""):
    """``(label, cell)`` rows of a figure: nested objects become ``outer / inner`` rows and lists of scalars one
    comma-joined cell, so no cell shows a Python or JSON structure."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _rows(inner, f"{label} / {key}" if label else str(key))
    elif isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        for i, inner in enumerate(value):
            yield from _rows(inner, f"{label} [{i}]")
    elif isinstance(value, list):
        yield label, ", ".join(str(v) for v in value)
    else:
        yield label, value


def peak_dtype(device: str) -> str:
    """The dtype whose matmul is ``device``'s peak: bfloat16 on a GPU and on a CPU with bf16 units (AMX, AVX-512 BF16,
    Arm BF16), float32 on a CPU without them. There a bf16 matmul is emulated: 0.0003 TFLOP/s against fp32's 0.12 on
    an AVX2-only EPYC (2048², 2 threads), so its peak would take minutes to measure and put any utilisation in the
    thousands of percent."""
    from skillrouter import models

    return "bfloat16" if device.startswith("cuda") or models.cpu_bf16() else "float32"


def device_peak(device: str) -> tuple[str, float]:
    """The denominator of every utilisation figure: (:func:`peak_dtype`, its matmul TFLOP/s measured now)."""
    from skillrouter.throughput import matmul_peak

    dtype = peak_dtype(device)
    return dtype, matmul_peak(device, dtype)


def render_markdown(payload: dict) -> str:
    rows = "\n".join(f"| {k} | {str(v).replace('|', '/')} |" for k, v in _rows(payload["figures"]))
    machine = payload["machine"] + (f", {payload['cpu']}" if payload.get("cpu") else "")
    return (f"# {payload['benchmark']}\n\n`{payload['command']}` on {machine}, {payload['date']}\n\n"
            f"| figure | value |\n|---|---|\n{rows}\n")


def write_figures(name: str, figures: dict, command: str) -> None:
    """``reports/perf/<name>.json`` plus a one-table Markdown rendering of the same figures."""
    from skillrouter.models import cpu_name

    PERF.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "command": command, "machine": platform.platform(), "cpu": cpu_name(),
               "date": time.strftime("%Y-%m-%d"), "figures": figures}
    (PERF / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n")
    (PERF / f"{name}.md").write_text(render_markdown(payload))
    print(json.dumps(payload, indent=2))


class Timer:
    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = round(time.perf_counter() - self.t0, 3)


def real_skills(n: int) -> tuple[list, str]:
    """The first ``n`` real skills with a description (the shared sample; the built-in data where it is absent), read
    lazily (the whole sample would weigh on a training benchmark's RSS), and the file's name."""
    from skillrouter.data.builtin import generate
    from skillrouter.data.jsonl import read_jsonl
    from skillrouter.data.types import Skill

    sample = SHARED_DATA / "skills-sample.jsonl.gz"
    source = sample if sample.exists() else generate(Path(tempfile.mkdtemp()) / "builtin")["pool"]
    records = (r for _, r in read_jsonl(source) if (r.get("description") or "").strip())
    skills = [Skill(r["id"], r["name"], r["description"], r.get("body") or "") for r in itertools.islice(records, n)]
    return skills, source.name


def scaled_pool(src: Path, dst: Path, n: int) -> int:
    """The real sample repeated with suffixed ids (``~rN``) until it holds ``n`` skills: the format and
    text statistics of a real pool of that size, which this machine does not have."""
    lines = gzip.open(src, "rt", encoding="utf-8").read().splitlines()
    written = 0
    with gzip.open(dst, "wt", encoding="utf-8") as out:
        rep = 0
        while written < n:
            for line in lines:
                if written >= n:
                    break
                rec = json.loads(line)
                if rep:
                    rec["id"] = f"{rec['id']}~r{rep}"
                out.write(json.dumps(rec, ensure_ascii=False) + "\n")
                written += 1
            rep += 1
    return written


def build_stage(stage, cache_root: Path):
    """Build one stage and what it needs through the cache, as a grid does; its record."""
    from skillrouter.cache.store import StageCache
    from skillrouter.pipeline.execute.build import Builder
    from skillrouter.pipeline.execute.local import LocalExecutor

    builder = Builder(StageCache(cache_root), progress=False, user="bench")
    LocalExecutor(builder, fail_fast=True).run([stage])
    return builder.records[stage.key]


def pool_stage(skills: list, folder: Path):
    """A ``load_data`` stage over ``skills`` (written as a pool file, with one query: a dataset needs one)."""
    from dataclasses import asdict

    from skillrouter.stages.data import load_data

    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "pool.jsonl", "w", encoding="utf-8") as fh:
        for s in skills:
            fh.write(json.dumps({k: v for k, v in asdict(s).items() if k != "extra" and v is not None}) + "\n")
    (folder / "queries.jsonl").write_text(json.dumps({"id": "q", "query": skills[0].name, "gt": [skills[0].id]}) + "\n")
    return load_data({"source": "files", "pool": str(folder / "pool.jsonl"), "queries": str(folder / "queries.jsonl")},
                     "easy", False)
