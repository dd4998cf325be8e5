"""A trained cross-encoder scored in each backend (``reranker.backend=torch|bf16|onnx|onnx-int8``) in one grid: the
accuracy of each against torch's (the same trained weights: one training, one export per ONNX backend), whether fp32
ONNX ranks as torch does, the largest score difference, and each ``score_pairs`` stage's seconds (what a CPU cluster
gains in a grid cell).

    python benchmarks/reranker_backends.py [--data-root DIR] [OVERRIDE ...]

Default: the SkillRet-layout sample of ../shared/data (real skills: 9 test queries over the test skills, the listwise
MiniLM cross-encoder trained on its 200 train pairs), MiniLM first stage, top-20. Figures:
reports/perf/reranker_onnx_parity.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, SHARED_DATA, write_figures  # noqa: E402

BACKENDS = ("torch", "bf16", "onnx", "onnx-int8")
WORK = ROOT / ".cache" / "bench" / "reranker_backends"


def head_scores(run: Path, k: int = 20) -> dict[tuple[str, str], float]:
    """The reranker's score of each query's top ``k`` (the reranked head of the cell's ``rankings.jsonl``)."""
    rows = [json.loads(line) for line in (run / "rankings.jsonl").read_text().splitlines()]
    return {(r["qid"], i): s for r in rows for i, s in r["ranked"][:k]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", default=[])
    parser.add_argument("--data-root", type=Path, default=SHARED_DATA / "skillret-sample")
    args = parser.parse_args()
    sweep, cache = WORK / "grid", ROOT / ".cache" / "skillrouter"
    overrides = ["data=skillret", f"data.root={args.data_root}", "encoder=minilm", "reranker=trained", "loss=listwise",
                 "topk=20", *args.overrides]
    subprocess.run([sys.executable, str(ROOT / "launch.py"), "-m", *overrides, f"reranker.backend={','.join(BACKENDS)}",
                    f"hydra.sweep.dir={sweep}", f"cache_dir={cache}", "progress=false"], cwd=ROOT, check=True)
    metrics = {}
    for d in sorted(sweep.iterdir(), key=lambda p: p.name):
        if not (d / "metrics.json").exists():
            continue
        m = json.loads((d / "metrics.json").read_text())
        backend = json.loads((d / "provenance.json").read_text())["config"]["reranker"]["backend"]
        metrics[backend] = (m, d)
    torch_m, torch_dir = metrics["torch"]
    reference = head_scores(torch_dir)
    ranked = {b: [json.loads(line)["ranked"] for line in (d / "rankings.jsonl").read_text().splitlines()]
              for b, (_, d) in metrics.items()}
    shown = [o.replace(str(args.data_root), os.path.relpath(args.data_root, ROOT)) for o in overrides]  # no machine's path
    figures: dict = {"data": str(args.data_root.name), "queries": torch_m["n_queries"], "overrides": " ".join(shown),
                     "train_reranker_key": torch_m["stages"]["train_reranker"]["key"]}
    for backend, (m, d) in metrics.items():
        own = head_scores(d)
        diff = max(abs(own[k] - reference[k]) for k in reference)
        same_order = all([i for i, _ in a[:20]] == [i for i, _ in b[:20]] for a, b in zip(ranked[backend], ranked["torch"]))
        figures[backend] = {
            "hit@1": round(m["metrics"]["hit@1"], 4), "mrr@10": round(m["metrics"]["mrr@10"], 4),
            "hit@1 - torch (points)": round(100 * (m["metrics"]["hit@1"] - torch_m["metrics"]["hit@1"]), 2),
            "mrr@10 - torch (points)": round(100 * (m["metrics"]["mrr@10"] - torch_m["metrics"]["mrr@10"]), 2),
            "rankings equal torch's (top-20, every query)": same_order,
            "largest score difference to torch": round(float(diff), 5),
            "score correlation with torch": round(float(np.corrcoef([own[k] for k in reference],
                                                                      list(reference.values()))[0, 1]), 5),
            "score_pairs seconds": m["stages"]["score_pairs"]["seconds"] if not m["stages"]["score_pairs"]["cached"]
            else "cached (built by an earlier run)",
            "export seconds": (m["stages"].get("export_reranker") or {}).get("seconds"),
        }
    write_figures("reranker_onnx_parity", figures, "python benchmarks/reranker_backends.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
