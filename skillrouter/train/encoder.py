"""Fine-tune a bi-encoder on training pairs with mined hard negatives (full or LoRA)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor

from ..models import device
from ..retrieval.dense import EncoderSpec, load_encoder, padded_features, token_ids
from ..throughput import Throughput, model_flops
from .data_parallel import is_main
from .grad_cache import cached, cached_backward
from .config import EarlyStopping, EncoderLoss, TrainConfig
from .dev import EncoderDev, metered, training_figures
from .loop import Trained, prepare_for_training, set_seed, train, watching
from .losses import InfoNCELoss, MultiPositiveInfoNCELoss
from ..data.pairs import TrainExample


@dataclass(frozen=True)
class _Row:
    query: str
    positive: str
    siblings: tuple[str, ...]
    negatives: tuple[str, ...]


def _rows(examples: list[TrainExample], negatives: list[list[str]], skip_in_pool: bool) -> list[_Row]:
    rows = []
    for ex, negs in zip(examples, negatives):
        extra = tuple(s for s in ex.skip if s not in negs) if skip_in_pool else ()
        for pos in ex.positives:
            rows.append(_Row(ex.query, pos, tuple(p for p in ex.positives if p != pos), tuple(negs) + extra))
    return rows


class Embedder:
    """A training's texts -> embeddings with gradients, from token ids computed once before the first step (no step
    tokenises); the tokens of every pass that backpropagates go to ``meter``."""

    def __init__(self, model, texts: list[str], meter: Throughput):
        self.model, self.meter = model, meter
        unique = list(dict.fromkeys(texts))
        self.ids = dict(zip(unique, token_ids(model.tokenizer, unique, model.max_seq_length)))

    def __call__(self, texts: list[str]) -> Tensor:
        features = padded_features(self.model.tokenizer, [self.ids[t] for t in texts])
        if torch.is_grad_enabled():  # a cached-gradient step's first, gradient-free pass is overhead, not model FLOPs
            self.meter.count_mask(features["attention_mask"])
        features = {k: v.to(self.model.device) if isinstance(v, Tensor) else v for k, v in features.items()}
        return self.model(features)["sentence_embedding"]


def train_encoder(spec: EncoderSpec, examples: list[TrainExample], negatives: list[list[str]], skill_texts: dict[str, str],
                  loss_cfg: EncoderLoss, cfg: TrainConfig, work_dir: Path, out_dir: Path, dev: EncoderDev | None = None,
                  early: EarlyStopping | None = None) -> tuple[object, Trained]:
    """Train and save a sentence-transformers model (or only its LoRA adapter) to ``out_dir``;
    return ``(model, what the training did)``. Query texts must already carry the encoder's instruction prefix.
    ``cfg.mini_batch``: texts per forward pass, the loss still over the whole batch (GradCache). ``dev`` and
    ``early``: stop when the dev split stops improving, keeping the best epoch (:class:`~.loop.DevWatch`)."""
    set_seed(cfg.seed)
    model = load_encoder(spec).to(device())
    model.float()  # fp32 weights (autocast supplies bf16 where asked, and on CUDA)
    prepare_for_training(model, cfg)
    if cfg.lora:
        from peft import LoraConfig

        model.add_adapter(LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                                     target_modules="all-linear"))
    rows = _rows(examples, negatives, loss_cfg.skip_in_pool)
    if loss_cfg.name == "infonce":
        loss_fn: torch.nn.Module = InfoNCELoss(loss_cfg.temperature)
    elif loss_cfg.name == "multi_infonce":
        loss_fn = MultiPositiveInfoNCELoss(loss_cfg.temperature, loss_cfg.sibling_weight)
    else:
        raise ValueError(f"encoder loss must be infonce or multi_infonce, got {loss_cfg.name!r}")

    def batch_loss(indices) -> tuple[list[str], Callable[[Tensor], Tensor]]:
        """The batch's texts (queries, then candidates) and its loss as a function of their embeddings."""
        batch = [rows[i] for i in indices]
        cand_ids = list(dict.fromkeys([r.positive for r in batch] + [n for r in batch for n in r.negatives]))
        col = {cid: j for j, cid in enumerate(cand_ids)}
        positive = torch.tensor([col[r.positive] for r in batch], device=model.device)
        siblings = torch.zeros(len(batch), len(cand_ids), dtype=torch.bool, device=model.device)
        for i, r in enumerate(batch):
            for s in r.siblings:
                if s in col:
                    siblings[i, col[s]] = True

        def loss_of(emb: Tensor) -> Tensor:
            q, c = emb[: len(batch)], emb[len(batch):]
            if isinstance(loss_fn, MultiPositiveInfoNCELoss):
                return loss_fn(q, c, positive, siblings)
            return loss_fn(q, c, positive, exclude=siblings)  # single-positive: other GT leave the denominator

        return [r.query for r in batch] + [skill_texts[cid] for cid in cand_ids], loss_of

    caching = cached(cfg.mini_batch)
    meter = Throughput(flops=model_flops(model), passes=3)
    embed = Embedder(model, [r.query for r in rows] + [skill_texts[c] for r in rows for c in (r.positive, *r.negatives)],
                     meter)

    def compute_loss(indices) -> Tensor:
        texts, loss_of = batch_loss(indices)
        if caching:  # GradCache: backpropagates itself, memory set by the mini-batch
            return cached_backward(lambda chunk: embed(list(chunk)), texts, cfg.mini_batch, loss_of, model.device)
        n_queries = len(indices)
        return loss_of(torch.cat([embed(texts[:n_queries]), embed(texts[n_queries:])]))

    watched, dev_meter = metered(dev, meter.flops)
    watch = watching(watched, early, work_dir)
    losses = train(model, len(rows), compute_loss, cfg, work_dir, desc="train encoder", backpropagates=caching,
                   terms=lambda: dict(getattr(loss_fn, "terms", {})), meter=meter, watch=watch)
    if is_main():
        model.save(str(out_dir))
    return model, Trained(losses, watch.record(cfg.epochs) if watch else None, training_figures(meter, dev_meter))


def train_encoder_run(*args) -> Trained:
    """What :func:`train_encoder` did (what a data-parallel process hands back)."""
    return train_encoder(*args)[1]
