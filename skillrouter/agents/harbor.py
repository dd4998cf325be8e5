"""Harbor as an engine driven through its CLI (``harbor run -c JOB.yaml``), as SLURM is through ``sbatch``:
we write its job config, start it, read the trials it finishes from its result files, and never import it
(it lives in its own environment: it needs Python >= 3.12).

Layout read (Harbor 0.26): ``JOBS/<job>/result.json`` (``stats.n_retries``), and per trial
``JOBS/<job>/<task>__<id>/result.json`` with ``config.task.path``, ``verifier_result.rewards.reward``,
``exception_info.exception_type``, the phase timings (``environment_setup``, ``agent_setup``,
``agent_execution``, ``verifier``: ``started_at`` / ``finished_at``) and the folders ``agent/``,
``verifier/`` and ``trial.log``. A failed trial that Harbor retries is replaced by its retry.

No secret reaches Harbor's files through us: keys stay in the environment Harbor inherits (a keyless local
server gets the placeholder ``EMPTY``), the job config holds names and URLs only."""
from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import yaml

PHASES = ("environment_setup", "agent_setup", "agent_execution", "verifier")
KEYLESS = "EMPTY"  # what vLLM and our stub accept as a key (an OpenAI client refuses to send none)


@dataclass(frozen=True)
class AgentSpec:
    """An agent as Harbor runs it: its Harbor name, model and options (what a trial's result depends on).
    ``llm``: it talks to the grid's LLM (``llm=stub|vllm|openai``) through LiteLLM, at that server's URL;
    ``api_key_env``: the variable its key is read from (never the key)."""

    name: str
    model: str | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    llm: bool = False
    api_key_env: str | None = None

    def identity(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "kwargs": dict(self.kwargs)}


@dataclass(frozen=True)
class TrialOutcome:
    """One finished Harbor trial: ``reward`` is None when it never reached its verifier (an exception)."""

    trial: str
    task_path: str
    reward: float | None
    exception: str | None
    seconds: dict[str, float]
    folder: Path

    @property
    def ran(self) -> bool:
        return self.reward is not None


def job_config(name: str, jobs_dir: Path, tasks: Sequence[Path], agent: AgentSpec, attempts: int, *,
               environment: str, concurrency: int, retries: int, timeout_multiplier: float,
               llm_url: str | None = None) -> dict[str, Any]:
    """A Harbor JobConfig: every task ``attempts`` times with one agent."""
    kwargs = dict(agent.kwargs)
    if agent.llm and llm_url:
        kwargs["api_base"] = llm_url
    return {"job_name": name, "jobs_dir": str(jobs_dir), "n_attempts": attempts, "timeout_multiplier": timeout_multiplier,
            "n_concurrent_trials": concurrency, "quiet": True, "retry": {"max_retries": retries},
            "environment": {"type": environment, "delete": True},
            "agents": [{"name": agent.name, **({"model_name": agent.model} if agent.model else {}), "kwargs": kwargs}],
            "tasks": [{"path": str(t)} for t in tasks]}


def harbor_env(agent: AgentSpec, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment Harbor runs in: ours, LiteLLM told not to fetch its price list (offline nodes), and for
    an agent of the grid's LLM the OpenAI key LiteLLM sends, read from ``api_key_env`` or ``EMPTY``."""
    env = dict(os.environ if base is None else base)
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if agent.llm:
        key = env.get(agent.api_key_env) if agent.api_key_env else None
        env["OPENAI_API_KEY"] = key or env.get("OPENAI_API_KEY") or KEYLESS
    return env


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Harbor (and its containers' teardown) goes when the stage's process goes, even when it is SIGKILLed."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def run(executable: str, config: Mapping[str, Any], config_path: Path, env: Mapping[str, str], log_path: Path,
        poll: Callable[[], None], every_s: float = 2.0) -> int:
    """Run ``harbor run -c`` on ``config`` (written to ``config_path``), calling ``poll()`` every ``every_s``
    seconds while it runs and once after; returns its exit status. Its output goes to ``log_path``."""
    config_path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
    with open(log_path, "ab") as log:
        try:
            proc = subprocess.Popen([executable, "run", "-c", str(config_path), "-y"], env=dict(env), stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        except FileNotFoundError:
            raise RuntimeError(f"the harbor CLI {executable!r} was not found: run `make harbor` (its own Python >= 3.12 "
                               f"environment) or set downstream.harbor to its path") from None
        try:
            while proc.poll() is None:
                poll()
                time.sleep(every_s)
        except BaseException:
            proc.terminate()
            proc.wait(timeout=60)
            raise
    poll()
    return proc.returncode


def _seconds(phase: Mapping[str, Any] | None) -> float | None:
    if not phase or not phase.get("started_at") or not phase.get("finished_at"):
        return None
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
    return round((parse(phase["finished_at"]) - parse(phase["started_at"])).total_seconds(), 3)


def read_trial(folder: Path) -> TrialOutcome | None:
    """A trial folder's outcome once Harbor has finished it (None before)."""
    try:
        result = json.loads((folder / "result.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not result.get("finished_at"):
        return None
    rewards = (result.get("verifier_result") or {}).get("rewards") or {}
    reward = rewards.get("reward")
    exc = result.get("exception_info") or {}
    seconds = {p: s for p in PHASES if (s := _seconds(result.get(p))) is not None}
    return TrialOutcome(result.get("trial_name", folder.name), str(((result.get("config") or {}).get("task") or {}).get("path")),
                        float(reward) if reward is not None else None, exc.get("exception_type"), seconds, folder)


def finished_trials(jobs_dir: Path) -> Iterator[TrialOutcome]:
    """Every finished trial of every job under ``jobs_dir``."""
    for result in sorted(jobs_dir.glob("*/*/result.json")):
        outcome = read_trial(result.parent)
        if outcome is not None:
            yield outcome


def retries(jobs_dir: Path) -> int:
    """Trials Harbor retried in the jobs under ``jobs_dir`` (its ``stats.n_retries``)."""
    total = 0
    for result in jobs_dir.glob("*/result.json"):
        try:
            total += int(json.loads(result.read_text()).get("stats", {}).get("n_retries") or 0)
        except (OSError, json.JSONDecodeError, ValueError):
            continue
    return total
