"""Dense bi-encoders through sentence-transformers, from a local path, a weights package or a hub id.

Where the time goes is model compute, so :func:`encode` keeps everything else out of its way: every text is
tokenised once, up front; batches are formed over the whole input, longest first, sized by rows (``batch_size``)
or by a token budget (``max_tokens``), and each is padded only to its own longest text; every batch's real and
padded tokens and the wall time go to a :class:`~skillrouter.throughput.Throughput` meter. Then, per device:

* CUDA: bf16 weights, FlashAttention-2 when ``flash_attn`` is installed (else PyTorch SDPA), pinned host memory
  with non-blocking copies, one model replica per visible GPU when there are several (threads pulling batches from
  one queue). With FlashAttention-2 the batches are *packed*: a batch's texts concatenated into one row with
  positions restarting per text, no padding at all (the variable-length kernel keeps them apart; pooling reads
  each text's own span);
* CPU: ``backend: bf16`` runs the model under bfloat16 autocast (2.2x fp32 on AVX-512 BF16 in the model's own
  time, ``reports/perf/bf16_parity.md``), ``backend: auto`` chooses it where the CPU has native bf16; or an ONNX
  Runtime backend (``onnx``, ``onnx-int8``) from a ``torch.onnx`` export (:mod:`skillrouter.retrieval.onnx_backend`).
  Packing is off on the CPU: without a variable-length kernel, a packed row's block-diagonal mask makes attention
  quadratic in the whole row, more work than the few percent of padding that length-sorted batches leave.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..batches import padded, token_budget_batches
from ..models import device, resolve_model
from ..throughput import Throughput, model_flops

BACKENDS = ("torch", "bf16", "onnx", "onnx-int8")
EXECUTION_ONLY = ("query_instruction", "batch_size", "max_tokens")  # EncoderSpec fields that do not change pool embeddings
VARLEN_ATTENTION = ("flash_attention_2", "flash_attention_3")  # implementations that keep packed texts apart


@dataclass(frozen=True)
class EncoderSpec:
    """What identifies an encoder's output: everything here goes into the pool embedding cache key
    except :data:`EXECUTION_ONLY` (the query prefix, and how batches are formed)."""

    model: str
    pooling: str | None = None  # None: the model's own sentence-transformers config; else mean|cls|lasttoken
    max_seq_length: int = 256
    query_instruction: str = ""
    document_prefix: str = ""
    batch_size: int = 32
    padding_side: str | None = None  # "left" for last-token pooling as the Qwen3 releases run it
    trust_remote_code: bool = False
    backend: str = "torch"  # torch | bf16 | onnx | onnx-int8 (``auto`` is resolved when a cell is composed)
    max_tokens: int | None = None  # token budget per batch (padded length x rows); None: fixed batch_size

    @property
    def bf16(self) -> bool:
        return self.backend == "bf16"


def attention_implementation() -> str | None:
    """FlashAttention-2 on CUDA when installed, SDPA otherwise on CUDA; the model default on CPU."""
    if device() != "cuda":
        return None
    return "flash_attention_2" if importlib.util.find_spec("flash_attn") else "sdpa"


def load_encoder(spec: EncoderSpec, model_path: str | None = None):
    """Build the SentenceTransformer. With ``pooling`` set, assemble Transformer + Pooling + Normalize
    explicitly (how Qwen3-Embedding's last-token pooling is reproduced from a bare checkpoint).
    ``model_path`` is a saved sentence-transformers model (a trained checkpoint, possibly only a
    LoRA adapter), which carries its own pooling."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    if spec.backend not in BACKENDS:
        raise ValueError(f"encoder.backend must be one of {BACKENDS}, got {spec.backend!r}")
    path = model_path or resolve_model(spec.model)
    model_kwargs = {"dtype": torch.bfloat16, "attn_implementation": attention_implementation()} if device() == "cuda" else None
    kwargs = {"model_kwargs": model_kwargs,
              "processor_kwargs": {"padding_side": spec.padding_side} if spec.padding_side else None}
    if model_path or spec.pooling is None:
        model = SentenceTransformer(path, device=device(), trust_remote_code=spec.trust_remote_code, **kwargs)
    else:
        transformer = Transformer(path, max_seq_length=spec.max_seq_length, **kwargs)
        pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode=spec.pooling)
        model = SentenceTransformer(modules=[transformer, pooling, Normalize()], device=device())
    model.max_seq_length = spec.max_seq_length
    return model


