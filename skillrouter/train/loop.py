"""The optimisation loop shared by encoder and reranker training, with exact resume.

AdamW (weight decay 0.01), cosine schedule with 5 % warmup, gradient clipping; bf16 autocast on CUDA and where
``train.precision=bf16`` on the CPU; gradient checkpointing only when asked (``train.gradient_checkpointing``: it
recomputes every forward pass, and cached gradients already bound the memory). The whole batch order (all epochs) is fixed up front
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from ..progress import progress
from ..rerank.fusion import standard_error
from ..throughput import Throughput
from .. import events
from .config import EarlyStopping, TrainConfig
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
                     history: list[dict[str, float]], dev: dict[str, Any] | None = None) -> None:
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
    (tmp / "state.json").write_text(json.dumps({"step": step, "losses": losses, "history": history, "dev": dev}))
    final = work_dir / f"step-{step}"
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in work_dir.glob("step-*"):  # keep only the newest checkpoint
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    barrier()


LOG_EVERY = 10  # steps whose figures are read back from the device at once: one host sync per window, not per step


@dataclass
class Trained:
    """What a training hands back (from a data-parallel process too): the loss per step, the dev curve when one
    was watched, and the throughput of its steps."""

    losses: list[float]
    dev: dict[str, Any] | None = None
    throughput: dict[str, Any] | None = None
    pretrain_steps: int = 0  # the first steps of ``losses`` that pre-trained (a reranker's pseudo-queries)


class DevWatch:
    """Early stopping: the objective on the dev split after each epoch (``evaluate(module)``: one value per dev query),
    the best epoch's trainable weights kept in the work folder (``best.pt``), and the count of epochs since the last
    improvement by more than ``min_delta``. A curve whose every epoch is within one standard error (over the dev
    queries) of the best is *flat*: the epoch it kept is no evidence that training more or less would have mattered.
    The objective is a rate in [0, 1] (an evaluation metric), so a best epoch within one standard error of 1 is
    *saturated*: no later epoch could beat it by more than noise on this dev split, and training stops there (on the
    built-in data the encoders' first epoch reaches dev MRR@10 .987 +- .013: the epochs after it cost a minute each
    and were never kept)."""

    def __init__(self, evaluate: Callable[[nn.Module], list[float]], patience: int, min_delta: float, work_dir: Path,
                 objective: str = "objective"):
        self.evaluate, self.patience, self.min_delta, self.objective = evaluate, patience, min_delta, objective
        self.best_file = work_dir / "best.pt"
        self.curve: list[float] = []
        self.errors: list[float] = []  # the standard error of each epoch's mean over the dev queries
        self.best_epoch = 0
        self.stopped = False

    def state(self) -> dict[str, Any]:
        return {"curve": self.curve, "errors": self.errors, "best_epoch": self.best_epoch, "stopped": self.stopped}

    def restore(self, state: dict[str, Any] | None) -> None:
        if state:
            self.curve, self.errors = list(state["curve"]), list(state["errors"])
            self.best_epoch, self.stopped = int(state["best_epoch"]), bool(state.get("stopped"))

    @property
    def best(self) -> float:
        return self.curve[self.best_epoch - 1] if self.best_epoch else float("-inf")

    def epoch_end(self, module: nn.Module, step: int) -> bool:
        """Score the epoch just ended; keep its weights when it beats the best by more than ``min_delta``; whether
        training should stop (``patience`` epochs without such an improvement)."""
        was = module.training
        module.eval()
        values = [float(v) for v in self.evaluate(module)]
        module.train(was)
        mean = float(np.mean(values)) if values else 0.0
        error = standard_error(values)
        self.curve.append(mean)
        self.errors.append(error)
        if is_main():
            events.log_step({f"dev/{self.objective}": mean, "dev/epoch": len(self.curve)}, step)
        if mean > self.best + self.min_delta or not self.best_epoch:
            self.best_epoch = len(self.curve)
            if is_main():
                tmp = self.best_file.with_suffix(".tmp")
                torch.save(_trainable_state(module), tmp)
                os.replace(tmp, self.best_file)
            barrier()
        self.stopped = len(self.curve) - self.best_epoch >= self.patience or self.saturated
        return self.stopped

    @property
    def saturated(self) -> bool:
        return bool(self.best_epoch) and 1.0 - self.best <= self.errors[self.best_epoch - 1] + 1e-9

    def keep_best(self, module: nn.Module) -> None:
        """Load the best epoch's weights (the model a stopped training publishes)."""
        if self.best_epoch and self.best_file.exists():
            module.load_state_dict(torch.load(self.best_file, weights_only=False), strict=False)

    def record(self, epochs: int) -> dict[str, Any]:
        """What ``metrics.json`` and the tables say of the curve."""
        error = self.errors[self.best_epoch - 1] if self.best_epoch else 0.0
        return {"objective": self.objective, "curve": [round(v, 6) for v in self.curve],
                "standard_errors": [round(v, 6) for v in self.errors],
                "epoch_kept": self.best_epoch, "epochs_run": len(self.curve), "max_epochs": epochs,
                "stopped_early": len(self.curve) < epochs, "saturated": self.saturated,
                "patience": self.patience, "min_delta": self.min_delta,
                "flat": len(self.curve) > 1 and all(v >= self.best - error for v in self.curve)}


