"""The GPU embedding benchmark's candidates (``benchmarks/gpu_embed.py``): before one of them replaces how our encoder
runs a causal decoder, it must embed exactly as the encoder does. Checked here on the CPU with a tiny random Qwen3;
the device run measures their speed."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_embed import compare_variants  # noqa: E402

from skillrouter.models import build_tiny_qwen3  # noqa: E402
from skillrouter.retrieval.dense import EncoderSpec  # noqa: E402


def test_right_padding_without_a_mask_embeds_a_causal_decoder_as_left_padding_with_the_mask(tmp_path, cpu_only):
    model = build_tiny_qwen3(tmp_path / "base")
    # lengths from 3 to ~60 tokens, a budget that puts several of them in a batch: most rows carry padding
    texts = [" ".join(f"word{j} skill" for j in range(1 + 3 * i)) for i in range(12)]
    spec = EncoderSpec(model=model, pooling="lasttoken", padding_side="left", max_seq_length=128, max_tokens=256)
    figures = dict(compare_variants(spec, texts, ("mask", "causal-right"), None))
    right = figures["causal-right"]
    assert right["sequences"] == len(texts) and right["padding"] > 0
    assert right["tokens"] == figures["mask"]["tokens"]
    assert right["max |diff| vs mask"] < 1e-5
    assert right["min cosine vs mask"] == pytest.approx(1.0, abs=1e-6)