def token_ids(tokenizer, texts: list[str], max_length: int | None) -> list[list[int]]:
    """Each text's ids, special tokens included and cut to ``max_length``: what sentence-transformers' ``preprocess``
    makes of a text before padding, computed once for the whole input."""
    if not texts:
        return []
    return tokenizer(texts, truncation=max_length is not None, max_length=max_length, return_attention_mask=False,
                     return_token_type_ids=False)["input_ids"]


def padded_features(tokenizer, rows: list[list[int]]) -> dict[str, Any]:
    """A padded batch as the tokenizer would pad it (its ``padding_side`` and pad id), with token type ids where the
    model takes them."""
    import torch

    types = [[0] * len(r) for r in rows] if "token_type_ids" in tokenizer.model_input_names else None
    arrays = padded(rows, tokenizer.pad_token_id or 0, types, left=tokenizer.padding_side == "left")
    return {**{k: torch.from_numpy(v) for k, v in arrays.items()}, "modality": "text"}


def packed_features(rows: list[list[int]], position_offset: int = 0) -> dict[str, Any]:
    """A batch packed into one row: ids concatenated, positions restarting per text, and the cumulative lengths a
    variable-length attention kernel and sentence-transformers' flattened pooling read (transformers' own
    ``DataCollatorWithFlattening`` layout). Without a varlen kernel transformers masks the row block-diagonally."""
    import torch

    lengths = torch.tensor([len(r) for r in rows], dtype=torch.int32)
    cu = torch.nn.functional.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))
    longest = int(lengths.max())
    return {"input_ids": torch.tensor([[t for r in rows for t in r]]),
            "position_ids": torch.cat([torch.arange(len(r)) for r in rows]).unsqueeze(0) + position_offset,
            "seq_idx": torch.repeat_interleave(torch.arange(len(rows), dtype=torch.int32), lengths).unsqueeze(0),
            "cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": longest, "max_length_k": longest,
            "modality": "text"}


def position_offset(model) -> int:
    """Where a packed text's positions start: 0, or ``padding_idx + 1`` for RoBERTa-style learned positions (what
    sentence-transformers' own flattening adds)."""
    import torch

    for module in model.modules():
        padding_idx = getattr(module, "padding_idx", None)
        if isinstance(padding_idx, int) and isinstance(getattr(module, "position_embeddings", None), torch.nn.Embedding):
            return padding_idx + 1
    return 0


def _transformer(model):
    return getattr(model[0], "auto_model", None) if hasattr(model, "__getitem__") else None


def packs(model) -> bool:
    """Whether the model's attention keeps packed texts apart with a variable-length kernel (FlashAttention)."""
    return getattr(getattr(_transformer(model), "config", None), "_attn_implementation", None) in VARLEN_ATTENTION


def can_pack(model) -> bool:
    """Whether a packed row is exact for this model: a variable-length kernel, or causal attention without one
    (transformers then masks the row block-diagonally from the restarting positions); a bidirectional encoder
    without a varlen kernel would attend across its texts."""
    inner = _transformer(model)
    return packs(model) or any(getattr(m, "is_causal", False) for m in (inner.modules() if inner is not None else ()))