def watching(dev: Callable[[nn.Module], list[float]] | None, early: EarlyStopping | None, work_dir: Path
             ) -> DevWatch | None:
    """The :class:`DevWatch` of a training given a dev split and an early-stopping rule (None without either)."""
    if dev is None or early is None:
        return None
    return DevWatch(dev, early.patience, early.min_delta, work_dir, getattr(dev, "objective_name", "objective"))


def prepare_for_training(module: nn.Module, cfg: TrainConfig) -> None:
    """The model as ``cfg`` trains it: its dropouts (:func:`set_dropout`) and its attention implementation
    (``train.attention_implementation``, e.g. ``eager``; None keeps the model's). Why the presets train without hidden
    dropout, the reranker with eager attention: on 2 CPU cores in bf16 a MiniLM reranker step ran 1.12x faster
    without hidden dropout and 1.22x faster eager, an encoder step 1.19x faster without hidden dropout but 0.62x as
    fast eager (``reports/perf/train_step_variants.md``), and ``make report-demo`` dropped under 40 min."""
    set_dropout(module, cfg.attention_dropout, cfg.hidden_dropout)
    if cfg.attention_implementation is not None:
        from transformers import PreTrainedModel

        model = next(sub for sub in module.modules() if isinstance(sub, PreTrainedModel))
        model.set_attn_implementation(cfg.attention_implementation)


def set_dropout(module: nn.Module, attention: float | None, hidden: float | None) -> None:
    """Dropout on the attention probabilities (``train.attention_dropout``) and everywhere else in the model
    (``train.hidden_dropout``: embeddings, hidden states, a classifier's input; LoRA's own stays ``lora_dropout``)
    while training; None leaves the checkpoint's. BERT's attention modules hold an ``nn.Dropout``, Llama/Qwen's a
    float. Why attention 0 for MiniLM: its 0.1 keeps PyTorch's fused attention off, so a CPU training step spends 44 %
    in the unfused path, the mask's random draws alone 20 % (``reports/perf/train_memory.md``); the papers' Qwen3
    models train without it, and without hidden dropout (Qwen3 has none)."""
    in_attention: set[int] = set()
    for sub in module.modules():
        if not type(sub).__name__.endswith("Attention"):
            continue
        if isinstance(getattr(sub, "dropout", None), nn.Dropout):
            in_attention.add(id(sub.dropout))
            if attention is not None:
                sub.dropout.p = attention
        if attention is not None and isinstance(getattr(sub, "attention_dropout", None), float):
            sub.attention_dropout = attention
    if hidden is None:
        return
    for name, sub in module.named_modules():
        if isinstance(sub, nn.Dropout) and id(sub) not in in_attention and "lora_" not in name:
            sub.p = hidden


def autocast_for(cfg: TrainConfig):
    """bf16 autocast on CUDA, and on the CPU where ``train.precision`` says bf16 (native bf16 units); else fp32."""
    if torch.cuda.is_available():
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", dtype=torch.bfloat16) if cfg.precision == "bf16" else nullcontext()


