"""The sbatch scripts stage-level dispatch generates, one per resource class, pinned by golden files (as
submitit pins its own): the resources of each class, the per-kind override, the dependency kinds, the
kill on an invalid dependency. Regenerate with SKILLROUTER_UPDATE_GOLDEN=1 after a deliberate change."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from skillrouter.pipeline.execute.slurm import SCORE_KIND, make_executor

from .conftest import ROOT

GOLDEN = Path(__file__).parent / "golden"
JOBS = [  # (file, kind, resource, dependency)
    ("sbatch_gpu.txt", "train_encoder", "gpu", "afterok:101_0:102"),
    ("sbatch_cpu.txt", "mine_negatives", "cpu", "afterok:101_0"),
    ("sbatch_llm.txt", "gen_queries", "llm", None),
    ("sbatch_score.txt", SCORE_KIND, "cpu", "afterany:101:102:103"),
]


@pytest.fixture(autouse=True)
def srun_on_path(tmp_path_factory, monkeypatch):
    """submitit's SLURM executor refuses to start where no ``srun`` is on PATH (a GPU node or laptop without SLURM's
    client tools); these tests only render scripts, so a stub stands in for the login node's ``srun``."""
    bin_dir = tmp_path_factory.mktemp("slurm-client")
    srun = bin_dir / "srun"
    srun.write_text("#!/bin/sh\nexit 1\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")


def launcher_params(profile: str, *overrides: str) -> dict:
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"hydra/launcher={profile}", "hydra.sweep.dir=/SWEEP", "hydra.job.name=launch",
                                           *overrides], return_hydra_config=True)
    params = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    params.pop("_target_")
    return params


@pytest.mark.parametrize("name, kind, resource, dependency", JOBS)
def test_sbatch_script_of_each_resource_class_is_pinned(tmp_path, name, kind, resource, dependency):
    params = launcher_params("slurm", "hydra.launcher.partition=gpu", "hydra.launcher.resources.cpu.partition=cpu",
                             "hydra.launcher.resources.llm.partition=cpu",
                             "+hydra.launcher.resources.kinds.train_encoder.timeout_min=1440")
    folder = tmp_path / "jobs"
    executor = make_executor(str(folder), params, params["resources"], kind, resource, dependency)
    text = executor._executor._make_submission_file_text(f"python -u -m submitit.core._submit {folder}", "uid")
    text = text.replace(str(folder), "<submitit_folder>")
    golden = GOLDEN / name
    if os.environ.get("SKILLROUTER_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden}: run with SKILLROUTER_UPDATE_GOLDEN=1 to write it"
    assert text == golden.read_text(), f"the generated sbatch script differs from {golden}"


def test_the_dev_profile_asks_gpu_stages_for_a_gpu_and_nothing_else_for_one():
    params = launcher_params("slurm_dev")
    scripts = {r: make_executor("/f", params, params["resources"], "x", r)._executor._make_submission_file_text("cmd", "u")
               for r in ("gpu", "cpu", "llm")}
    assert "#SBATCH --gpus-per-node=1" in scripts["gpu"]
    assert all("gpus" not in scripts[r] for r in ("cpu", "llm"))
    assert all("#SBATCH --cpus-per-task=1" in s and "#SBATCH --partition=debug" in s for s in scripts.values())


def test_a_training_kind_over_several_nodes_asks_for_them_and_only_it():
    params = launcher_params("slurm", "+hydra.launcher.resources.kinds.train_encoder.nodes=4",
                             "+hydra.launcher.resources.kinds.train_encoder.gpus=8")
    script = {k: make_executor("/f", params, params["resources"], k, "gpu")._executor._make_submission_file_text("cmd", "u")
              for k in ("train_encoder", "embed_pool")}
    assert "#SBATCH --nodes=4" in script["train_encoder"] and "#SBATCH --gpus-per-node=8" in script["train_encoder"]
    assert "#SBATCH --ntasks-per-node=1" in script["train_encoder"]
    assert "#SBATCH --nodes=1" in script["embed_pool"] and "#SBATCH --gpus-per-node=1" in script["embed_pool"]
