"""Dense bi-encoders through sentence-transformers, from a local path, a weights package or a hub id.

Where the time goes is model compute, so the encoder runs as fast as the device allows:

* CUDA: bf16 weights, FlashAttention-2 when ``flash_attn`` is installed (else PyTorch SDPA),
  batches of similar length sized by a token budget (``max_tokens``) instead of a fixed count,
  pinned host memory with non-blocking copies, and one model replica per visible GPU when there
  are several (data parallel inside one job);
* CPU: an ONNX Runtime backend (``backend: onnx`` or ``onnx-int8``, dynamically quantised), run
  from a ``torch.onnx`` export (:mod:`skillrouter.retrieval.onnx_backend`).
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import numpy as np

from ..models import device, resolve_model

BACKENDS = ("torch", "onnx", "onnx-int8")
EXECUTION_ONLY = ("query_instruction", "batch_size", "max_tokens")  # EncoderSpec fields that do not change pool embeddings
CHUNK = 2048  # texts per encode call: the unit a progress line counts


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
    backend: str = "torch"  # torch | onnx | onnx-int8
    max_tokens: int | None = None  # token budget per batch (padded length x rows); None: fixed batch_size


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


def token_budget_batches(lengths: list[int], max_tokens: int, max_rows: int) -> list[list[int]]:
    """Indices grouped longest first into batches whose padded size (rows x longest) stays within
    ``max_tokens`` (a single longer text gets a batch of its own) and at most ``max_rows`` rows."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    for i in order:
        if batches and len(batches[-1]) < max_rows and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= max_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def _encode_budgeted(model, texts: list[str], max_tokens: int, max_rows: int, show_progress: bool,
                     devices: list[str] | None = None) -> np.ndarray:
    """Our own batching loop: similar lengths together, sized by tokens; pinned, non-blocking copies.
    With several ``devices``, one model replica per device pulls batches from a shared queue in its own
    thread (as ``nn.DataParallel`` drives its replicas: kernels and copies run outside the GIL)."""
    import copy
    import queue
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from ..progress import progress

    tok = model.tokenizer
    lengths = [len(ids) for ids in tok(texts, truncation=True, max_length=model.max_seq_length)["input_ids"]]
    pending: queue.SimpleQueue[list[int]] = queue.SimpleQueue()
    for batch in token_budget_batches(lengths, max_tokens, max_rows):
        pending.put(batch)
    replicas = [model]
    if devices:  # the model itself serves the first device it already sits on; the others get copies
        reuse = next((i for i, d in enumerate(devices) if torch.device(d) == model.device), None)
        replicas = [model if i == reuse else copy.deepcopy(model).to(d) for i, d in enumerate(devices)]
    bar = progress(len(texts), "encode", "texts", show_progress)
    done: list[tuple[list[int], np.ndarray]] = []

    def drain(replica) -> None:
        cuda = replica.device.type == "cuda"
        with torch.inference_mode():
            while True:
                try:
                    batch = pending.get_nowait()
                except queue.Empty:
                    return
                features = replica.preprocess([texts[i] for i in batch])
                features = {k: (v.pin_memory().to(replica.device, non_blocking=True) if cuda else v.to(replica.device))
                            if isinstance(v, torch.Tensor) else v for k, v in features.items()}
                emb = replica(features)["sentence_embedding"].float()
                done.append((batch, torch.nn.functional.normalize(emb, dim=-1).cpu().numpy()))
                bar.update(len(batch))

    with ThreadPoolExecutor(len(replicas)) as pool:
        list(pool.map(drain, replicas))
    bar.close()
    if not done:
        return np.zeros((0, 0), dtype=np.float32)
    out = np.empty((len(texts), done[0][1].shape[1]), dtype=np.float32)
    for batch, emb in done:
        out[batch] = emb
    return out


def data_parallel_devices() -> list[str] | None:
    """One process per visible GPU when a job sees several (an 8-GPU node); else None, one process."""
    if device() != "cuda":
        return None
    import torch

    return [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.device_count() > 1 else None


def encode(model, texts: list[str], batch_size: int, show_progress: bool = True, max_tokens: int | None = None,
           devices: list[str] | None = None) -> np.ndarray:
    """Unit-norm float32 embeddings. Without ``max_tokens``: sentence-transformers' own length-sorted
    batches of ``batch_size``; with it, token-budget batches. Several ``devices`` (by default every
    visible GPU when there are several): one replica each, sentence-transformers' multi-process pool
    for fixed batches, one thread per replica for token-budget batches."""
    from ..progress import progress

    devices = devices or (data_parallel_devices() if hasattr(model, "start_multi_process_pool") else None)
    if max_tokens and hasattr(model, "preprocess"):
        return _encode_budgeted(model, texts, max_tokens, batch_size, show_progress, devices)
    if devices:  # one call: the process pool is started once
        emb = model.encode(texts, batch_size=batch_size, show_progress_bar=False, normalize_embeddings=True,
                           convert_to_numpy=True, device=devices)
        return np.asarray(emb, dtype=np.float32)
    chunk = max(CHUNK, batch_size)  # progress per chunk; each chunk is length-sorted into batches as a whole
    parts = []
    with progress(len(texts), "encode", "texts", show_progress) as bar:
        for start in range(0, len(texts), chunk):
            part = texts[start:start + chunk]
            parts.append(np.asarray(model.encode(part, batch_size=batch_size, show_progress_bar=False,
                                                 normalize_embeddings=True, convert_to_numpy=True), dtype=np.float32))
            bar.update(len(part))
    return np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)
