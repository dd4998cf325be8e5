"""Dense bi-encoders through sentence-transformers, from a local path, a weights package or a hub id."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..models import device, resolve_model


@dataclass(frozen=True)
class EncoderSpec:
    """What identifies an encoder's output: everything here goes into the embedding cache key."""

    model: str
    pooling: str | None = None  # None: the model's own sentence-transformers config; else mean|cls|lasttoken
    max_seq_length: int = 256
    query_instruction: str = ""
    document_prefix: str = ""
    batch_size: int = 32
    padding_side: str | None = None  # "left" for last-token pooling as the Qwen3 releases run it
    trust_remote_code: bool = False


def load_encoder(spec: EncoderSpec, model_path: str | None = None):
    """Build the SentenceTransformer. With ``pooling`` set, assemble Transformer + Pooling + Normalize
    explicitly (how Qwen3-Embedding's last-token pooling is reproduced from a bare checkpoint).
    ``model_path`` is a saved sentence-transformers model (a trained checkpoint, possibly only a
    LoRA adapter), which carries its own pooling."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    import torch

    path = model_path or resolve_model(spec.model)
    kwargs = {"model_kwargs": {"dtype": torch.bfloat16} if device() == "cuda" else None,
              "processor_kwargs": {"padding_side": spec.padding_side} if spec.padding_side else None}
    if model_path or spec.pooling is None:
        model = SentenceTransformer(path, device=device(), trust_remote_code=spec.trust_remote_code, **kwargs)
    else:
        transformer = Transformer(path, max_seq_length=spec.max_seq_length, **kwargs)
        pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode=spec.pooling)
        model = SentenceTransformer(modules=[transformer, pooling, Normalize()], device=device())
    model.max_seq_length = spec.max_seq_length
    return model


def encode(model, texts: list[str], batch_size: int, show_progress: bool = True) -> np.ndarray:
    """Unit-norm float32 embeddings. sentence-transformers sorts by length internally, so each batch
    pads to similar lengths; the progress bar is its own."""
    emb = model.encode(texts, batch_size=batch_size, show_progress_bar=show_progress,
                       normalize_embeddings=True, convert_to_numpy=True)
    return np.asarray(emb, dtype=np.float32)
