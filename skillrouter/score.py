"""Score an external system's predictions with a cell's protocol and write a run directory.

    python -m skillrouter.score predictions=FILE data=... [tier=...] [eval=...]

Hydra overrides as for ``launch.py`` (config ``conf/score.yaml``). An entry point, like
``launch.py``: it composes the pipeline's data resolution and the cell's scoring, so a scored file
and a grid cell report the same numbers for the same rankings.
"""
from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from .cache.store import code_fingerprint
from .data import DataError
from .pipeline.cell import Scored, file_path, make_cache, run_cell, score_rankings
from .pipeline.compose import SCORING_CODE, CellComposer
from .pipeline.execute.build import Builder
from .pipeline.execute.local import LocalExecutor
from .rankings import Ranking, read_external
from .stages.graph import dataset_at

log = logging.getLogger(__name__)
CONF = Path(__file__).resolve().parents[1] / "conf"
CHOICE_KEYS = ("data", "tier", "eval")


def score_file(cfg: DictConfig, run_dir: Path, choices: dict[str, str]) -> Scored:
    composer, cache = CellComposer(cfg), make_cache(cfg)
    stage = composer.dataset()
    LocalExecutor(Builder(cache, progress=cfg.progress, user=str(run_dir)), fail_fast=True).run([stage])
    shared = dataset_at(str(cache.entry(stage.kind, stage.key)))
    dataset = dataclasses.replace(shared, queries=list(shared.queries))  # the read is shared: this one is ours
    predicted, unmatched = read_external(cfg.predictions, dataset.queries)
    missing = [q for q in dataset.queries if q.id not in predicted]
    if missing:
        log.warning("%d of %d queries have no prediction: %s", len(missing), len(dataset.queries),
                    "scored as misses" if cfg.missing_predictions == "miss" else "left out")
    if cfg.missing_predictions == "drop":
        dataset.queries = [q for q in dataset.queries if q.id in predicted]
    elif cfg.missing_predictions != "miss":
        raise DataError("config", None, "missing_predictions", f"expected miss or drop, got {cfg.missing_predictions!r}")
    ordered = [Ranking(q.id, predicted.get(q.id, []), [0.0] * len(predicted.get(q.id, []))) for q in dataset.queries]
    scored = score_rankings(cfg, run_dir, dataset, ordered, choices, {k: file_path(v, cache) for k, v in composer.data.items()})
    result = scored.result
    result["predictions"] = {"file": str(Path(cfg.predictions).resolve()), "unmatched_entries": unmatched,
                             "queries_without_prediction": len(missing), "missing_predictions": cfg.missing_predictions}
    result["stages"] = {"evaluate": {"key": "-", "cached": False, "seconds": 0.0, "code": code_fingerprint(SCORING_CODE),
                                     "modules": list(SCORING_CODE)}}  # what scored the file (report --check reads it)
    return scored


@hydra.main(version_base="1.3", config_path=str(CONF), config_name="score")
def main(cfg: DictConfig) -> None:
    runtime = HydraConfig.get().runtime
    system = cfg.system or Path(cfg.predictions).stem
    choices = {k: str(runtime.choices[k]) for k in CHOICE_KEYS if runtime.choices.get(k)}
    choices.update(encoder=system, reranker="none", fields=str(runtime.choices.get("fields")))
    try:
        result = run_cell(cfg, Path(runtime.output_dir), choices, "scored", evaluate=score_file)
    except DataError as err:
        print(f"skillrouter: data error: {err}", file=sys.stderr)
        sys.exit(2)
    print(" ".join(f"{k}={v:.4f}" for k, v in result["metrics"].items() if v is not None and "/" not in k))


if __name__ == "__main__":
    main()
