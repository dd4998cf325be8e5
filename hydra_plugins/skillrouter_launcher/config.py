"""The grid launchers' and sweeper's config schemas, registered with Hydra's ConfigStore (as the submitit plugin
registers its own): ``hydra/launcher=skillrouter_local`` and ``skillrouter_slurm``, which the profiles
in ``conf/hydra/launcher/`` (``local``, ``slurm``, ``slurm_dev``) build on, and ``hydra/sweeper=skillrouter_basic``."""

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeperConf
from hydra.core.config_store import ConfigStore
from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf


@dataclass
class JobResources:
    """What one job of a resource class asks SLURM for (unset: the launcher's own setting, or the cluster's)."""

    gpus: Optional[int] = None
    cpus: Optional[int] = None
    mem_gb: Optional[int] = None
    timeout_min: Optional[int] = None
    partition: Optional[str] = None
    nodes: Optional[int] = None           # a training stage over several nodes: one task per node (its GPUs each)
    tasks_per_node: Optional[int] = None  # or one task per GPU; every task is a data-parallel rank


@dataclass
class ResourceClasses:
    """Per resource class of a stage (``gpu``: model compute; ``cpu``: BM25, mining, cells' scoring;
    ``llm``: generation, which talks to an LLM server; ``agent``: Harbor running agent trials in containers,
    a job's CPUs and memory shared by its concurrent trials); ``kinds`` overrides them per stage kind, e.g.
    ``hydra.launcher.resources.kinds.train_encoder.timeout_min=1440``."""

    gpu: JobResources = field(default_factory=lambda: JobResources(gpus=1))
    cpu: JobResources = field(default_factory=JobResources)
    llm: JobResources = field(default_factory=JobResources)
    agent: JobResources = field(default_factory=JobResources)  # agent trials: Harbor and its containers, no GPU
    kinds: Dict[str, Any] = field(default_factory=dict)


@dataclass
class LocalGridLauncherConf:
    _target_: str = "hydra_plugins.skillrouter_launcher.local_launcher.LocalGridLauncher"
    workers: int = 1  # stages built side by side (GPU-class ones one at a time)
    processes: bool = False  # each worker a process on cores/workers threads; no GPU visible: trainings side by side


@dataclass
class SlurmGridLauncherConf(SlurmQueueConf):
    _target_: str = "hydra_plugins.skillrouter_launcher.slurm_launcher.SlurmGridLauncher"
    resources: ResourceClasses = field(default_factory=ResourceClasses)
    score_cells_per_job: int = 8  # stage dispatch: cells scored by one task of the scoring array
    max_queued: Optional[int] = None  # at most this many of the grid's jobs in the queue (a cluster's per-user cap)


ConfigStore.instance().store(group="hydra/launcher", name="skillrouter_local", node=LocalGridLauncherConf,
                             provider="skillrouter")
ConfigStore.instance().store(group="hydra/launcher", name="skillrouter_slurm", node=SlurmGridLauncherConf,
                             provider="skillrouter")


@dataclass
class GridSweeperConf(BasicSweeperConf):
    _target_: str = "hydra_plugins.skillrouter_launcher.sweeper.GridSweeper"


ConfigStore.instance().store(group="hydra/sweeper", name="skillrouter_basic", node=GridSweeperConf, provider="skillrouter")


@dataclass
class StudyCellSweeperConf:
    """A study's config (its ``hydra.sweeper`` settings valid as they are: the Optuna sweeper's keys) run as one cell:
    the best trial's test cell. Untyped: the Optuna plugin's own schema classes do not pickle from here."""

    _target_: str = "hydra_plugins.skillrouter_launcher.sweeper.StudyCellSweeper"
    sampler: Any = None
    direction: Any = None
    storage: Any = None
    study_name: Any = None
    n_trials: Any = None
    n_jobs: Any = None
    max_failure_rate: Any = None
    search_space: Any = None
    params: Any = None
    custom_search_space: Any = None


ConfigStore.instance().store(group="hydra/sweeper", name="study_cell", node=StudyCellSweeperConf, provider="skillrouter")