def data_parallel_devices() -> list[str] | None:
    """One replica per visible GPU when a job sees several (an 8-GPU node); else None, one process."""
    if device() != "cuda":
        return None
    import torch

    return [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.device_count() > 1 else None


def _torch_runner(replica, bf16: bool, packed: bool) -> Callable[[list[list[int]]], np.ndarray]:
    """A batch of token ids -> unit-norm float32 embeddings, on ``replica``'s device."""
    import torch

    cuda = replica.device.type == "cuda"
    tokenizer, offset = replica.tokenizer, position_offset(replica)

    def run(rows: list[list[int]]) -> np.ndarray:
        features = packed_features(rows, offset) if packed else padded_features(tokenizer, rows)
        features = {k: (v.pin_memory().to(replica.device, non_blocking=True) if cuda else v)
                    if isinstance(v, torch.Tensor) else v for k, v in features.items()}
        with torch.inference_mode(), torch.autocast(replica.device.type, dtype=torch.bfloat16, enabled=bf16):
            emb = replica(features)["sentence_embedding"].float()
        return torch.nn.functional.normalize(emb, dim=-1).cpu().numpy()

    return run


def encode(model, texts: list[str], batch_size: int, show_progress: bool = True, max_tokens: int | None = None,
           devices: list[str] | None = None, bf16: bool = False, meter: Throughput | None = None,
           packed: bool | None = None) -> np.ndarray:
    """Unit-norm float32 embeddings of ``texts`` (see the module docstring): batches of ``batch_size`` rows, within
    ``max_tokens`` when set; ``bf16``: bfloat16 autocast; ``packed``: one padding-free row per batch (None: where the
    attention has a variable-length kernel). Several ``devices`` (by default every visible GPU when there are
    several): one replica each. ``meter`` gets every batch's tokens and the wall time."""
    import copy
    import queue
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from ..progress import progress

    meter = meter if meter is not None else Throughput()
    if meter.flops is None:
        meter.flops = model_flops(getattr(model, "st", model))
    onnx = not isinstance(model, torch.nn.Module)  # an OnnxEncoder: its own session runs the batches
    packed = (not onnx and packs(model)) if packed is None else packed
    if packed and (onnx or not can_pack(model)):
        raise ValueError("packed batches need a variable-length attention kernel (FlashAttention-2 on CUDA) or a "
                         "causal model; this encoder attends across a packed row: encode it padded")
    with meter.timed():
        tokenizer = model.st.tokenizer if onnx else model.tokenizer
        rows = token_ids(tokenizer, texts, model.max_seq_length)
        lengths = [len(r) for r in rows]
        budget = max_tokens or (batch_size * model.max_seq_length if packed else None)
        pending: queue.SimpleQueue[list[int]] = queue.SimpleQueue()
        for batch in token_budget_batches(lengths, budget, batch_size, packed):
            pending.put(batch)
        if onnx:
            runners = [lambda rs: model.run(padded_features(tokenizer, rs))]
        else:
            devices = devices or data_parallel_devices()
            replicas = [model]
            if devices:  # the model itself serves the device it already sits on; the others get copies
                reuse = next((i for i, d in enumerate(devices) if torch.device(d) == model.device), None)
                replicas = [model if i == reuse else copy.deepcopy(model).to(d) for i, d in enumerate(devices)]
            runners = [_torch_runner(r, bf16, packed) for r in replicas]
        bar = progress(len(texts), "encode", "texts", show_progress)
        done: list[tuple[list[int], np.ndarray]] = []
        lock = threading.Lock()

        def drain(run) -> None:
            while True:
                try:
                    batch = pending.get_nowait()
                except queue.Empty:
                    return
                emb = run([rows[i] for i in batch])
                width = sum(lengths[i] for i in batch) if packed else len(batch) * max(lengths[i] for i in batch)
                with lock:
                    done.append((batch, emb))
                    meter.count([lengths[i] for i in batch], width)
                    bar.update(len(batch))

        with ThreadPoolExecutor(len(runners)) as pool:
            list(pool.map(drain, runners))
        bar.close()
    if not done:
        return np.zeros((0, 0), dtype=np.float32)
    out = np.empty((len(texts), done[0][1].shape[1]), dtype=np.float32)
    for batch, emb in done:
        out[batch] = emb
    return out
