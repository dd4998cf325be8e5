"""The served router under load: ``route serve --transport http`` in a subprocess, driven over HTTP at several
concurrencies (p50 / p95 / p99 latency per request, requests/s), once micro-batched (the default) and once
unbatched (``--max-batch 1 --batch-wait-ms 0``), next to the same pipeline called in-process one task at a time,
for each reranker backend (``reranker.backend``: torch, the reference, then bf16, ONNX fp32 and int8), in one run.
Goals on a 2-core CPU (MiniLM + the MiniLM cross-encoder at top-20, the 13.6K real pool): served p50 at one client
at most 300 ms and at least 3 requests/s at 8 clients; the ratios to the torch pipeline are reported. Every request
carries a task of its own (a task asked again is answered from the server's cache and would measure nothing).

    python benchmarks/route_load.py [--requests 24] [--concurrency 1 8] [--backends torch bf16 onnx onnx-int8]
                                    [--skills N] [--queries 100] [--modes batched unbatched] [--name NAME] [OVERRIDE ...]

The cell is built first through launch.py (cached): the 13.6K skills of ../shared/data as the pool (the built-in
pool when absent), 100 of their descriptions as tasks (each labelled with its own skill). Tasks sent: the pool's
descriptions, round robin. Figures: reports/perf/route_load[_<name>].*; ``python -m skillrouter.report.efficiency``
adds them to the efficiency table.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, SHARED_DATA, device_peak, write_figures  # noqa: E402

from skillrouter.data.builtin import generate  # noqa: E402
from skillrouter.data.jsonl import atomic_write_jsonl, read_jsonl  # noqa: E402
from skillrouter.data.loaders import ErrorPolicy, load_pool  # noqa: E402
from skillrouter.data.types import LoadReport  # noqa: E402

WORK = ROOT / ".cache" / "bench" / "route_load"


def percentiles(values: list[float]) -> dict[str, float]:
    return {f"p{p}": round(float(np.percentile(values, p)), 1) for p in (50, 95, 99)}


def build_cell(overrides: list[str], cache_dir: Path = ROOT / ".cache" / "skillrouter", name: str = "",
               n_skills: int | None = None, n_queries: int = 100) -> tuple[Path, list[str], int]:
    """The served cell's run folder (built by launch.py, its stages cached in ``cache_dir``), the tasks, and the pool
    size. ``n_skills``: the sample's first N skills as the pool (a latency check that need not embed all of it);
    ``n_queries``: the cell's own queries, whose heads it scores before anything is served."""
    sample = SHARED_DATA / "skills-sample.jsonl.gz"
    pool = sample if sample.exists() else generate(WORK / "builtin")["pool"]
    if n_skills:
        head = [record for (_, record), _ in zip(read_jsonl(pool), range(n_skills))]
        pool = WORK / f"pool-{n_skills}.jsonl"
        pool.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_jsonl(pool, head)
    skills = load_pool(pool, "jsonl", ErrorPolicy("skip", LoadReport()), 200_000)
    chosen = random.Random(0).sample(skills, n_queries)
    WORK.mkdir(parents=True, exist_ok=True)
    queries = WORK / "queries.jsonl"
    queries.write_text("".join(json.dumps({"id": f"q{i:03d}", "query": s.description or s.name, "gt": [s.id]}) + "\n"
                               for i, s in enumerate(chosen)))
    run = WORK / ("run-" + (name or "-".join(o.split("=", 1)[1] for o in overrides if o.startswith("reranker.backend="))))
    subprocess.run([sys.executable, str(ROOT / "launch.py"), "data=jsonl", f"data.pool={pool}", f"data.queries={queries}",
                    f"hydra.run.dir={run}", f"cache_dir={cache_dir}", "progress=false", *overrides],
                   cwd=ROOT, check=True)
    return run, [s.description or s.name for s in chosen], len(skills)


def utilisation(throughput: dict | None, device: str) -> dict | str:
    """The pool embedding's throughput (the stage's own record) with its model-FLOPs utilisation against the device's
    matmul peak measured now (``device_peak``: bf16, fp32 on a CPU without bf16 units): how much of the chip the work
    that every cell shares used."""
    if not throughput:
        return "not recorded"
    peak_kind, peak = device_peak(device)
    return {**throughput, f"{peak_kind}_matmul_peak_tflops": round(peak, 3),
            "utilisation": round(throughput["model_tflops_per_s"] / peak, 3)}


def asked(tasks: list[str], i: int) -> str:
    """The ``i``-th task sent: the tasks round robin, each time worded apart so no answer comes from the cache."""
    return f"{tasks[i % len(tasks)]} (request {i})"


def in_process(run: Path, tasks: list[str], n: int) -> dict[str, float]:
    """The pipeline called directly, one task at a time (what a script embedding the router would see)."""
    from skillrouter.route.cell import from_run_dir
    from skillrouter.route.router import Router

    router = Router(from_run_dir(run))
    router.route([asked(tasks, -1), asked(tasks, -2)], 10)  # warm-up
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        router.route([asked(tasks, i)], 10)
        times.append(1000 * (time.perf_counter() - t0))
    return percentiles(times)


