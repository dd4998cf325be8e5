"""The optimisation loop shared by encoder and reranker training, with exact resume.

AdamW (weight decay 0.01), cosine schedule with 5 % warmup, gradient clipping; bf16 autocast and
gradient checkpointing when CUDA is present. The whole batch order (all epochs) is fixed up front
from the seed, and every ``checkpoint_every`` steps the trainable weights, optimizer, scheduler, RNG
states and loss curve are written atomically to ``work_dir``, so a killed job restarted with the
same arguments continues from its last checkpoint and ends where an uninterrupted run ends.
"""
from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from ..progress import progress
from .. import events
from .config import TrainConfig
from .data_parallel import barrier, gather_objects, is_main, rank_world, sum_gradients

log = logging.getLogger(__name__)


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def epoch_batches(n_items: int, cfg: TrainConfig) -> list[list[int]]:
    """Item indices per step for every epoch, shuffled per epoch from the seed."""
    rng = random.Random(cfg.seed)
    steps: list[list[int]] = []
    for _ in range(cfg.epochs):
        order = list(range(n_items))
        rng.shuffle(order)
        steps += [order[i: i + cfg.batch_size] for i in range(0, n_items, cfg.batch_size)]
    return steps


def _trainable_state(module: nn.Module) -> dict[str, Tensor]:
    return {n: p.detach().clone() for n, p in module.named_parameters() if p.requires_grad}


def _rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def latest_checkpoint(work_dir: Path) -> Path | None:
    done = sorted(work_dir.glob("step-*/state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    return done[-1].parent if done else None


def _save_checkpoint(work_dir: Path, step: int, module: nn.Module, optimizer, scheduler, losses: list[float],
                     history: list[dict[str, float]]) -> None:
    """Rank 0 writes it (the weights are the same everywhere), with every rank's RNG state."""
    rng = gather_objects(_rng_state())
    if not is_main():
        barrier()
        return
    tmp = work_dir / f".tmp-step-{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save({"model": _trainable_state(module), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "rng": rng[0] if len(rng) == 1 else rng}, tmp / "state.pt")
    (tmp / "state.json").write_text(json.dumps({"step": step, "losses": losses, "history": history}))
    final = work_dir / f"step-{step}"
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in work_dir.glob("step-*"):  # keep only the newest checkpoint
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    barrier()


def train(module: nn.Module, n_items: int, compute_loss: Callable[[Sequence[int]], Tensor], cfg: TrainConfig,
          work_dir: Path, desc: str = "train", backpropagates: bool = False,
          terms: Callable[[], dict[str, float]] = dict) -> list[float]:
    """Optimise ``module`` over ``n_items`` examples; ``compute_loss(indices)`` returns a batch's loss
    (``backpropagates``: having put its gradients into the parameters itself, as cached-gradient steps do; under
    data-parallel training the ranks' gradients are then summed). Returns the per-step loss curve (including
    steps done before a resume). Every step's loss, the loss's own ``terms()``, learning rate, gradient norm,
    examples/s and (CUDA) peak memory go to the stage's observers (:mod:`skillrouter.events`), numbered
    from 1; they are kept in the checkpoint, and a resumed training first replays the steps it restored, so
    its run holds the whole curve whatever a killed attempt managed to write."""
    from transformers import get_cosine_schedule_with_warmup

    work_dir.mkdir(parents=True, exist_ok=True)
    steps = epoch_batches(n_items, cfg)
    params = [p for p in module.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = get_cosine_schedule_with_warmup(optimizer, math.ceil(cfg.warmup_ratio * len(steps)), len(steps))
    start, losses, history = 0, [], []
    ckpt = latest_checkpoint(work_dir)
    if ckpt is not None:
        state = torch.load(ckpt / "state.pt", weights_only=False)
        module.load_state_dict(state["model"], strict=False)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        rng = state["rng"]
        _set_rng_state(rng[rank_world()[0]] if isinstance(rng, list) else rng)
        meta = json.loads((ckpt / "state.json").read_text())
        start, losses, history = meta["step"], meta["losses"], meta.get("history", [])
        log.info("%s: resuming from %s (step %d of %d)", desc, ckpt, start, len(steps))
        for n, figures in enumerate(history, start=1):
            events.log_step(figures, n)
    cuda = torch.cuda.is_available()
    if cuda and hasattr(module, "gradient_checkpointing_enable"):
        module.gradient_checkpointing_enable()
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else nullcontext()
    module.train()
    bar = progress(len(steps), desc, "steps", cfg.show_progress and is_main(), initial=start)
    for step in range(start, len(steps)):
        t0 = time.perf_counter()
        with autocast:
            loss = compute_loss(steps[step])
        if not backpropagates:
            loss.backward()
        sum_gradients(params)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
        lr = scheduler.get_last_lr()[0]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(round(float(loss.detach()), 6))
        bar.set_postfix(loss=losses[-1])
        bar.update()
        if is_main():
            figures = {"train/loss": losses[-1], **{f"train/{k}": v for k, v in terms().items()}, "train/lr": lr,
                       "train/grad_norm": grad_norm, "train/examples_per_s": len(steps[step]) / (time.perf_counter() - t0),
                       "train/epoch": step * cfg.epochs / len(steps)}
            if cuda:
                figures["train/peak_memory_gb"] = torch.cuda.max_memory_allocated() / 2**30
            history.append(figures)
            events.log_step(figures, step + 1)
        if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == len(steps):
            _save_checkpoint(work_dir, step + 1, module, optimizer, scheduler, losses, history)
    bar.close()
    module.eval()
    return losses
