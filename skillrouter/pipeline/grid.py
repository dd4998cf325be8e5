"""A sweep's cells composed once, up front, into one planned graph: what both grid launchers start from.

Composition is pure (no model, no data parsed beyond fingerprints), so a whole grid plans in a fraction
of a second. It runs twice: first to find, per pointwise reranker, the deepest ``topk`` of the grid
(the depth its pair scores are computed to, once), then with those depths."""
from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import filter_overrides
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from ..cache.store import StageCache
from ..stages.graph import Stage
from .cell import make_cache
from .compose import CellGraph, compose_cell
from .llm_server import LLMServer
from .plan import GridPlan, noop_refusal, plan_grid, render

log = logging.getLogger(__name__)


@dataclass
class Grid:
    configs: dict[int, DictConfig]
    plan: GridPlan
    cache: StageCache
    sweep_dir: Path

    @property
    def graphs(self) -> dict[int, CellGraph]:
        return self.plan.cells

    def sinks(self) -> list[Stage]:
        return [g.sink for g in self.graphs.values()]

    def llm_server(self) -> LLMServer | None:
        """The one LLM server of the grid, if a generation stage it has to build needs one."""
        needing = {i for p in self.plan.to_build() if p.stage.llm_server for i in p.cells}
        servers = {OmegaConf.to_yaml(self.configs[i].llm) for i in needing if self.configs[i].llm.get("server")}
        if len(servers) > 1:
            raise ValueError("a grid runs one LLM server: sweep llm over separate grids")
        if not servers:
            return None
        cfg = self.configs[min(needing)]
        return LLMServer(OmegaConf.to_container(cfg.llm, resolve=True), cfg.cache_dir)


def _compose(configs: dict[int, DictConfig], depths: dict[str, int]) -> tuple[dict[int, CellGraph], dict[int, str]]:
    graphs, broken = {}, {}
    for idx, cfg in configs.items():
        HydraConfig.instance().set_config(cfg)  # ${hydra:...} interpolations (cache_dir) resolve per cell
        try:
            graphs[idx] = compose_cell(cfg, depths)
        except Exception as exc:  # noqa: BLE001 - the cell fails when it runs, with this error; the grid goes on
            broken[idx] = f"{type(exc).__name__}: {exc}"
    return graphs, broken


def compose_grid(load: Callable[[list[str]], DictConfig], job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
                 sweep_dir: Path) -> Grid:
    """Every cell's frozen config (``load``: Hydra's sweep-config loader) and the grid's plan."""
    configs = {}
    for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
        cfg = load(list(overrides))
        with read_write(cfg), open_dict(cfg):
            cfg.hydra.job.id = idx
            cfg.hydra.job.num = idx
        configs[idx] = cfg
    graphs, _ = _compose(configs, {})
    depths: dict[str, int] = {}
    for graph in graphs.values():
        for identity, topk in graph.pair_groups.items():
            depths[identity] = max(depths.get(identity, 0), topk)
    graphs, broken = _compose(configs, depths)
    caches = {str(configs[i].cache_dir) for i in graphs}
    if len(caches) > 1:
        raise ValueError(f"the cells of one grid share one cache_dir; this grid names {len(caches)}")
    first = configs[min(graphs)] if graphs else configs[min(configs)]
    HydraConfig.instance().set_config(first)
    cache = make_cache(first)
    overrides = {i: filter_overrides(list(c.hydra.overrides.task)) for i, c in configs.items()}
    return Grid(configs, plan_grid(graphs, cache, overrides, broken), cache, sweep_dir)


def launch_grid(config: DictConfig, hydra_context: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
                ) -> Grid | None:
    """What a grid launcher does first: Hydra's globals and logging, the sweep folder, every cell composed
    and the grid planned (:func:`plan_or_refuse`); None when nothing is to run (``plan=true``)."""
    from hydra.core.utils import configure_log, setup_globals

    setup_globals()
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    loader = hydra_context.config_loader
    grid = compose_grid(lambda ov: loader.load_sweep_config(config, ov), job_overrides, initial_job_idx, sweep_dir)
    return grid if plan_or_refuse(grid) else None


def plan_or_refuse(grid: Grid) -> bool:
    """Write ``plan.json``; print the plan. True when the grid should run: not ``plan=true``, and not a
    grid whose swept overrides change nothing (that ends here, in one line, exit status 2)."""
    cfg: Any = next(iter(grid.configs.values()))
    path = grid.plan.write(grid.sweep_dir)
    if cfg.plan:
        print(render(grid.plan))
        print(f"plan written to {path} (nothing was built or submitted)")
        return False
    refusal = noop_refusal(grid.plan)
    if refusal and not cfg.allow_noop_overrides:
        print(refusal, file=sys.stderr)
        sys.exit(2)
    print(render(grid.plan, full=False))
    return True
