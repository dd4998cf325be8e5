"""A cell's data: the built-in benchmark (a cached stage), a release (downloaded once into
``data_dir``), the user's files, or files a synthesis stage generated (``data.<key>=synth:<stage>``),
resolved into a plain ``data`` slice that ``metrics.json`` records, so ``rescore`` and ``eval.score``
reload exactly what the cell read."""
from __future__ import annotations

from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from ..data import DataError, Dataset, load_descriptions
from ..data.download import ensure_release
from . import stages
from .cache import StageCache
from .synth_stages import Synthesizer, reference

RELEASE_SOURCES = ("skillrouter_core", "r3_skill")


class CellData:
    """Resolves the ``data`` slice lazily: a generated file is only made when the cell reads it."""

    def __init__(self, cfg: DictConfig, cache: StageCache, user: str, record: Callable):
        self.cfg, self.cache, self.user, self.record = cfg, cache, user, record
        self.synth = Synthesizer(cfg, cache, user, record)
        data: dict[str, Any] = OmegaConf.to_container(cfg.data, resolve=True)
        if data.get("builtin"):
            paths, rec = stages.builtin_data(cache, data["builtin"], user)
            record("builtin_data", rec)
            self.builtin_paths = paths
            data.update({k: v for k, v in paths.items() if not data.get(k)}, source="files")
        if data.get("source") in RELEASE_SOURCES and not data.get("root"):
            data["root"] = str(ensure_release(data["source"], cfg.data_dir))
        self.data = data
        for key in ("pool", "queries"):  # SkillBench-Supp replaces the benchmark itself
            if reference(data.get(key)):
                data[key] = self.synth.path(data[key], self._supp_source)
        if cfg.tier.distractors and reference(data.get("distractors")):
            data["distractors"] = self.synth.path(data["distractors"], self.base)

    def _supp_source(self) -> Dataset:
        source = OmegaConf.to_container(self.cfg.synth.get("source") or {})
        fallback = getattr(self, "builtin_paths", {})
        files = {"source": "files", "pool": source.get("pool") or fallback.get("pool"),
                 "queries": source.get("queries") or fallback.get("queries")}
        return stages.load_data(self.cache, files, "easy", False, self.user)[0]

    def base(self) -> Dataset:
        """The dataset generated files are made from: this cell's data without Hard-tier additions."""
        dataset, rec = stages.load_data(self.cache, self.data, "easy", False, self.user)
        self.record("load_data_base", rec)
        return dataset

    def dataset(self) -> Dataset:
        """The cell's dataset through the cached columnar ``load_data`` stage."""
        dataset, rec = stages.load_data(self.cache, self.data, self.cfg.tier.name, bool(self.cfg.tier.distractors), self.user)
        self.record("load_data", rec)
        return dataset

    def file(self, key: str) -> str | None:
        """A path-valued input (``train_pairs``, ``oracle_nd``), generated first if it is a synth reference."""
        if reference(self.data.get(key)):
            self.data[key] = self.synth.path(self.data[key], self.base)
        return self.data.get(key)

    def oracle(self) -> dict[str, str] | None:
        if self.cfg.fields.mode != "oracle_nd":
            return None
        path = self.file("oracle_nd")
        if not path:
            raise DataError("config", None, "data.oracle_nd", "fields=oracle_nd needs a JSONL of {id, description}")
        return load_descriptions(path)
