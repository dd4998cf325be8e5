"""The score layer in fp32 when a cross-encoder scores under bf16 autocast (``reranker.backend=bf16``, and ``auto``
where the CPU has bf16).

Autocast runs every linear layer in bf16, the last one too, so a score came out rounded to bf16's 8 significant bits
(steps of 1/32 between 4 and 8). Pairs of one head then tie where fp32 tells them apart, and a tie keeps the first
stage's order: the "reranker alone" rows drift toward their first stage. Measured on the built-in data (a trained
MiniLM cross-encoder, 60 queries' top-20): 105 tied scores in bf16 against 9 in fp32. The layer that makes the score
(a sequence classifier's head, a causal LM's output layer at the last position) is a small part of a pair's work: it
runs in fp32 on the bf16 hidden state (PyTorch's documented autocast-disabled subregion), the rest keeps bf16's
speed. Its own module, not :mod:`.scorers`: training never scores in bf16, so its cache keys do not depend on this."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

SEQUENCE_HEADS = ("classifier", "score")  # the head's name in BERT / RoBERTa / XLM-R, and in Llama / Qwen classifiers


def score_layer(model: nn.Module, head: str) -> nn.Module | None:
    """The module whose output is the score: the output embeddings of a yes/no causal LM, else the classifier; none
    for ``segment_cosine``, whose score is a cosine of hidden states (computed in fp32 from the mean of many)."""
    if head == "causal_lm":
        return model.get_output_embeddings()
    if head == "segment_cosine":
        return None
    for name in SEQUENCE_HEADS:
        layer = getattr(model, name, None)
        if isinstance(layer, nn.Module):
            return layer
    raise ValueError(f"{type(model).__name__}: no sequence-classification head named {' or '.join(SEQUENCE_HEADS)}")


def keep_fp32(scorer: Any) -> None:
    """Make ``scorer``'s score layer, where it has one, run in fp32 inside its bf16 autocast (its weights are fp32
    already)."""
    layer = score_layer(scorer.model, scorer.spec.head)
    if layer is None:
        return
    forward, device_type = layer.forward, scorer.model.device.type

    def fp32_forward(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type, enabled=False):
            return forward(*(a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args), **kwargs)

    layer.forward = fp32_forward