class Served:
    def __init__(self, run: Path, *args: str):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen([sys.executable, "-m", "skillrouter.route", "serve", "--run", str(run), "--transport",
                                      "http", "--port", str(self.port), *args], cwd=ROOT,
                                     stdout=subprocess.DEVNULL, stderr=open(WORK / f"serve-{self.port}.log", "w"))
        self.url = f"http://127.0.0.1:{self.port}"
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited; see {WORK}/serve-{self.port}.log")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.5)

    def batches(self) -> int:
        return httpx.get(f"{self.url}/health", timeout=30).json()["batches"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


async def _load(url: str, tasks: list[str], concurrency: int, requests: int, calls: Callable[[], int]) -> dict[str, float]:
    latencies: list[float] = []
    gate = asyncio.Semaphore(concurrency)
    offset = 1000 * concurrency  # each level's own tasks
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=concurrency)) as client:
        async def one(i: int) -> None:
            async with gate:
                t0 = time.perf_counter()
                reply = await client.post(f"{url}/route", json={"task": asked(tasks, offset + i), "k": 10})
                reply.raise_for_status()
                latencies.append(1000 * (time.perf_counter() - t0))

        await asyncio.gather(*(one(-1 - i) for i in range(concurrency)))  # warm-up: one round
        latencies.clear()
        before = calls()
        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(requests)))
        wall = time.perf_counter() - t0
    return {**percentiles(latencies), "requests_per_s": round(requests / wall, 2), "requests": requests,
            "model_calls": calls() - before}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", default=[])
    parser.add_argument("--requests", type=int, default=24, help="requests per concurrency level (after a warm-up round)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--backends", nargs="+", default=["torch", "bf16", "onnx", "onnx-int8"],
                        help="reranker backends, the first the reference")
    parser.add_argument("--name", default="")
    parser.add_argument("--skills", type=int, help="the pool: the sample's first N skills (default: all of it)")
    parser.add_argument("--queries", type=int, default=100, help="the cell's own queries (also the tasks sent)")
    parser.add_argument("--modes", nargs="+", default=["batched", "unbatched"], choices=["batched", "unbatched"],
                        help="served micro-batched (the default server) and/or unbatched")
    args = parser.parse_args()
    name = "route_load" + (f"_{args.name}" if args.name else "")
    command = "python benchmarks/route_load.py " + " ".join(sys.argv[1:])
    import torch

    figures: dict = {"device": "cuda" if torch.cuda.is_available() else "cpu", "cpu_cores": os.cpu_count(), "k": 10}
    for backend in args.backends:
        overrides = ["encoder=minilm", "reranker=minilm_ce", "topk=20", *args.overrides, f"reranker.backend={backend}"]
        run, tasks, pool_size = build_cell(overrides, n_skills=args.skills, n_queries=args.queries)
        metrics = json.loads((run / "metrics.json").read_text())
        choices, embedded = metrics["choices"], metrics["stages"]["embed_pool"]
        figures.update(pool_skills=pool_size, encoder=choices["encoder"], reranker=choices["reranker"],
                       topk=int(choices["topk"]))
        figures.setdefault("pool_embedding_s", embedded["seconds"] if not embedded["cached"] else "cached (an earlier run)")
        if "pool_embedding_throughput" not in figures:  # once: each backend's cell shares the first one's embedding
            figures["pool_embedding_throughput"] = utilisation(embedded.get("throughput"), figures["device"])
        row = figures[f"backend {backend}"] = {"in_process_unbatched_ms": in_process(run, tasks, args.requests)}
        write_figures(name, figures, command)  # after each step: a run stopped at its budget keeps what it measured
        for mode in args.modes:
            server = Served(run, *(() if mode == "batched" else ("--max-batch", "1", "--batch-wait-ms", "0")))
            try:
                for c in args.concurrency:
                    result = asyncio.run(_load(server.url, tasks, c, args.requests, server.batches))
                    row[f"{mode} / concurrency {c}"] = result
                    print(backend, mode, c, result, flush=True)
                    write_figures(name, figures, command)
            finally:
                server.stop()
        if set(args.modes) == {"batched", "unbatched"}:  # the gain needs both servers' figures
            for c in args.concurrency:
                batched, unbatched = row[f"batched / concurrency {c}"], row[f"unbatched / concurrency {c}"]
                gain = batched["requests_per_s"] / unbatched["requests_per_s"]
                row[f"batching gain in requests/s at concurrency {c} (x)"] = round(gain, 2)
    mode = args.modes[0]
    reference = figures[f"backend {args.backends[0]}"]
    low, high = min(args.concurrency), max(args.concurrency)
    for backend in args.backends:
        row = figures[f"backend {backend}"]
        p50, rate = row[f"{mode} / concurrency {low}"]["p50"], row[f"{mode} / concurrency {high}"]["requests_per_s"]
        figures[f"goals / {backend}"] = {
            f"served p50 at concurrency {low} (ms)": p50, f"<= 300 ms": p50 <= 300,
            f"requests/s at concurrency {high}": rate, ">= 3 requests/s": rate >= 3,
            f"p50 ratio to {args.backends[0]} (x faster)": round(reference[f"{mode} / concurrency {low}"]["p50"] / p50, 2),
            f"requests/s ratio to {args.backends[0]} (x)": round(rate / reference[f"{mode} / concurrency {high}"]["requests_per_s"], 2)}
    write_figures(name, figures, command)


if __name__ == "__main__":
    main()
