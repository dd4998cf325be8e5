"""Cached-gradient training (GradCache, Gao et al. 2021; sentence-transformers'
``CachedMultipleNegativesRankingLoss``): a loss over a whole batch — InfoNCE over embeddings, a list loss over
reranker scores — with activation memory set by the mini-batch instead of the batch.

1. run the model on every item of the batch (texts, or query-skill pairs) in mini-batches without a graph,
   noting the RNG state before each;
2. compute the loss over all the outputs and its gradient with respect to them (no model graph involved);
3. rerun each mini-batch with its graph under the same RNG state (so dropout draws the same masks) and
   backpropagate its slice of that gradient into the parameters.

The parameters' gradients are those of the uncached loss over the same mini-batch outputs. Under data-parallel
training (:mod:`.data_parallel`) each process runs step 1 and 3 on its share of the items only, and step 2 on
the outputs of all shares gathered: its gradients are its share's part of the global loss's gradient.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from .data_parallel import gather, rank_world, share


def cached(mini_batch: int | None) -> bool:
    """Whether a training step runs through :func:`cached_backward`: a mini-batch is asked for, or training is
    data-parallel (each process runs its share of the batch)."""
    return bool(mini_batch) or rank_world()[1] > 1


def cached_backward(forward: Callable[[Sequence[Any]], Tensor], items: Sequence[Any], mini_batch: int | None,
                    loss_of: Callable[[Tensor], Tensor], device: torch.device | str) -> Tensor:
    """Backpropagate ``loss_of(forward(items))`` (outputs concatenated along dim 0) into the parameters behind
    ``forward``, ``mini_batch`` items per forward pass (None: this process's whole share at once); returns the
    loss, detached."""
    mine = items[share(len(items))]
    mini_batch = len(mine) if mini_batch is None else mini_batch
    if mini_batch < 1:
        raise ValueError(f"mini_batch must be a positive number of items, got {mini_batch}")
    if not mine:
        raise ValueError(f"a batch of {len(items)} items cannot be shared by every training process")
    chunks = [mine[i: i + mini_batch] for i in range(0, len(mine), mini_batch)]
    # sentence-transformers costs ~4 s to import: only a training pays it, not every job that imports the stages
    from sentence_transformers.sentence_transformer.losses.cached_multiple_negatives_ranking import RandContext

    anchor = torch.empty(0, device=device)  # names the device whose RNG the replay restores
    states, reps = [], []
    with torch.no_grad():
        for chunk in chunks:
            states.append(RandContext(anchor))
            reps.append(forward(chunk))
    full = gather(torch.cat(reps)).detach().requires_grad_()
    loss = loss_of(full)
    loss.backward()
    for chunk, state, grad in zip(chunks, states, full.grad[share(len(items))].split([len(c) for c in chunks])):
        with state:
            forward(chunk).backward(grad)
    return loss.detach()
