"""Rerank cascades: any number of rerank steps after retrieval, each a reranker preset at its own depth, each
reordering the top of the ranking the step before it made.

    python launch.py 'cascade=[minilm_ce@100,trained@20,llm_judge@1]'        # one cell, three steps
    python launch.py -m 'cascade=[minilm_ce@100,trained@20],[minilm_ce@100,trained@20,llm_judge@1]'   # two cells

A step is ``PRESET@DEPTH``: a reranker preset (``conf/reranker/PRESET.yaml``: a cross-encoder, a Qwen3 yes/no
reranker, ``trained``, or ``llm_judge``: the ``llm`` group's model picks one of the step's candidates) and how many of
the step before's top candidates it reorders. A step named as the cell's ``reranker`` group is that config, overrides
and all (``reranker=trained reranker.train.lr=...``); any other is its preset as shipped. Each step's scores are a
stage keyed by its inputs, so a cascade that extends another's builds only its new steps. Without ``cascade``
(``null``, the default) the cell reranks with ``reranker`` at ``topk``: one step, the stages and keys it always had.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ..data import DataError

STEP = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*@\s*(\d+)\s*$")
CONF = Path(__file__).resolve().parents[2] / "conf"


@dataclass(frozen=True)
class Step:
    """One rerank step: a reranker preset and how deep it reorders."""

    preset: str
    depth: int

    @property
    def label(self) -> str:
        return f"{self.preset}@{self.depth}"


def steps(value: Any) -> list[Step]:
    """``cascade`` as steps: a list of ``PRESET@DEPTH`` (or one such string), each depth at most the one before's."""
    items = list(value) if OmegaConf.is_list(value) or isinstance(value, (list, tuple)) else [value]
    out = []
    for item in items:
        match = STEP.match(str(item))
        if not match:
            raise DataError("config", None, "cascade", f"a step is PRESET@DEPTH (e.g. minilm_ce@100), got {item!r}")
        out.append(Step(match.group(1), int(match.group(2))))
    if not out:
        raise DataError("config", None, "cascade", "a cascade needs at least one step (null: the reranker at topk)")
    for before, after in zip(out, out[1:]):
        if after.depth > before.depth or after.depth < 1:
            raise DataError("config", None, "cascade", f"step {after.label} reorders more candidates than {before.label} "
                            "passes on: each step's depth is at most the one before's")
    return out


def preset(name: str, cfg: DictConfig) -> DictConfig:
    """The reranker config of a step: the cell's own ``reranker`` when it is that preset, else the preset composed as
    Hydra composes ``reranker=NAME`` (its defaults list resolved: ``trained``'s base)."""
    if str(cfg.reranker.get("name")) == name:
        return cfg.reranker
    from hydra import compose
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    overrides = [f"reranker={name}"]
    if GlobalHydra.instance().is_initialized():  # the launch's own search path: a user's --config-dir presets too
        return compose(config_name="config", overrides=overrides).reranker
    # outside a launch, a loader of its own: initialize_config_dir would leave its job name and version base behind
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(CONF)))
    return loader.load_configuration("config", overrides, RunMode.RUN, from_shell=False).reranker