def train(module: nn.Module, n_items: int, compute_loss: Callable[[Sequence[int]], Tensor], cfg: TrainConfig,
          work_dir: Path, desc: str = "train", backpropagates: bool = False,
          terms: Callable[[], dict[str, Any]] = dict, meter: Throughput | None = None,
          watch: DevWatch | None = None) -> list[float]:
    """Optimise ``module`` over ``n_items`` examples; ``compute_loss(indices)`` returns a batch's loss
    (``backpropagates``: having put its gradients into the parameters itself, as cached-gradient steps do; under
    data-parallel training the ranks' gradients are then summed). Returns the per-step loss curve (including
    steps done before a resume). Every step's loss, the loss's own ``terms()``, learning rate, gradient norm,
    examples/s and (CUDA) peak memory go to the stage's observers (:mod:`skillrouter.events`), numbered
    from 1, read back from the device every :data:`LOG_EVERY` steps (one host sync per window); they are kept in
    the checkpoint, and a resumed training first replays the steps it restored, so its run holds the whole curve
    whatever a killed attempt managed to write. ``meter`` gets the steps' wall time (its tokens are counted by the
    model's forward passes). ``watch``: early stopping on the dev split (:class:`DevWatch`), ``cfg.epochs`` then a
    maximum; the best epoch's weights are what the module holds when this returns."""
    from transformers import get_cosine_schedule_with_warmup

    work_dir.mkdir(parents=True, exist_ok=True)
    steps = epoch_batches(n_items, cfg)
    per_epoch = max(1, math.ceil(n_items / cfg.batch_size))
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
        if watch is not None:
            watch.restore(meta.get("dev"))
        log.info("%s: resuming from %s (step %d of %d)", desc, ckpt, start, len(steps))
        for n, figures in enumerate(history, start=1):
            events.log_step(figures, n)
    cuda = torch.cuda.is_available()
    if cuda and cfg.gradient_checkpointing and hasattr(module, "gradient_checkpointing_enable"):
        module.gradient_checkpointing_enable()
    autocast = autocast_for(cfg)
    module.train()
    bar = progress(len(steps), desc, "steps", cfg.show_progress and is_main(), initial=start)
    window: list[tuple[int, Tensor, Tensor, float, dict[str, Any]]] = []
    window_t0 = time.perf_counter()

    def flush() -> None:
        """Read the window's figures back from the device (one sync) and report them."""
        nonlocal window_t0
        if not window:
            return
        elapsed = time.perf_counter() - window_t0
        rate = sum(len(steps[n]) for n, *_ in window) / elapsed if elapsed else None
        for n, loss, grad_norm, lr, parts in window:
            losses.append(round(float(loss), 6))
            if is_main():
                figures = {"train/loss": losses[-1], **{f"train/{k}": float(v) for k, v in parts.items()}, "train/lr": lr,
                           "train/grad_norm": float(grad_norm), "train/examples_per_s": rate,
                           "train/epoch": n * cfg.epochs / len(steps)}
                if cuda:
                    figures["train/peak_memory_gb"] = torch.cuda.max_memory_allocated() / 2**30
                history.append(figures)
                events.log_step(figures, n + 1)
        bar.set_postfix(loss=losses[-1])
        window.clear()
        window_t0 = time.perf_counter()

    stop = False
    for step in range(start, len(steps) if watch is None or not watch.stopped else start):
        t0 = time.perf_counter()
        with autocast:
            loss = compute_loss(steps[step])
        if not backpropagates:
            loss.backward()
        sum_gradients(params)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        lr = scheduler.get_last_lr()[0]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        window.append((step, loss.detach(), grad_norm.detach(), lr, dict(terms())))
        bar.update()
        epoch_end = (step + 1) % per_epoch == 0 or step + 1 == len(steps)
        if len(window) >= LOG_EVERY or epoch_end or (step + 1) % cfg.checkpoint_every == 0:
            flush()
        if meter is not None:
            meter.seconds += time.perf_counter() - t0
        if watch is not None and epoch_end:
            stop = watch.epoch_end(module, step + 1)
        if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == len(steps) or (watch is not None and epoch_end) or stop:
            _save_checkpoint(work_dir, step + 1, module, optimizer, scheduler, losses, history,
                             watch.state() if watch is not None else None)
        if stop:
            log.info("%s: dev %s flat for %d epochs; stopping after epoch %d, keeping epoch %d", desc,
                     watch.curve, watch.patience, len(watch.curve), watch.best_epoch)
            break
    bar.close()
    if watch is not None:
        watch.keep_best(module)
    module.eval()
    return losses
