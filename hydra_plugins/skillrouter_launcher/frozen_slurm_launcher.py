"""A submitit launcher for SLURM that freezes each cell's config at launch and asks for GPUs only
for cells that run a neural model.

hydra-submitit-launcher re-composes every job's config on the compute node, so YAML edited while
jobs wait in the queue would change them; here each job carries the config composed at launch.
Cells are grouped by whether they need a GPU (a dense or trained encoder, a cross-encoder
reranker) and each group is submitted as its own job array: BM25-only cells and LLM-judge cells
never hold a GPU. A timed-out or preempted job is requeued by submitit (``max_num_timeout > 0``)
and resumes through the stage cache and the training checkpoints.

A submission the scheduler refuses ends the grid with one line naming the cells, the scheduler's
reason and the override that fixes it (already-submitted cells are cancelled). A job that dies
outside its cell (killed over its ``--mem``, its node lost for good) is recorded as a failed cell
with SLURM's reason, and the rest of the grid goes on.

Selected with ``hydra/launcher=slurm`` (conf/hydra/launcher/slurm.yaml: the plugin's
``submitit_slurm`` schema with this class as ``_target_``), or ``hydra/launcher=slurm_dev`` for the
repository's single-node cluster (scripts/slurm_cluster.sh).
"""
from __future__ import annotations

import logging
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides, run_job, setup_globals
from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
from omegaconf import DictConfig, OmegaConf, open_dict
from skillrouter.pipeline.status import split_shared

log = logging.getLogger(__name__)


def needs_gpu(cfg: DictConfig) -> bool:
    return cfg.encoder.kind in ("dense", "trained") or cfg.reranker.kind in ("cross_encoder", "trained")


def _sinfo(fmt: str) -> list[str]:
    try:
        out = subprocess.run(["sinfo", "-h", "-o", fmt], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return sorted({v.strip().rstrip("*") for v in out.split() if v.strip()})


def refusal_fix(reason: str) -> str:
    """The override that answers sbatch's reason, with this cluster's values where sinfo knows them."""
    if "generic resource" in reason or "gres" in reason.lower():
        return "this cluster has no such GPUs: hydra.launcher.gpus_per_node=null (CPU-only cells)"
    if "More processors requested" in reason:
        cpus = max((int(c) for c in _sinfo("%c") if c.isdigit()), default=1)
        return f"a node here has {cpus} CPUs: hydra.launcher.cpus_per_task={cpus} (or fewer)"
    if "Memory specification" in reason:
        mem = max((int(m) for m in _sinfo("%m") if m.isdigit()), default=0)
        return f"a node here has {mem // 1024} GB: hydra.launcher.mem_gb={max(1, mem // 1024 - 1)} (or null)"
    if "partition" in reason.lower():
        return f"hydra.launcher.partition=<one of: {', '.join(_sinfo('%P')) or 'see sinfo'}>"
    return "check the hydra.launcher.* settings against `sinfo` (on this repository's cluster: hydra/launcher=slurm_dev)"


def refusal_line(cells: list[str], stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if "error" in ln.lower()]
    reason = lines[-1] if lines else stderr.strip().splitlines()[-1] if stderr.strip() else "sbatch failed"
    reason = re.sub(r"^sbatch: error: (Batch job submission failed: )?", "", reason)
    return f"skillrouter: SLURM refused {', '.join(cells)}: {reason}; fix: {refusal_fix(stderr)}"


def lost_job_reason(job: Any) -> str:
    """SLURM's account of a job that died outside its cell: its state and slurmstepd's own words
    (a memory or time limit) when it left any, else the last error line of the job's output."""
    try:
        lines = [ln.strip() for ln in (job.stderr() or "").splitlines() if "error" in ln.lower()]
    except OSError:
        lines = []
    stepd = [ln for ln in lines if "slurmstepd" in ln and re.search(r"limit|oom|CANCELLED|NODE FAILURE", ln)]
    said = (stepd or lines)[-1:]
    return f"SLURM job {job.job_id} {job.state}" + (f": {said[0]}" if said else "")


class FrozenSlurmLauncher(SlurmLauncher):
    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.frozen: dict[int, DictConfig] = {}

    def __call__(self, sweep_overrides: list[str], job_dir_key: str, job_num: int, job_id: str,
                 singleton_state: dict) -> JobReturn:
        import submitit

        Singleton.set_state(singleton_state)
        setup_globals()
        sweep_config = self.frozen[job_num].copy()
        with open_dict(sweep_config.hydra.job):
            sweep_config.hydra.job.id = submitit.JobEnvironment().job_id
            sweep_config.hydra.job.num = job_num
        return run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=sweep_config,
                       job_dir_key=job_dir_key, job_subdir_key="hydra.sweep.subdir")

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import submitit

        assert self.config is not None and self.hydra_context is not None
        params = dict(self.params)
        executor = submitit.AutoExecutor(folder=params.pop("submitit_folder"), cluster="slurm",
                                         slurm_max_num_timeout=params.pop("max_num_timeout"))
        base_keys = set(OmegaConf.structured(SlurmQueueConf).keys()) & {"timeout_min", "cpus_per_task", "gpus_per_node",
                                                                        "tasks_per_node", "mem_gb", "nodes", "name",
                                                                        "stderr_to_stdout"}
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        groups: dict[bool, list[tuple]] = {True: [], False: []}
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            self.frozen[idx] = cfg
            gpu = needs_gpu(cfg)
            log.info("\t#%d : %s%s", idx, " ".join(filter_overrides(overrides)), "  [gpu]" if gpu else "")
            groups[gpu].append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
        jobs: dict[int, Any] = {}
        for gpu, job_params in groups.items():
            if not job_params:
                continue
            group_params = {(k if k in base_keys else f"slurm_{k}"): v for k, v in params.items()}
            group_params["gpus_per_node"] = params.get("gpus_per_node") if gpu else None
            executor.update_parameters(**group_params)
            try:
                submitted = executor.map_array(self, *zip(*job_params))
            except submitit.core.utils.FailedJobError as exc:
                for job in jobs.values():
                    job.cancel(check=False)
                _, labels = split_shared([filter_overrides(list(o)) for o in job_overrides])
                cells = [f"cell #{p[2]} ({labels[p[2] - initial_job_idx]})" for p in job_params]
                print(refusal_line(cells, str(exc)), file=sys.stderr)
                sys.exit(2)
            for p, job in zip(job_params, submitted):
                jobs[p[2]] = job
        return [self._result(i, jobs[i], sweep_dir) for i in sorted(jobs)]

    def _result(self, idx: int, job: Any, sweep_dir: Path) -> JobReturn:
        """The cell's own return, or, when the job died outside it, a failed cell on disk."""
        try:
            return job.results()[0]
        except Exception:  # noqa: BLE001 - any way a job can die; the cell's own errors never reach here
            from skillrouter.data.jsonl import atomic_write_json
            from skillrouter.pipeline.entry import cell_choices

            cfg = self.frozen[idx]
            run_dir = sweep_dir / str(idx)
            run_dir.mkdir(parents=True, exist_ok=True)
            failed = {"choices": cell_choices(cfg, cfg.hydra.runtime.choices), "status": "failed",
                      "error": lost_job_reason(job), "ended": time.time()}
            for name in ("metrics.json", "status.json"):
                atomic_write_json(run_dir / name, failed)
            log.error("cell #%d lost: %s", idx, failed["error"])
            return JobReturn(overrides=list(cfg.hydra.overrides.task), cfg=cfg, working_dir=str(run_dir),
                             status=JobStatus.COMPLETED, _return_value=None)
