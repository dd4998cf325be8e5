"""Cached-gradient contrastive training (GradCache, Gao et al. 2021; sentence-transformers'
``CachedMultipleNegativesRankingLoss``): a contrastive loss over a whole batch, with activation memory set by
the mini-batch instead of the batch.

1. embed every text of the batch in mini-batches without a graph, noting the RNG state before each;
2. compute the loss over all the embeddings and its gradient with respect to them (no model graph involved);
3. re-embed each mini-batch with its graph under the same RNG state (so dropout draws the same masks) and
   backpropagate its slice of that gradient into the parameters.

The parameters' gradients are those of the uncached loss over the same mini-batch embeddings.
"""
from __future__ import annotations

from typing import Callable

import torch
from sentence_transformers.sentence_transformer.losses.cached_multiple_negatives_ranking import RandContext
from torch import Tensor


def cached_backward(embed: Callable[[list[str]], Tensor], texts: list[str], mini_batch: int,
                    loss_of: Callable[[Tensor], Tensor], device: torch.device | str) -> Tensor:
    """Backpropagate ``loss_of(embeddings of texts)`` into the parameters behind ``embed``, ``mini_batch`` texts
    per forward pass; returns the loss, detached."""
    if mini_batch < 1:
        raise ValueError(f"mini_batch must be a positive number of texts, got {mini_batch}")
    chunks = [texts[i: i + mini_batch] for i in range(0, len(texts), mini_batch)]
    anchor = torch.empty(0, device=device)  # names the device whose RNG the replay restores
    states, reps = [], []
    with torch.no_grad():
        for chunk in chunks:
            states.append(RandContext(anchor))
            reps.append(embed(chunk))
    full = torch.cat(reps).detach().requires_grad_()
    loss = loss_of(full)
    loss.backward()
    for chunk, state, grad in zip(chunks, states, full.grad.split([len(c) for c in chunks])):
        with state:
            embed(chunk).backward(grad)
    return loss.detach()
