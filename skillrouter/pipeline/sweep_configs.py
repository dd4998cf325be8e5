"""Every cell's config of a grid, at a fraction of what Hydra's ``load_sweep_config`` costs per cell.

Composing a config (the defaults tree, every YAML merged) is what costs: ~0.3-0.8 s a cell here, so a 1,000-cell grid
spent minutes before anything ran. What composition produces depends only on the overrides that pick config groups
(``encoder=trained``, ``+experiment=...``, ``reranker@reranker.base=...``); plain keys (``seed=3``, ``topk=20``,
``reranker.train.lr=1e-4``) are applied afterwards. So cells that differ only in plain keys share one composition
(a *base*), and each cell is made from it in one of two forms:

* :meth:`SweepConfigs.view` — what planning reads: the base's app config resolved once into plain Python containers,
  a copy with the cell's plain keys set, behind a read-only attribute view (:class:`ConfigView`). Planning a cell
  touches no OmegaConf node. A cell whose plain keys an interpolation reads (``reranker.base.fine_tune_lr``, which
  ``reranker.train.lr`` follows), or that adds, deletes or merges a key, is made the full way and resolved;
* :meth:`SweepConfigs.load` — what a cell runs with: the pickled base (unpickling is ~5x faster than ``deepcopy``)
  with the plain keys applied by Hydra's own ``ConfigLoaderImpl._apply_overrides_to_config`` (its checks and
  messages) and ``hydra.overrides.task`` / ``hydra.job.override_dirname`` written as Hydra writes them: equal to
  ``load_sweep_config``'s config (``tests/test_sweep_configs.py`` compares them sweep by sweep). :class:`CellConfigs`
  makes them when a cell is launched, not when the grid is planned.
"""
from __future__ import annotations

import copy
import pickle
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

_REFERENCE = re.compile(r"\$\{([^${}:]+)\}")  # ${key}, ${..relative.key}: not a resolver (${oc.env:...}, ${hydra:...})


class ConfigView(Mapping):
    """A read-only attribute view of a resolved config (plain dicts and lists): what composing a cell's stage graph
    reads, with DictConfig's reading API (``cfg.encoder.kind``, ``.get``, ``in``, ``**``)."""

    __slots__ = ("_node",)  # no config key starts with "_"

    def __init__(self, node: dict[str, Any]):
        object.__setattr__(self, "_node", node)

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None

    def __getitem__(self, key: str) -> Any:
        value = self._node[key]
        return ConfigView(value) if isinstance(value, dict) else value

    def __iter__(self) -> Iterator[str]:
        return iter(self._node)

    def __len__(self) -> int:
        return len(self._node)

    def __setattr__(self, key: str, value: Any) -> None:
        raise TypeError("a ConfigView is read-only")


def plain(section: Any) -> Any:
    """A config section (DictConfig or view) as plain, resolved Python containers."""
    if isinstance(section, ConfigView):
        return copy.deepcopy(section._node)
    return OmegaConf.to_container(section, resolve=True) if OmegaConf.is_config(section) else section


def _resolved_app(cfg: DictConfig) -> dict[str, Any]:
    """The config without its ``hydra`` node, every interpolation resolved (``${hydra:...}`` against ``cfg``)."""
    HydraConfig.instance().set_config(cfg)
    return {k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k]) else cfg[k]
            for k in cfg if k != "hydra"}


def references(container: Any, path: tuple[str, ...] = ()) -> set[str]:
    """The keys the interpolations of an unresolved container read (relative ones made absolute)."""
    found: set[str] = set()
    if isinstance(container, dict):
        for k, v in container.items():
            found |= references(v, (*path, str(k)))
    elif isinstance(container, list):
        for i, v in enumerate(container):
            found |= references(v, (*path, str(i)))
    elif isinstance(container, str):
        for ref in _REFERENCE.findall(container):
            dots = len(ref) - len(ref.lstrip("."))
            found.add(".".join((*path[:len(path) - dots], ref.lstrip("."))) if dots else ref)
    return found


def _touches(key: str, refs: set[str]) -> bool:
    return any(r == key or r.startswith(key + ".") or key.startswith(r + ".") for r in refs)


@dataclass
class _Base:
    pickled: bytes
    resolved: dict[str, Any]
    refs: set[str]


