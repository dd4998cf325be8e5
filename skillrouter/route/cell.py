"""The grid cell a server routes with: its config (from a run directory, or composed from ``launch.py``'s
overrides), the stages of its pipeline and their cache entries, and the metrics the grid measured for it.

Serving reads the stage cache and never builds: a stage that is not built is an error naming it and the
command that builds it, so a server never starts a training run behind a user's back."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig, OmegaConf

from ..cache.store import StageCache
from ..pipeline.cell import make_cache
from ..pipeline.compose import CellGraph, compose_cell
from ..stages.graph import Stage

PROJECT = Path(__file__).resolve().parents[2]


WEIGHTS = ("model", "onnx")  # the input roles of a retrieve or score stage that hold a model


class CellNotBuilt(RuntimeError):
    """A stage the server needs has no complete cache entry."""


@dataclass
class Cell:
    """A cell's composed graph, the cache its stages live in, and where it came from."""

    cfg: DictConfig
    graph: CellGraph
    cache: StageCache
    overrides: list[str]
    run_dir: Path | None = None

    @property
    def retrieve(self) -> Stage:
        return self.graph.named["retrieve"]

    @property
    def scores(self) -> Stage | None:
        """The ``score_pairs`` stage (its model and texts are the reranker's); None without a reranker."""
        return self.graph.named.get("score_pairs")

    def check_built(self, folder: bool = False) -> None:
        """Every stage serving reads is in the cache, or one error naming the missing one and the command
        (``folder``: a live SKILL.md folder is served, so only the models' weights are read)."""
        if self.retrieve.kind != "retrieve" or "pool" not in self.retrieve.inputs:
            raise ValueError(f"serving needs a dense encoder (this cell's is {self.cfg.encoder.name!r}: "
                             "BM25 has no embeddings to serve)")
        if self.cfg.reranker.kind == "llm_judge":
            raise ValueError("serving needs a pointwise reranker (reranker=llm_judge calls a remote LLM per request)")
        for stage in self.loaded(folder):
            if not self.cache.is_complete(stage.kind, stage.key):
                command = " ".join(["python launch.py", *self.overrides])
                raise CellNotBuilt(f"stage {stage.kind} ({stage.key}) of this cell is not built in {self.cache.root}; "
                                   f"build it with: {command}")

    def loaded(self, folder: bool = False) -> list[Stage]:
        """The cache entries a server reads: the retrieve and score stages' inputs (pool embeddings, dataset,
        fine-tuned weights, ONNX exports), not those stages themselves: the server computes what they computed. Serving
        a folder (``folder``) reads the weights alone: the folder is the pool."""
        stages = {**self.retrieve.inputs, **({f"rr_{k}": v for k, v in self.scores.inputs.items() if k != "retrieval"}
                                             if self.scores else {})}
        if folder:
            stages = {k: v for k, v in stages.items() if k.removeprefix("rr_") in WEIGHTS}
        return list({s.key: s for s in stages.values() if not s.virtual}.values())

    def measured(self) -> dict[str, Any] | None:
        """The metrics the grid measured for this cell: its run directory's, else the newest ``metrics.json``
        under ``outputs/`` whose stages are the ones served (same keys) at the same ``topk``."""
        if self.run_dir is not None:
            return _metrics(self.run_dir / "metrics.json")
        wanted = {s.kind: s.key for s in self.loaded()}
        found = []
        for path in (Path(self.cfg.project_root) / "outputs").glob("**/metrics.json"):
            m = _metrics(path)
            stages = (m or {}).get("stages", {})
            if m and all(stages.get(k, {}).get("key") == v for k, v in wanted.items()) \
                    and str(m.get("choices", {}).get("topk")) == str(self.cfg.topk) \
                    and m.get("choices", {}).get("reranker") == self.cfg.reranker.name:
                found.append((path.stat().st_mtime, m))
        return max(found, key=lambda t: t[0])[1] if found else None


def _metrics(path: Path) -> dict[str, Any] | None:
    try:
        m = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return m if m.get("status", "ok") in ("ok", "completed") and "metrics" in m else None


def from_run_dir(run_dir: str | Path, folder: bool = False) -> Cell:
    """The cell a run directory ran (its ``provenance.json`` holds the resolved config)."""
    run_dir = Path(run_dir).resolve()
    prov = run_dir / "provenance.json"
    if not prov.is_file():
        raise FileNotFoundError(f"{run_dir}: not a run directory (no provenance.json); pass a cell's run folder "
                                "(outputs/runs/... or a multirun's numbered folder) or its overrides")
    cfg = OmegaConf.create(json.loads(prov.read_text())["config"])
    overrides_file = run_dir / ".hydra" / "overrides.yaml"
    overrides = list(OmegaConf.load(overrides_file)) if overrides_file.is_file() else []
    return _cell(cfg, overrides, run_dir, folder)


def from_overrides(overrides: Sequence[str], folder: bool = False) -> Cell:
    """The cell ``python launch.py OVERRIDES`` runs, composed with Hydra's compose API from the project's ``conf/``."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    with initialize_config_dir(config_dir=str(PROJECT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"hydra.runtime.cwd={os.getcwd()}", *overrides], return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        resolved = OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=True)
    return _cell(OmegaConf.create(resolved), list(overrides), None, folder)


def _cell(cfg: DictConfig, overrides: list[str], run_dir: Path | None, folder: bool) -> Cell:
    cell = Cell(cfg, compose_cell(cfg), make_cache(cfg), overrides, run_dir)
    cell.check_built(folder)
    return cell
