"""Planning at scale must not change what is planned: for every sweep in sweeps/ (and grids of plain keys, groups and
interpolated keys), each cell's config equals the one Hydra's ``load_sweep_config`` composes, the view planning reads
equals that config resolved, and the stage graph composed from the view is the one composed from the config."""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.utils import create_config_search_path
from hydra.core.global_hydra import GlobalHydra
from hydra.core.config_search_path import SearchPathQuery
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import setup_globals
from hydra.types import RunMode
from omegaconf import OmegaConf

from skillrouter.pipeline.compose import compose_cell
from skillrouter.pipeline.sweep_configs import SweepConfigs, _resolved_app, plain

from .conftest import ROOT

SWEEPS = sorted(p.stem for p in (ROOT / "sweeps").glob("*.yaml"))
GRIDS = {  # extra grids: plain keys only, an interpolated key, a key an interpolation reads, an added key, a list value
    "plain": ["loss=listwise,pointwise", "topk=10,50", "seed=0,1", "encoder=trained", "reranker=trained"],
    "interpolated": ["reranker=trained", "reranker.base.fine_tune_lr=1e-3,2e-3", "reranker.train.lr=5e-4,null"],
    "added": ["+reranker.base.note=x,y", "downstream.k=[1,10],[3]", "caps.query=100,200"],
}


def _loader(config_dir: Path | None) -> ConfigLoaderImpl:
    search = create_config_search_path(str(ROOT / "conf"))
    if config_dir is not None:  # what -cd does
        search.prepend(provider="command-line", path=f"file://{config_dir}", anchor=SearchPathQuery(provider="schema"))
    return ConfigLoaderImpl(config_search_path=search)


def _cells(params: list[str]) -> list[list[str]]:
    parsed = OverridesParser.create().parse_overrides(params)
    return [list(ov) for batch in BasicSweeper.split_arguments(parsed, None) for ov in batch]


def _grid(name: str, tmp_path: Path):
    GlobalHydra.instance().clear()
    setup_globals()  # the ${hydra:...} and ${now:...} resolvers
    base = [f"hydra.sweep.dir={tmp_path}", f"cache_dir={tmp_path / 'cache'}"]
    if name in GRIDS:
        loader = _loader(None)
        return loader, loader.load_configuration("config", base, RunMode.MULTIRUN), GRIDS[name]
    loader = _loader(ROOT / "sweeps")
    master = loader.load_configuration(name, base, RunMode.MULTIRUN)
    params = [f"{k}={v}" for k, v in (master.hydra.sweeper.params or {}).items()]
    return loader, master, [_ends(p) for p in params]


def _ends(param: str) -> str:
    """A study's search interval as the grid of its two ends (a study's trials compose like the cells of a grid)."""
    override = OverridesParser.create().parse_override(param)
    if not override.is_interval_sweep():
        return param
    return f"{override.get_key_element()}={override.value().start},{override.value().end}"


@pytest.mark.parametrize("name", SWEEPS + sorted(GRIDS))
def test_cell_configs_views_and_graphs_equal_hydras(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loader, master, params = _grid(name, tmp_path)
    sweep = SweepConfigs(loader, master)
    cells = _cells(params)
    for overrides in cells:
        full = loader.load_sweep_config(master, overrides)
        fast = sweep.load(overrides)
        assert OmegaConf.to_container(fast) == OmegaConf.to_container(full), overrides
        view = sweep.view(overrides)
        assert plain(view) == _resolved_app(full), overrides
        HydraConfig.instance().set_config(full)
        try:
            expected = compose_cell(full).sink.key
        except Exception as exc:  # noqa: BLE001 - a cell that cannot be composed fails alike both ways
            with pytest.raises(type(exc)):
                compose_cell(view)
            continue
        assert compose_cell(view).sink.key == expected, overrides
    if name == "plain":  # 8 cells, two config-group choices (the losses): two compositions
        assert len(cells) == 8 and sweep.composed == 2