@dataclass
class SweepConfigs:
    """A grid's cell configs from Hydra's config loader and the multirun's master config."""

    loader: Any
    master: DictConfig
    bases: dict[tuple[str, ...], _Base] = field(default_factory=dict)
    composed: int = 0  # full Hydra compositions (what planning time is made of)

    def __post_init__(self) -> None:
        self.parser = OverridesParser.create()
        self.parsed: dict[str, Override] = {}
        self.groups: dict[str, bool] = {}

    def parse(self, overrides: Sequence[str]) -> list[Override]:
        """Hydra's parse of each override, once per distinct string (a grid repeats a few strings in every cell)."""
        for line in overrides:
            if line not in self.parsed:
                self.parsed[line] = self.parser.parse_overrides([line])[0]
        return [self.parsed[line] for line in overrides]

    def _group(self, key: str) -> bool:
        if key not in self.groups:
            self.groups[key] = self.loader.repository.group_exists(key)
        return self.groups[key]

    def _split(self, overrides: Sequence[str]) -> tuple[list[Override], tuple[str, ...], list[Override]]:
        parsed = self.parse(overrides)
        group = [o for o in parsed if o.package is not None or o.is_hydra_override() or self._group(o.key_or_group)]
        return parsed, tuple(o.input_line for o in group), [o for o in parsed if o not in group]

    def _base(self, groups: tuple[str, ...]) -> _Base:
        if groups not in self.bases:
            self.composed += 1
            cfg = self.loader.load_sweep_config(self.master, list(groups))
            unresolved = OmegaConf.to_container(cfg, resolve=False)
            unresolved.pop("hydra", None)
            self.bases[groups] = _Base(pickle.dumps(cfg), _resolved_app(cfg), references(unresolved))
        return self.bases[groups]

    def task(self, overrides: Sequence[str]) -> list[str]:
        """The cell's app overrides (Hydra's ``hydra.overrides.task``)."""
        return [o.input_line for o in self.parse(overrides) if not o.is_hydra_override()]

    def load(self, overrides: Sequence[str]) -> DictConfig:
        """The cell's config, as ``load_sweep_config`` makes it (see the module docstring)."""
        parsed, groups, simple = self._split(overrides)
        cfg: DictConfig = pickle.loads(self._base(groups).pickled)
        if simple:
            ConfigLoaderImpl._apply_overrides_to_config(simple, cfg)
            app = [o for o in parsed if not o.is_hydra_override()]
            cfg.hydra.overrides.task = [o.input_line for o in app]
            cfg.hydra.job.override_dirname = get_overrides_dirname(
                overrides=app, kv_sep=cfg.hydra.job.config.override_dirname.kv_sep,
                item_sep=cfg.hydra.job.config.override_dirname.item_sep,
                exclude_keys=cfg.hydra.job.config.override_dirname.exclude_keys)
        OmegaConf.copy_cache(from_config=self.master, to_config=cfg)
        return cfg

    def view(self, overrides: Sequence[str]) -> ConfigView:
        """What planning reads of the cell: its resolved config (see the module docstring)."""
        _, groups, simple = self._split(overrides)
        base = self._base(groups)
        data = dict(base.resolved)  # a cell's keys are set on copies of the dicts on their path; the rest is shared
        for o in simple:
            if not self._set(data, o, base.refs):
                return ConfigView(_resolved_app(self.load(overrides)))
        return ConfigView(data)

    @staticmethod
    def _set(data: dict[str, Any], override: Override, refs: set[str]) -> bool:
        """Set a plain key in a resolved container whose dicts along the key's path are copied first (the others
        stay shared with the base: a view is read-only); False where only a full composition can tell (an add, a
        delete, a merged mapping, an interpolating value, a key some interpolation reads, a key not there)."""
        value, key = override.value(), override.key_or_group
        if (override.is_add() or override.is_force_add() or override.is_delete() or isinstance(value, dict)
                or "${" in str(value) or _touches(key, refs)):
            return False
        *parents, leaf = key.split(".")
        node = data
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                return False
            node[part] = node = dict(child)
        if leaf not in node:
            return False
        node[leaf] = copy.deepcopy(value)
        return True


class CellConfigs(Mapping):
    """Per cell index, its full config (with ``hydra.job.num`` and ``id``), made on first access."""

    def __init__(self, sweep: SweepConfigs, overrides: Mapping[int, Sequence[str]]):
        self.sweep, self.overrides = sweep, dict(overrides)
        self.made: dict[int, DictConfig] = {}

    def __getitem__(self, idx: int) -> DictConfig:
        if idx not in self.made:
            cfg = self.sweep.load(self.overrides[idx])
            with read_write(cfg), open_dict(cfg):
                cfg.hydra.job.id = idx
                cfg.hydra.job.num = idx
            self.made[idx] = cfg
        return self.made[idx]

    def __iter__(self) -> Iterator[int]:
        return iter(self.overrides)

    def __len__(self) -> int:
        return len(self.overrides)
