"""The online path per query, as SkillRouter reports it (495.8 ms p50 for its 1.2B pipeline): encode
the query, search the cached pool index, rerank the top-20. p50 / p95 / p99 over the queries, the
process's peak memory and each model's parameter count, for any encoder / reranker preset (``reranker=none``:
the encoder alone). One run per pipeline preset, each under its own ``--name``, is what
``python -m skillrouter.report.efficiency`` compares (reports/efficiency.md).

    python benchmarks/serving_latency.py [--trained-reranker] [--queries 100] [--pool-size N] [--name NAME] [OVERRIDE ...]
    python benchmarks/serving_latency.py encoder=skillrouter_emb_0.6b encoder.model=PATH \
        reranker=skillrouter_rank_0.6b reranker.model=PATH            # the released checkpoints (GPU)

Overrides are Hydra overrides of conf/config.yaml (default: encoder=minilm reranker=minilm_ce); each model runs on
the backend a cell would give it (``auto``: bf16 autocast where the CPU multiplies bf16 natively), recorded in the
figures.
``--trained-reranker`` first fine-tunes reranker=trained on the built-in data through launch.py (a
cached stage) and serves that model. Pool: the 13.6K real skills of ../shared/data (the built-in
pool when absent), embedded once through the embed_pool stage; queries: the pool's descriptions.
Figures: reports/perf/serving_latency[_<name>].*.
"""
from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, SHARED_DATA, build_stage, pool_stage, write_figures  # noqa: E402

from hydra import compose, initialize_config_dir  # noqa: E402

from skillrouter.data.builtin import generate  # noqa: E402
from skillrouter.data.loaders import ErrorPolicy, load_pool  # noqa: E402
from skillrouter.data.types import LoadReport  # noqa: E402
from skillrouter.models import device, resolve_backend  # noqa: E402
from skillrouter.pipeline.compose import encoder_spec, encoder_text, reranker_spec, reranker_text  # noqa: E402
from skillrouter.rerank.scorers import make_scorer  # noqa: E402
from skillrouter.retrieval.dense import encode, load_encoder  # noqa: E402
from skillrouter.retrieval.onnx_backend import OnnxEncoder  # noqa: E402
from skillrouter.stages.reranking import ONNX_BACKENDS  # noqa: E402
from skillrouter.stages.retrieval import embed_pool, export_onnx  # noqa: E402


def trained_reranker(cache_dir: Path) -> str:
    """Fine-tune reranker=trained (MiniLM cross-encoder, listwise) on the built-in data; its model path."""
    run = Path(tempfile.mkdtemp()) / "run"
    subprocess.run([sys.executable, str(ROOT / "launch.py"), "encoder=minilm", "reranker=trained", f"hydra.run.dir={run}",
                    f"cache_dir={cache_dir}", "progress=false"], cwd=ROOT, check=True, capture_output=True)
    key = json.loads((run / "metrics.json").read_text())["stages"]["train_reranker"]["key"]
    return str(cache_dir / "train_reranker" / key / "model")


def parameters(model: object) -> int:
    """Every parameter of a torch model, LoRA adapters and frozen bases included (a wrapper's ``model``)."""
    import torch

    while not isinstance(model, torch.nn.Module) and hasattr(model, "model"):
        model = model.model
    return sum(p.numel() for p in model.parameters()) if isinstance(model, torch.nn.Module) else 0


def rr_backend(cfg) -> str:
    return resolve_backend(str(cfg.reranker.get("backend") or "torch"))


def reranker(cfg, model_path: str | None):
    """The cell's cross-encoder as its score_pairs stage scores (``reranker.backend``: torch, or bf16 autocast with
    the score layer in fp32); ONNX rerankers are measured by benchmarks/route_load.py."""
    backend = rr_backend(cfg)
    if backend in ONNX_BACKENDS:
        raise SystemExit(f"reranker.backend={backend}: serving_latency.py scores in torch or bf16; "
                         "ONNX Runtime rerankers: benchmarks/route_load.py")
    return make_scorer(reranker_spec(cfg.reranker), model_path=model_path, bf16=backend == "bf16")


