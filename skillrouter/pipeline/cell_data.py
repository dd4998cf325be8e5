"""A cell's data: the built-in benchmark (a cached stage), a release (downloaded once into
``data_dir``) or the user's files, resolved into a plain ``data`` slice that ``metrics.json``
records, so ``rescore`` and ``eval.score`` reload exactly what the cell read."""
from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from ..data import DataError, Dataset, load_descriptions
from ..data.download import ensure_release
from . import stages
from .cache import StageCache

RELEASE_SOURCES = ("skillrouter_core", "r3_skill")


def resolved_data(cfg: DictConfig, cache, user: str, record) -> dict[str, Any]:
    """The ``data`` slice with every input a concrete path: the built-in files generated (cached
    stage), a release's ``root`` downloaded when unset."""
    data: dict[str, Any] = OmegaConf.to_container(cfg.data, resolve=True)
    if data.get("builtin"):
        paths, rec = stages.builtin_data(cache, data["builtin"], user)
        record("builtin_data", rec)
        data.update(paths, source="files")
    if data.get("source") in RELEASE_SOURCES and not data.get("root"):
        data["root"] = str(ensure_release(data["source"], cfg.data_dir))
    return data


def load_cell_dataset(data: dict[str, Any], tier: DictConfig | dict, cache: StageCache, user: str, record) -> Dataset:
    """The cell's dataset through the cached columnar ``load_data`` stage."""
    dataset, rec = stages.load_data(cache, data, tier["name"], bool(tier["distractors"]), user)
    record("load_data", rec)
    return dataset


def load_oracle(cfg: DictConfig, data: dict[str, Any]) -> dict[str, str] | None:
    if cfg.fields.mode != "oracle_nd":
        return None
    if not data.get("oracle_nd"):
        raise DataError("config", None, "data.oracle_nd", "fields=oracle_nd needs a JSONL of {id, description}")
    return load_descriptions(data["oracle_nd"])
