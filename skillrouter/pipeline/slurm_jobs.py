"""The SLURM jobs skillrouter submits itself, outside the grid's launcher (embedding shards, the grid's
LLM server): one way to turn a config's ``slurm`` block into a submitit executor."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

SUBMITIT_KEYS = ("timeout_min", "cpus_per_task", "gpus_per_node", "mem_gb", "name")  # submitit's own names


def slurm_executor(folder: Path, slurm: Mapping[str, Any], **fixed: Any):
    """A submitit executor for ``sbatch``: submitit's generic keys as they are, every other key as
    ``slurm_<key>`` (``partition``, ``account``...), unset (None) ones left to the cluster's defaults."""
    import submitit

    executor = submitit.AutoExecutor(folder=str(folder), cluster="slurm")
    settings = {**{k: v for k, v in slurm.items() if v is not None}, **fixed}
    executor.update_parameters(**{k if k in SUBMITIT_KEYS else f"slurm_{k}": v for k, v in settings.items()})
    return executor