def percentiles(values: list[float]) -> dict[str, float]:
    return {f"p{p}": round(float(np.percentile(values, p)), 1) for p in (50, 95, 99)} | {"mean": round(float(np.mean(values)), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", default=[])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--topk", type=int, default=20)
    parser.add_argument("--trained-reranker", action="store_true")
    parser.add_argument("--pool-size", type=int, default=None, help="serve the first N skills of the pool (default: all)")
    parser.add_argument("--name", default="", help="suffix of the figures file")
    args = parser.parse_args()
    cache_dir = ROOT / ".cache" / "skillrouter"
    overrides = ["encoder=minilm", "reranker=minilm_ce", *args.overrides]
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["hydra.runtime.cwd=.", *overrides], return_hydra_config=False)
    reranker_path = trained_reranker(cache_dir) if args.trained_reranker else None

    sample = SHARED_DATA / "skills-sample.jsonl.gz"
    source = sample if sample.exists() else generate(Path(tempfile.mkdtemp()))["pool"]
    skills = load_pool(source, "jsonl", ErrorPolicy("skip", LoadReport()), 200_000)[: args.pool_size]
    enc_text, rr_text = encoder_text(cfg), reranker_text(cfg)
    ids = [s.id for s in skills]
    spec, data = encoder_spec(cfg.encoder), pool_stage(skills, Path(tempfile.mkdtemp()))
    onnx = export_onnx(spec, None) if spec.backend in ONNX_BACKENDS else None
    t0 = time.perf_counter()
    pool = build_stage(embed_pool(spec, enc_text, data, "all", onnx=onnx), cache_dir)
    pool_seconds = time.perf_counter() - t0
    emb = np.load(Path(pool.path) / "embeddings.npy").astype(np.float32)

    import faiss

    index = faiss.IndexFlatIP(emb.shape[1])
    index.add(emb)
    model = load_encoder(spec)
    encoder_parameters = parameters(model)
    if onnx:
        exported = cache_dir / onnx.kind / onnx.key
        model = OnnxEncoder(exported / json.loads((exported / "manifest.json").read_text())["file"], model)
    scorer = reranker(cfg, reranker_path) if cfg.reranker.kind != "none" else None
    docs = {s.id: rr_text.skill(s) for s in skills} if scorer is not None else {}
    queries = [s.description or s.name for s in random.Random(0).sample(skills, args.queries + 3)]
    timings: dict[str, list[float]] = {"encode_ms": [], "search_ms": [], "rerank_ms": [], "total_ms": []}
    for i, q in enumerate(queries):
        t0 = time.perf_counter()
        qv = encode(model, [enc_text.query(q)], 1, False, bf16=spec.bf16)
        t1 = time.perf_counter()
        _, idx = index.search(qv, 50)
        t2 = time.perf_counter()
        head = [ids[j] for j in idx[0][: args.topk]]
        if scorer is not None:
            scorer.score([rr_text.query(q)] * len(head), [docs[h] for h in head])
        t3 = time.perf_counter()
        if i >= 3:  # warm-up queries excluded
            for name, value in zip(timings, (t1 - t0, t2 - t1, t3 - t2, t3 - t0)):
                timings[name].append(1000 * value)
    import torch

    figures = {"device": device(), "torch_threads": torch.get_num_threads(), "pool_skills": len(ids),
               "encoder": cfg.encoder.name, "reranker": (cfg.reranker.name + (" (fine-tuned on built-in data)" if reranker_path else "")),
               "backends": {"encoder": spec.backend, "reranker": rr_backend(cfg) if scorer is not None else "none"},
               "rerank_topk": args.topk if scorer is not None else 0, "queries": len(timings["total_ms"]),
               "parameters": {"encoder": encoder_parameters, "reranker": parameters(scorer) if scorer is not None else 0},
               "pool_embedding_s (cached after the first run)": round(pool_seconds, 2),
               **{name: percentiles(v) for name, v in timings.items()},
               "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if device() == "cuda":
        figures["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    name = "serving_latency" + (f"_{args.name}" if args.name else "")
    write_figures(name, figures, "python benchmarks/serving_latency.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
