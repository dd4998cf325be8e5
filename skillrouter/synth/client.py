"""An LLM client for data-synthesis stages: any OpenAI-compatible ``/chat/completions`` endpoint.

* requests run ``concurrency`` at a time; a timeout, a 429 or a 5xx is retried with exponential
  backoff (``retries`` times); a reply that is not JSON valid against the request's schema is asked
  again, then recorded as a failure: never silently dropped;
* every request and its outcome is appended to the stage's JSONL log, keyed by a hash of the request,
  so a killed stage resumes without asking again what was already answered;
* ``budget`` caps the requests a stage may send (resumed answers are free); ``temperature`` and
  ``seed`` go with every request;
* the API key is read from the environment variable named by ``api_key_env`` and goes only into the
  Authorization header: never into a log, a manifest or a config dump.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)
RETRY_STATUS = (429, 500, 502, 503, 504)


URL_ENV = "SKILLROUTER_LLM_URL"  # where a grid's own LLM server answers (set by skillrouter.pipeline.llm_server)


def post_chat_completions(url: str, body: dict[str, Any], api_key_env: str | None, timeout: float) -> dict[str, Any]:
    """One ``POST {url}/chat/completions`` (the synthesis client's and the LLM judge's): the key is
    read from the variable ``api_key_env`` names and goes only into the Authorization header."""
    headers = {"Content-Type": "application/json"}
    key = os.environ.get(api_key_env) if api_key_env else None
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url.rstrip("/") + "/chat/completions", data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


class LLMUnavailable(RuntimeError):
    """No LLM is configured (``llm=none``) for a stage that needs one."""


@dataclass(frozen=True)
class LLMConfig:
    url: str | None
    model: str
    api_key_env: str | None = None
    concurrency: int = 8
    retries: int = 4
    timeout: float = 120.0
    backoff: float = 1.0          # seconds before the first retry; doubled each time, with jitter
    budget: int | None = None     # most requests one stage may send (None: no cap)
    temperature: float = 0.7
    seed: int = 0
    max_tokens: int = 1024


@dataclass(frozen=True)
class Request:
    """One chat request with the JSON schema its answer must satisfy."""

    name: str                     # the schema's name, e.g. "training_query"
    messages: tuple[dict[str, str], ...]
    schema: dict[str, Any]
    tag: str = ""                 # the stage's own handle for the request (skill id, attempt...)

    def key(self, cfg: LLMConfig) -> str:
        blob = json.dumps({"model": cfg.model, "temperature": cfg.temperature, "seed": cfg.seed, "name": self.name,
                           "messages": self.messages, "schema": self.schema, "tag": self.tag}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:20]


@dataclass
class Usage:
    """What a stage spent: requests sent, answered from the log, retried, failed; tokens."""

    requests: int = 0
    resumed: int = 0
    retries: int = 0
    invalid: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def count_error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


class LLMClient:
    """Ask many requests of one endpoint, logging every outcome to ``log_path`` for resumption."""

    def __init__(self, cfg: LLMConfig, log_path: Path):
        if not cfg.url:
            raise LLMUnavailable("this stage needs an LLM: choose llm=stub (local test server), llm=vllm (a server on "
                                 "the cluster) or llm=openai with llm.url=... (any OpenAI-compatible endpoint)")
        self.cfg, self.log_path = cfg, log_path
        self.usage = Usage()
        self._lock = threading.Lock()
        self._done: dict[str, dict[str, Any]] = {}
        if log_path.exists():
            for line in log_path.read_text(encoding="utf-8").splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:  # a line cut by a kill: that request is asked again
                    continue
                if rec.get("ok"):
                    self._done[rec["key"]] = rec
        log_path.parent.mkdir(parents=True, exist_ok=True)

    def _budget_left(self) -> bool:
        return self.cfg.budget is None or self.usage.requests < self.cfg.budget

    def _log(self, rec: dict[str, Any]) -> None:
        with self._lock, open(self.log_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def ask(self, request: Request) -> dict[str, Any] | None:
        """The parsed, schema-valid answer, or None once retries are exhausted (logged as a failure)."""
        from jsonschema import Draft202012Validator

        key = request.key(self.cfg)
        if key in self._done:
            with self._lock:
                self.usage.resumed += 1
            return self._done[key]["answer"]
        body = {"model": self.cfg.model, "messages": list(request.messages), "temperature": self.cfg.temperature,
                "seed": self.cfg.seed, "max_tokens": self.cfg.max_tokens,
                "response_format": {"type": "json_schema", "json_schema": {"name": request.name, "schema": request.schema}}}
        validator = Draft202012Validator(request.schema)
        error = "budget exhausted"
        for attempt in range(self.cfg.retries + 1):
            with self._lock:
                if not self._budget_left():
                    break
                self.usage.requests += 1
                if attempt:
                    self.usage.retries += 1
            try:
                reply = post_chat_completions(self.cfg.url, body, self.cfg.api_key_env, self.cfg.timeout)
                content = reply["choices"][0]["message"]["content"]
                usage = reply.get("usage") or {}
                with self._lock:
                    self.usage.prompt_tokens += int(usage.get("prompt_tokens", 0))
                    self.usage.completion_tokens += int(usage.get("completion_tokens", 0))
                answer = json.loads(content)
                problems = sorted(validator.iter_errors(answer), key=str)
                if problems:
                    raise ValueError(f"schema: {problems[0].message}")
                self._log({"key": key, "tag": request.tag, "name": request.name, "ok": True, "answer": answer,
                           "attempts": attempt + 1})
                return answer
            except urllib.error.HTTPError as exc:
                error = f"http {exc.code}"
                with self._lock:
                    self.usage.count_error(error)
                if exc.code not in RETRY_STATUS:
                    break
            except (urllib.error.URLError, TimeoutError, OSError) as exc:
                error = "timeout" if "timed out" in str(exc).lower() or isinstance(exc, TimeoutError) else type(exc).__name__
                with self._lock:
                    self.usage.count_error(error)
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                error = f"invalid reply ({str(exc)[:120]})"
                with self._lock:
                    self.usage.invalid += 1
                    self.usage.count_error("invalid reply")
            if attempt < self.cfg.retries:
                time.sleep(self.cfg.backoff * (2 ** attempt) * (0.5 + random.random() / 2))
        with self._lock:
            self.usage.failed += 1
        self._log({"key": key, "tag": request.tag, "name": request.name, "ok": False, "error": error})
        log.warning("LLM request %s (%s) failed: %s", request.name, request.tag, error)
        return None

    def map(self, fn, items: list) -> list:
        """``fn(item)`` for every item (each asking one or more requests), ``concurrency`` at a time, in order."""
        with ThreadPoolExecutor(max_workers=max(1, self.cfg.concurrency)) as pool:
            return list(pool.map(fn, items))

    def ask_checked(self, make: Callable[[int], Request], check: Callable[[dict[str, Any]], str | None],
                    attempts: int) -> tuple[dict[str, Any] | None, list[str]]:
        """Ask, check the answer (leakage, length...), ask again with a fresh request up to ``attempts``
        times. Returns the first answer that passes (or None) and why each rejected one failed."""
        why: list[str] = []
        for attempt in range(attempts):
            answer = self.ask(make(attempt))
            if answer is None:
                why.append("no valid reply")
                continue
            problem = check(answer)
            if problem is None:
                return answer, why
            why.append(problem)
        return None, why
