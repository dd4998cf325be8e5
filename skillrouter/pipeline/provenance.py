"""What a run needs to be reproduced: git commit and dirty state, package versions, seed, config."""
from __future__ import annotations

import platform
import socket
import subprocess
import sys
import time
from importlib import metadata
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ..secrets import scrub

PACKAGES = ("skillrouter", "torch", "transformers", "sentence-transformers", "peft", "faiss-cpu", "bm25s",
            "hydra-core", "submitit", "wandb", "numpy", "pandas")


def _git(*args: str, cwd: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def provenance(cfg: DictConfig) -> dict[str, Any]:
    cwd = str(cfg.get("project_root") or ".")
    status = _git("status", "--porcelain", cwd=cwd)
    return {
        "git_commit": _git("rev-parse", "HEAD", cwd=cwd),
        "git_dirty": None if status is None else bool(status),
        "python": sys.version.split()[0], "platform": platform.platform(),
        "packages": package_versions(), "seed": cfg.get("seed"), "host": socket.gethostname(), "started": time.time(),
        "config": scrub(OmegaConf.to_container(cfg, resolve=True)),
    }
