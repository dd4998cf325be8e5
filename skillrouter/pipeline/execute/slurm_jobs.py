"""Small SLURM helpers: turning a config's ``slurm`` block into a submitit executor (the grid's LLM
server job), asking SLURM what became of a job, and ending a job's process quickly."""
from __future__ import annotations

import gc
import math
import re
import subprocess
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


def leave_quickly() -> None:
    """Called when a job's work is done: the objects alive now are frozen out of the garbage collector, so the
    interpreter's exit does not sweep them. A process that loaded torch and sentence-transformers otherwise
    spends ~2.5 s exiting (measured here), and on a grid's critical path every job is followed by the next
    one's start. Atexit handlers and buffered output still run as usual."""
    gc.freeze()


def scontrol_job(job_id: str) -> dict[str, str]:
    """``scontrol show job -o`` of one job (an array task ``123_4`` included) as a dict; empty when
    SLURM no longer knows it or cannot be asked."""
    try:
        out = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    line = next((ln for ln in out.splitlines() if "JobId=" in ln), "")
    return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)


def job_state(job_id: str) -> str:
    """What SLURM says of a job, e.g. ``CANCELLED (DependencyNeverSatisfied)`` or ``FAILED (NonZeroExitCode)``."""
    info = scontrol_job(job_id)
    if not info:
        return "SLURM no longer knows it"
    reason = info.get("Reason", "None")
    return info.get("JobState", "UNKNOWN") + (f" ({reason})" if reason and reason != "None" else "")


_OVER_MEMORY = re.compile(r"exceeded memory limit \((\d+) > (\d+)\)", re.IGNORECASE)


def memory_fix(log: str | None, override: str) -> str | None:
    """For a job SLURM killed over its memory (slurmstepd's ``exceeded memory limit (used > limit)``): the peak it
    had reached and ``override=<GB>`` with room above it (1.5x, at least the limit + 1 GB), else None."""
    try:
        text = Path(log).read_text(errors="replace") if log else ""
    except OSError:
        return None
    found = _OVER_MEMORY.findall(text)
    if not found:
        return None
    used, limit = (int(v) for v in found[-1])
    unit = 1024 if limit < 64 * 2**20 else 1  # older Slurm reports KB, 22.05 bytes
    used_gb, limit_gb = used * unit / 2**30, limit * unit / 2**30
    need = max(math.ceil(used_gb * 1.5), math.floor(limit_gb) + 1)
    return f"it had reached {used_gb:.1f} GB against its {limit_gb:.1f} GB limit; fix: {override}={need}"


def stepd_reason(log: str | None) -> str | None:
    """slurmstepd's own words in a job's stderr (a memory or time limit, a node failure), if it left any."""
    try:
        lines = Path(log).read_text(errors="replace").splitlines() if log else []
    except OSError:
        return None
    said = [ln.strip() for ln in lines if "slurmstepd" in ln and re.search(r"limit|oom|CANCELLED|NODE FAILURE", ln, re.I)]
    return said[-1] if said else None
