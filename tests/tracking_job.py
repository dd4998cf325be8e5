"""A training stage built through the Builder with tracking on, in a process of its own (so a test can
SIGKILL it mid-training): ``python -m tests.tracking_job ROOT [KILL_AT_STEP]``."""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import torch

from skillrouter.cache.store import StageCache
from skillrouter.pipeline.execute.build import Builder
from skillrouter.stages.graph import BuildContext, Stage
from skillrouter.tracking.observer import WandbObserver
from skillrouter.train.config import TrainConfig
from skillrouter.train.loop import train

STEPS, BATCH = 8, 2  # 16 items, batch 2, checkpoint every 2 steps


def _build(ctx: BuildContext) -> dict:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    x, y = torch.randn(STEPS * BATCH, 4), torch.randn(STEPS * BATCH, 1)
    kill_at = int(os.environ.get("KILL_AT_STEP", "0"))
    seen = []

    def loss(indices):
        seen.append(1)
        if kill_at and len(seen) == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.nn.functional.mse_loss(model(x[list(indices)]), y[list(indices)])

    cfg = TrainConfig(epochs=1, batch_size=BATCH, lr=0.05, checkpoint_every=2, seed=0)
    curve = train(model, STEPS * BATCH, loss, cfg, ctx.work, desc="tiny")
    (ctx.out / "curve.txt").write_text(" ".join(map(str, curve)))
    return {"items": STEPS * BATCH}


def stage() -> Stage:
    return Stage("train_encoder", _build, {"tiny": True}, resource="gpu", resumable=True)


def build(root: Path, mode: str = "offline") -> Builder:
    builder = Builder(StageCache(root / "cache"), progress=False, user=str(root / "sweep"),
                      observers=[WandbObserver("skillrouter-test", None, mode, "sweep")])
    builder.build(stage())
    return builder


if __name__ == "__main__":
    if len(sys.argv) > 2:
        os.environ["KILL_AT_STEP"] = sys.argv[2]
    build(Path(sys.argv[1]))
