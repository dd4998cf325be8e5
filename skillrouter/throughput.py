"""What a model stage computed and how fast: tokens (real and padded), seconds, tokens/s and the model's FLOPs per
token from its config, so a ``metrics.json`` says how far a run was from its hardware on any machine.

Model FLOPs count the multiply-adds of the transformer's weight matrices and attention (two FLOPs each), on the real
tokens only: padding, recomputation and cached-gradient replays are work the hardware did that the model did not
need, which is exactly the gap a utilisation figure exposes. A training step is three forward passes (the backward
pass costs two). Utilisation (MFU) divides by a peak that the same process measures on the same device
(:func:`matmul_peak`): a bf16 matmul, on the CPU as on a GPU, not a datasheet number; fp32 on a CPU without bf16 units,
where bf16 is emulated far below the fp32 peak (the benchmarks' ``device_peak`` chooses).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterable

GATED_ACTIVATIONS = ("silu", "swish")  # Llama / Qwen MLPs: gate, up and down projections (three matrices, not two)


@dataclass(frozen=True)
class ModelFlops:
    """Forward FLOPs of one token: ``dense`` (weights) plus ``attention`` per position it attends to."""

    dense: float
    attention: float

    @classmethod
    def of(cls, config: Any) -> ModelFlops:
        """From a transformers config (a BERT-style encoder or a Llama/Qwen-style decoder; grouped-query attention
        counted by its key/value heads)."""
        cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
        d, layers, inner = cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size
        heads = cfg.num_attention_heads
        kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
        head_dim = getattr(cfg, "head_dim", None) or d // heads
        projections = d * head_dim * (2 * heads + 2 * kv_heads)  # q and o, k and v
        mlp = (3 if str(getattr(cfg, "hidden_act", "")).lower() in GATED_ACTIVATIONS else 2) * d * inner
        return cls(dense=2.0 * layers * (projections + mlp), attention=2.0 * layers * 2 * heads * head_dim)

    def per_token(self, length: float) -> float:
        return self.dense + self.attention * length


def model_flops(model: Any) -> ModelFlops | None:
    """The :class:`ModelFlops` of a transformers model, a sentence-transformers model or a wrapper holding one
    (``.model``), found by its ``config``; None when none is found (an ONNX session)."""
    for candidate in (model, getattr(model, "model", None), getattr(model, "auto_model", None)):
        config = getattr(candidate, "config", None)
        if config is not None and hasattr(config, "hidden_size"):
            return ModelFlops.of(config)
    modules = getattr(model, "_modules", {}) or {}
    first = next(iter(modules.values()), None)  # a SentenceTransformer: its Transformer module
    inner = getattr(first, "auto_model", None) or getattr(first, "model", None)
    config = getattr(inner, "config", None)
    return ModelFlops.of(config) if config is not None and hasattr(config, "hidden_size") else None


@dataclass
class Throughput:
    """Counts of the sequences a model ran over; ``passes``: 1 for inference, 3 for training (forward + backward)."""

    flops: ModelFlops | None = None
    passes: int = 1
    sequences: int = 0
    tokens: int = 0
    padded_tokens: int = 0
    squares: int = 0  # sum of squared lengths: the attention term
    seconds: float = 0.0

    def count(self, lengths: Iterable[int], padded: int) -> None:
        """One batch: the real length of each sequence and the positions computed (rows x width, or the packed
        length)."""
        lengths = list(lengths)
        self.sequences += len(lengths)
        self.tokens += sum(lengths)
        self.squares += sum(n * n for n in lengths)
        self.padded_tokens += padded

    def count_mask(self, mask: Any) -> None:
        """One padded batch from its ``[rows, width]`` attention mask."""
        self.count(mask.sum(dim=1).tolist(), mask.numel())

    def timed(self) -> _Timed:
        """``with meter.timed(): ...`` adds the block's wall time."""
        return _Timed(self)

    def record(self, peak_tflops: float | None = None) -> dict[str, Any]:
        """The figures ``metrics.json`` carries (and, given a measured peak, the model-FLOPs utilisation)."""
        out: dict[str, Any] = {"sequences": self.sequences, "tokens": self.tokens, "padded_tokens": self.padded_tokens,
                               "padding": round(1 - self.tokens / self.padded_tokens, 4) if self.padded_tokens else 0.0,
                               "seconds": round(self.seconds, 3), "passes": self.passes,
                               "tokens_per_s": round(self.tokens / self.seconds, 1) if self.seconds else None}
        if self.flops is not None and self.tokens:
            forward = self.flops.dense * self.tokens + self.flops.attention * self.squares
            out["flops_per_token"] = round(forward / self.tokens)
            out["model_tflops_per_s"] = round(self.passes * forward / self.seconds / 1e12, 4) if self.seconds else None
            if peak_tflops and out["model_tflops_per_s"] is not None:
                out["peak_tflops_per_s"] = round(peak_tflops, 3)
                out["mfu"] = round(out["model_tflops_per_s"] / peak_tflops, 4)
        return out


def combined(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The figures of work done in parts (a pool embedded as shards, one job each) as one record: counts and seconds
    summed (the shards' compute time, not the wall time of jobs that ran side by side), rates recomputed."""
    records = list(records)
    tokens, padded = sum(r["tokens"] for r in records), sum(r["padded_tokens"] for r in records)
    seconds = sum(r["seconds"] for r in records)
    out: dict[str, Any] = {"sequences": sum(r["sequences"] for r in records), "tokens": tokens, "padded_tokens": padded,
                           "padding": round(1 - tokens / padded, 4) if padded else 0.0, "seconds": round(seconds, 3),
                           "passes": records[0]["passes"] if records else 1,
                           "tokens_per_s": round(tokens / seconds, 1) if seconds else None, "parts": len(records)}
    if tokens and all("flops_per_token" in r for r in records):
        forward = sum(r["flops_per_token"] * r["tokens"] for r in records)
        out["flops_per_token"] = round(forward / tokens)
        out["model_tflops_per_s"] = round(out["passes"] * forward / seconds / 1e12, 4) if seconds else None
    return out


class _Timed:
    def __init__(self, meter: Throughput):
        self.meter = meter

    def __enter__(self) -> Throughput:
        self.t0 = time.perf_counter()
        return self.meter

    def __exit__(self, *exc: object) -> None:
        self.meter.seconds += time.perf_counter() - self.t0


def matmul_peak(device: str = "cpu", dtype: str = "bfloat16", size: int | None = None, seconds: float = 2.0) -> float:
    """TFLOP/s of a square ``dtype`` matmul on ``device``, measured now (what this process can reach with the
    threads it has): the denominator of a utilisation figure."""
    import torch

    size = size or (8192 if device.startswith("cuda") else 2048)
    kind = getattr(torch, dtype)
    a = torch.randn(size, size, device=device).to(kind)
    b = torch.randn(size, size, device=device).to(kind)

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    for _ in range(3):  # warm-up: kernels chosen, clocks up
        a @ b
    sync()
    runs, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds or runs < 3:
        a @ b
        runs += 1
        if runs % 10 == 0:
            sync()
    sync()
    return 2 * size**3 * runs / (time.perf_counter() - t0) / 1e12
