"""Which code made a run, and whether that code has changed since.

Every run records, per stage it used, the fingerprint of the modules that define the stage's artifact (``metrics.json``
``stages.<name>.code`` and ``.modules``: what the stage's cache key was made of). ``runs.csv`` carries them (column
``code``), so a report can be checked without the runs: a stage is stale when its modules' fingerprint in this checkout
differs from the recorded one (or a module is gone); a run with no record is stale as a whole (made before runs said).

    python -m skillrouter.report --check [RUNS_CSV]     # lists the stale runs; exit 1 if there are any
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

import pandas as pd

from ..cache.store import code_fingerprint

NO_RECORD = "no code record"


def code_column(stages: Mapping[str, Mapping[str, Any]]) -> str:
    """A run's ``code`` cell: ``{stage: [fingerprint, [modules]]}`` as compact JSON ("" without records)."""
    code = {name: [rec["code"], list(rec.get("modules", []))] for name, rec in sorted(stages.items()) if rec.get("code")}
    return json.dumps(code, separators=(",", ":")) if code else ""


def _current(modules: tuple[str, ...]) -> str | None:
    try:
        return code_fingerprint(modules)
    except ModuleNotFoundError:
        return None


def stale_stages(code: str) -> list[str]:
    """The stages of a run (its ``code`` cell) whose code differs from this checkout's; ``[NO_RECORD]`` without one."""
    if not isinstance(code, str) or not code:
        return [NO_RECORD]
    return sorted(name for name, (fingerprint, modules) in json.loads(code).items()
                  if _current(tuple(modules)) != fingerprint)


def stale_column(codes: Iterable[str], statuses: Iterable[str]) -> list[str]:
    """Per run, the stages made by code that has changed since, comma-joined ("" for a run that did not complete:
    it made no row)."""
    return [",".join(stale_stages(c)) if status == "completed" else "" for c, status in zip(codes, statuses)]


def stale_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The completed, current (not superseded) runs a report would show that were made by code that has changed since,
    with the stages (column ``stale``)."""
    if runs.empty:
        return runs
    shown = runs[(runs["status"] == "completed") & ~runs["superseded"].astype(bool)]
    return shown[shown["stale"].fillna("").astype(str) != ""]
