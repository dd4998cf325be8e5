"""BM25 on real skills: index and query time on the 13.6K-skill sample (our retrieve stage against
plain bm25s on the same texts, one run), then a 70K-skill pool through launch.py with rescore.

    python benchmarks/bm25_real_pool.py [--scale 70000]

The 70K pool is the real sample repeated with suffixed ids (``~rN``) until it holds --scale skills:
the same format and text statistics as a real 70K pool, which this machine does not have.
Queries: ../shared/data/skillsbench-dev-tasks.jsonl. Needs ../shared/data.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, SHARED_DATA, Timer, build_stage, scaled_pool, write_figures  # noqa: E402

from skillrouter.data import load_dataset  # noqa: E402
from skillrouter.eval.rescore import mismatches, rescore  # noqa: E402
from skillrouter.fields import Caps, TextSpec, render_pool, render_query  # noqa: E402
from skillrouter.retrieval.bm25 import bm25_search  # noqa: E402
from skillrouter.stages.data import load_data  # noqa: E402
from skillrouter.stages.retrieval import retrieve_bm25  # noqa: E402

BM25 = {"name": "bm25", "kind": "bm25", "k1": 1.5, "b": 0.75, "stopwords": "en"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=int, default=70_000)
    args = parser.parse_args()
    sample, tasks = SHARED_DATA / "skills-sample.jsonl.gz", SHARED_DATA / "skillsbench-dev-tasks.jsonl"
    if not sample.exists():
        sys.exit(f"needs {sample}")
    tmp = Path(tempfile.mkdtemp())
    with Timer() as load:
        ds = load_dataset(sample, tasks)
    texts = render_pool(ds.skills, "all", Caps(300, 2500))
    ids = [s.id for s in ds.skills]
    qtexts = [render_query(q.text, 1500) for q in ds.queries]
    with Timer() as plain:
        bm25_search(texts, qtexts, 50, show_progress=False)
    text = TextSpec(mode="all", caps=Caps(300, 2500), query_cap=1500)
    data = load_data({"source": "files", "pool": str(sample), "queries": str(tasks)}, "easy", False)
    build_stage(data, tmp / "cache")  # the parsed pool, built apart: the stage below renders from it
    with Timer() as ours:
        build_stage(retrieve_bm25(BM25, text, text, data, "all", 50), tmp / "cache")
    with Timer() as warm:
        build_stage(retrieve_bm25(BM25, text, text, data, "all", 50), tmp / "cache")

    big = tmp / f"pool-{args.scale}.jsonl.gz"
    n_big = scaled_pool(sample, big, args.scale)
    cmd = [sys.executable, str(ROOT / "launch.py"), "data=jsonl", f"data.pool={big}", f"data.queries={tasks}",
           "encoder=bm25", f"hydra.run.dir={tmp / 'run70k'}", f"cache_dir={tmp / 'cache'}", "progress=false"]
    with Timer() as scale_run:
        subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True)
    recorded, recomputed = rescore(tmp / "run70k")
    run = json.loads((tmp / "run70k" / "metrics.json").read_text())
    write_figures("bm25_real_pool", {
        "skills": len(ids), "queries": len(qtexts), "load_and_validate_s": load.seconds,
        "plain_bm25s_index_and_query_s": plain.seconds, "skillrouter_retrieve_stage_cold_s": ours.seconds,
        "skillrouter_retrieve_stage_warm_s": warm.seconds,
        f"launch_py_bm25_{n_big}_skills_wall_s": scale_run.seconds,
        f"launch_py_bm25_{n_big}_stage_seconds": {k: v["seconds"] for k, v in run["stages"].items()},
        f"{n_big}_hit@1": recorded["hit@1"], f"{n_big}_r@50": recorded["r@50"],
        f"{n_big}_rescore_mismatches": len(mismatches(recorded, recomputed)),
    }, f"python benchmarks/bm25_real_pool.py --scale {args.scale}")


if __name__ == "__main__":
    main()
