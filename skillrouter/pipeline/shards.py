"""Pool embedding split across jobs: ``embed.shards=N`` cuts the rendered pool into N contiguous
shards, each a cached ``embed_shard`` stage built by its own process (N local processes, or a SLURM
job array through submitit), then merged in order into the ``embed_pool`` artifact.

Shards are keyed by their own texts and the encoder, so any grid that embeds the same pool with the
same encoder shares them, and a shard finished before a crash is never recomputed. Workers read
their task from a JSON file in the cache (the texts can be hundreds of MB: nothing large is pickled).

    python -m skillrouter.pipeline.shards TASK.json      # one shard (what each job runs)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..data.jsonl import atomic_write_json
from ..models import respect_cpu_allocation
from ..retrieval import dense as dense_module
from ..retrieval.dense import EXECUTION_ONLY, EncoderSpec
from .cache import StageCache, texts_fingerprint
from .slurm_jobs import slurm_executor


@dataclass(frozen=True)
class ShardPlan:
    """How to run the shards: ``launcher`` local (processes on this machine) or slurm (submitit)."""

    shards: int = 1
    launcher: str = "local"
    slurm: dict[str, Any] = field(default_factory=dict)


def shard_bounds(n: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous, near-equal ranges covering ``range(n)``."""
    edges = [round(i * n / shards) for i in range(shards + 1)]
    return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]


def embedding_identity(spec: dict[str, Any], ids: list[str], texts: list[str], model_key: str | None
                       ) -> tuple[dict, list[str]]:
    """``(params, inputs)`` of a pool (or shard) embedding: the encoder's output-defining settings
    (``asdict(spec)`` less :data:`EXECUTION_ONLY`) and the content embedded."""
    params = {k: v for k, v in spec.items() if k not in EXECUTION_ONLY}
    return params, [texts_fingerprint(ids), texts_fingerprint(texts)] + ([model_key] if model_key else [])


def shard_key(cache: StageCache, spec: EncoderSpec, ids: list[str], texts: list[str], model_key: str | None) -> str:
    return cache.key("embed_shard", 1, *embedding_identity(asdict(spec), ids, texts, model_key), [dense_module])


def build_shard(task: dict[str, Any]) -> str:
    """Embed one shard through the cache (a finished shard is reused, a running one waited for)."""
    from . import stages

    spec = EncoderSpec(**task["spec"])
    params, inputs = embedding_identity(task["spec"], task["ids"], task["texts"], task["model_key"])
    cache = StageCache(task["cache_dir"])

    def build(out: Path) -> dict[str, Any]:
        model = stages.encoder_model(cache, spec, task["model_path"], task["model_key"], task["user"])
        emb = dense_module.encode(model, [spec.document_prefix + t for t in task["texts"]], spec.batch_size, False,
                                  spec.max_tokens)
        np.save(out / "embeddings.npy", emb.astype(np.float16))
        return {"n": len(task["ids"])}

    rec = cache.get_or_build("embed_shard", 1, params, inputs, build, code=[dense_module], user=task["user"])
    return rec.path


def _run_local(task_files: list[Path]) -> None:
    threads = max(1, (os.cpu_count() or 1) // len(task_files))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    procs = [subprocess.Popen([sys.executable, "-m", "skillrouter.pipeline.shards", str(f)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for f in task_files]
    errors = [(f, p.communicate()[1]) for f, p in zip(task_files, procs)]
    failed = [(f, err) for (f, err), p in zip(errors, procs) if p.returncode != 0]
    if failed:
        f, err = failed[0]
        raise RuntimeError(f"embedding shard {f.stem} failed: {err.strip().splitlines()[-1] if err.strip() else 'no output'}")


def _run_slurm(task_files: list[Path], folder: Path, slurm: dict[str, Any]) -> None:
    jobs = slurm_executor(folder, slurm).map_array(_run_task_file, [str(f) for f in task_files])
    for job in jobs:
        job.result()


def _run_task_file(task_file: str) -> str:
    respect_cpu_allocation()
    return build_shard(json.loads(Path(task_file).read_text()))


def embed_sharded(cache: StageCache, spec: EncoderSpec, texts: list[str], ids: list[str], plan: ShardPlan, user: str,
                  model_path: str | None, model_key: str | None) -> np.ndarray:
    """Float16 embeddings of the whole pool from its shards, building the missing ones in parallel."""
    bounds = shard_bounds(len(ids), plan.shards)
    keys = [shard_key(cache, spec, ids[a:b], texts[a:b], model_key) for a, b in bounds]
    missing = [(i, key) for i, key in enumerate(keys) if not cache.is_complete("embed_shard", key)]
    task_files = []
    for i, key in missing:
        a, b = bounds[i]
        task_file = cache.root / "embed_shard" / f"{key}.task.json"
        atomic_write_json(task_file, {"spec": asdict(spec), "ids": ids[a:b], "texts": texts[a:b], "model_path": model_path,
                                      "model_key": model_key, "cache_dir": str(cache.root), "user": user})
        task_files.append(task_file)
    try:
        if task_files and plan.launcher == "slurm":
            _run_slurm(task_files, cache.root / "embed_shard" / ".submitit", plan.slurm)
        elif task_files:
            _run_local(task_files)
    finally:
        for f in task_files:
            f.unlink(missing_ok=True)
    return np.concatenate([np.load(cache.entry("embed_shard", key) / "embeddings.npy") for key in keys])


if __name__ == "__main__":
    print(_run_task_file(sys.argv[1]))
