"""Keep secrets out of everything logged: configs name the *variable* that holds a key, values under
secret-looking keys are redacted, and the values of secret-looking environment variables are masked
wherever they would appear in logged text (a config value, a table cell)."""
from __future__ import annotations

import os
import re
from typing import Any

SECRET_KEY = re.compile(r"(api_?key|token|secret|password)$", re.IGNORECASE)
SECRET_ENV = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)
REDACTED = "<redacted>"


def secret_values() -> list[str]:
    """Values of this process's secret-looking environment variables (``OPENAI_API_KEY``, ``WANDB_API_KEY``...)."""
    return sorted({v for k, v in os.environ.items() if SECRET_ENV.search(k) and len(v) >= 8}, key=len, reverse=True)


def mask(text: str, secrets: list[str] | None = None) -> str:
    for value in secret_values() if secrets is None else secrets:
        text = text.replace(value, REDACTED)
    return text


def redact_arg(arg: str) -> str:
    """A command-line argument as W&B may record it: ``llm.api_key=...`` redacted, secret values masked."""
    key, sep, _ = arg.partition("=")
    if sep and SECRET_KEY.search(key.lstrip("+~-")):
        return f"{key}={REDACTED}"
    return mask(arg)


def scrub(obj: Any, secrets: list[str] | None = None) -> Any:
    """``obj`` with values under secret-looking keys redacted (``api_key_env`` names a variable, so it
    stays) and secret values masked in every string."""
    secrets = secret_values() if secrets is None else secrets
    if isinstance(obj, dict):
        return {k: (REDACTED if SECRET_KEY.search(str(k)) else scrub(v, secrets)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrub(v, secrets) for v in obj]
    if isinstance(obj, str):
        return mask(obj, secrets)
    return obj
