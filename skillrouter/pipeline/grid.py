"""A sweep's cells composed once, up front, into one planned graph: what both grid launchers start from.

Composition is pure (no model, no data parsed beyond fingerprints) and reads each cell's config through a plain
view (:mod:`.sweep_configs`), so a 1,000-cell grid plans in seconds; a cell's full config is made when it runs."""
from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from hydra.core.utils import filter_overrides
from omegaconf import DictConfig

from .. import events
from ..cache.store import StageCache
from ..stages.graph import Stage
from .cell import make_cache
from .compose import CellGraph, compose_cell
from .llm_server import LLMServer
from .plan import GridPlan, noop_refusal, plan_grid, render
from .status import grid_ended
from .sweep_configs import CellConfigs, ConfigView, SweepConfigs, plain

log = logging.getLogger(__name__)


@dataclass
class Grid:
    """A planned grid: each cell's full config (made when the cell is launched), the views planning read, the plan."""

    configs: Mapping[int, DictConfig]
    views: dict[int, ConfigView]
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
        servers = {json.dumps(plain(self.views[i].llm), sort_keys=True) for i in needing if self.views[i].llm.get("server")}
        if len(servers) > 1:
            raise ValueError("a grid runs one LLM server: sweep llm over separate grids")
        if not servers:
            return None
        cfg = self.views[min(needing)]
        return LLMServer(plain(cfg.llm), cfg.cache_dir)


def _compose(views: Mapping[int, ConfigView], depths: dict[str, int]) -> tuple[dict[int, CellGraph], dict[int, str]]:
    graphs, broken = {}, {}
    for idx, view in views.items():
        try:
            graphs[idx] = compose_cell(view, depths)
        except Exception as exc:  # noqa: BLE001 - the cell fails when it runs, with this error; the grid goes on
            broken[idx] = f"{type(exc).__name__}: {exc}"
    return graphs, broken


def compose_grid(sweep: SweepConfigs, job_overrides: Sequence[Sequence[str]], initial_job_idx: int, sweep_dir: Path) -> Grid:
    """Every cell planned from its config's view (:mod:`.sweep_configs`), and the grid's plan. A pointwise
    reranker's pairs are scored once to the grid's deepest ``topk``: the cells of a shallower one are composed again
    with that depth."""
    overrides = {i: list(ov) for i, ov in enumerate(job_overrides, start=initial_job_idx)}
    views = {i: sweep.view(ov) for i, ov in overrides.items()}
    graphs, broken = _compose(views, {})
    depths: dict[str, int] = {}
    for graph in graphs.values():
        for identity, topk in graph.pair_groups.items():
            depths[identity] = max(depths.get(identity, 0), topk)
    deeper = {i: views[i] for i, g in graphs.items() if any(depths[k] > t for k, t in g.pair_groups.items())}
    graphs.update(_compose(deeper, depths)[0])
    caches = {str(views[i].cache_dir) for i in graphs}
    if len(caches) > 1:
        raise ValueError(f"the cells of one grid share one cache_dir; this grid names {len(caches)}")
    cache = make_cache(views[min(graphs)] if graphs else views[min(views)])
    task = {i: filter_overrides(sweep.task(ov)) for i, ov in overrides.items()}
    return Grid(CellConfigs(sweep, overrides), views, plan_grid(graphs, cache, task, broken), cache, sweep_dir)


def launch_grid(config: DictConfig, hydra_context: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
                describe: Callable[[Grid], dict[str, Any]] | None = None, study: bool = False) -> Grid | None:
    """What a grid launcher does first: Hydra's globals and logging, the sweep folder, every cell composed
    and the grid planned (:func:`plan_or_refuse`; ``describe``: what the launcher will submit, for the plan);
    None when nothing is to run (``plan=true``). ``study``: a batch of an Optuna study's trials (numbered from
    ``initial_job_idx`` by the study), which may repeat a value."""
    from hydra.core.utils import configure_log, setup_globals

    setup_globals()
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    grid = compose_grid(SweepConfigs(hydra_context.config_loader, config), job_overrides, initial_job_idx, sweep_dir)
    if describe is not None:
        grid.plan.submission = describe(grid)
    return grid if plan_or_refuse(grid, allow_noop=study) else None


def end_grid(grid: Grid, study_batch: bool = False) -> None:
    """Tell the grid's observers it ended (its cells' state as they wrote it, failed ones too)."""
    cfg: Any = next(iter(grid.configs.values()))
    events.publish(events.observers_of(cfg, grid.sweep_dir.name), grid_ended(grid.sweep_dir, study_batch))


def plan_or_refuse(grid: Grid, allow_noop: bool = False) -> bool:
    """Write ``plan.json``; print the plan. True when the grid should run: not ``plan=true``, and not a
    grid whose swept overrides change nothing (that ends here, in one line, exit status 2), unless ``allow_noop``
    (a study's trials may repeat a value: the cache serves the repeat)."""
    cfg: Any = next(iter(grid.views.values()))
    path = grid.plan.write(grid.sweep_dir)
    if cfg.plan:
        print(render(grid.plan))
        print(f"plan written to {path} (nothing was built or submitted)")
        return False
    refusal = noop_refusal(grid.plan)
    if refusal and not (cfg.allow_noop_overrides or allow_noop):
        print(refusal, file=sys.stderr)
        sys.exit(2)
    print(render(grid.plan, full=False))
    return True
