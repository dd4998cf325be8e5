"""What a training run is configured with: plain dataclasses, importable without torch (planning a grid
reads them; running a training loads torch, :mod:`.loop`)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 1
    batch_size: int = 16
    lr: float = 2e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.05
    max_grad_norm: float = 1.0
    seed: int = 0
    lora: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    checkpoint_every: int = 20
    precision: str = "fp32"        # fp32 | bf16 (autocast on the CPU; CUDA always trains in bf16); compose resolves auto
    attention_dropout: float | None = None  # dropout on attention probabilities while training; None: the checkpoint's
    hidden_dropout: float | None = None     # every other dropout of the model while training; None: the checkpoint's
    attention_implementation: str | None = None  # transformers' attn_implementation while training; None: the model's
    mini_batch: int | None = None  # texts per forward pass (cached gradients); how a step runs, not what it computes
    gradient_checkpointing: bool = False  # recompute activations in the backward pass: memory, not what it computes
    show_progress: bool = True     # a bar on a terminal, log lines off one (progress.py); not what it computes

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"train.precision must be one of {', '.join(PRECISIONS)} (or auto), got {self.precision!r}")


PRECISIONS = ("fp32", "bf16")
EXECUTION_ONLY = ("mini_batch", "gradient_checkpointing", "show_progress")  # fields that never change the weights


@dataclass(frozen=True)
class EarlyStopping:
    """``*.train.early_stopping``: after each epoch the cell's ``objective`` on the dev split (held out of training);
    training stops once ``patience`` epochs have not beaten the best by more than ``min_delta``, and keeps the best
    epoch's weights (``train.epochs`` is then a maximum). ``depth``: the first-stage candidates of each dev query a
    reranker reorders."""

    patience: int = 2
    min_delta: float = 0.0
    depth: int = 20


@dataclass(frozen=True)
class EncoderLoss:
    """``infonce`` (SkillRouter, tau 0.05) or ``multi_infonce`` (R3, tau 1/30, lambda 0.25);
    ``skip_in_pool`` adds each query's SKIP partners to the candidates (R3's ablation row B)."""

    name: str = "infonce"
    temperature: float = 0.05
    sibling_weight: float = 0.25
    skip_in_pool: bool = False
