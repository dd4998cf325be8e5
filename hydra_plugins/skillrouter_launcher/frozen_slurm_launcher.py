"""A submitit launcher for SLURM that freezes each cell's config at launch and asks for GPUs only
for cells that run a neural model.

hydra-submitit-launcher re-composes every job's config on the compute node, so YAML edited while
jobs wait in the queue would change them; here each job carries the config composed at launch.
Cells are grouped by whether they need a GPU (a dense or trained encoder, a cross-encoder
reranker) and each group is submitted as its own job array: BM25-only cells and LLM-judge cells
never hold a GPU. A timed-out or preempted job is requeued by submitit (``max_num_timeout > 0``)
and resumes through the stage cache and the training checkpoints.

Selected with ``hydra/launcher=slurm`` (conf/hydra/launcher/slurm.yaml: the plugin's
``submitit_slurm`` schema with this class as ``_target_``).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides, run_job, setup_globals
from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)


def needs_gpu(cfg: DictConfig) -> bool:
    return cfg.encoder.kind in ("dense", "trained") or cfg.reranker.kind in ("cross_encoder", "trained")


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
            for p, job in zip(job_params, executor.map_array(self, *zip(*job_params))):
                jobs[p[2]] = job
        return [jobs[i].results()[0] for i in sorted(jobs)]
