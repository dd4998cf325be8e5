"""The LLM server of a grid: started before the first generation stage that has to be built, stopped
after the last (a grid whose generated files are all cached starts none).

``llm=stub`` runs :mod:`skillrouter.synth.stub` as a local process; ``llm=vllm`` submits a vLLM
OpenAI server (``llm.command``) as its own SLURM job through submitit, waits until it answers, and
cancels it at the end. Either way the stages find it through ``SKILLROUTER_LLM_URL`` (SLURM jobs
inherit it). A URL already set in the environment is used as is.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Mapping

from ..synth.client import URL_ENV


log = logging.getLogger(__name__)


def answers(url: str, timeout: float = 5.0) -> bool:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/models", timeout=timeout) as resp:
            return resp.status == 200
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def run_server_job(command: str, address_file: str) -> int:
    """What the SLURM job runs: pick a port, publish ``host:port``, run the server until cancelled."""
    port = free_port()
    host = socket.gethostname()
    Path(address_file).write_text(json.dumps({"host": host, "port": port}))
    return subprocess.call(command.format(port=port, python=sys.executable), shell=True)


class LLMServer:
    """One server for a run or a grid, as its ``llm`` config says (``server: stub | vllm``; none for a
    hosted endpoint). :meth:`start` is idempotent; :meth:`stop` too (and runs at exit)."""

    def __init__(self, llm: Mapping[str, Any], cache_dir: str | Path):
        self.llm, self.cache_dir = dict(llm), Path(cache_dir)
        self.process: subprocess.Popen | None = None
        self.job: Any = None
        self.started = False

    def start(self) -> None:
        kind = self.llm.get("server")
        if self.started or not kind or os.environ.get(URL_ENV):
            return
        self.started = True
        atexit.register(self.stop)
        url = self._start_stub() if kind == "stub" else self._start_slurm()
        os.environ[URL_ENV] = url
        log.info("LLM server (%s) answering at %s", kind, url)

    def _start_stub(self) -> str:
        port_file = Path(tempfile.mkdtemp()) / "port"
        faults = [f"--{k.replace('_', '-')}={v}" for k, v in (self.llm.get("stub") or {}).items() if v]
        self.process = subprocess.Popen([sys.executable, "-m", "skillrouter.synth.stub", "--port-file", str(port_file),
                                         f"--parent-pid={os.getpid()}", *faults],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while not port_file.exists():
            if time.time() > deadline or self.process.poll() is not None:
                raise RuntimeError("the stub LLM server did not start")
            time.sleep(0.05)
        return f"http://127.0.0.1:{port_file.read_text()}/v1"

    def _start_slurm(self) -> str:
        from .execute.slurm_jobs import slurm_executor

        llm = self.llm
        folder = self.cache_dir / "llm_server" / uuid.uuid4().hex[:8]
        folder.mkdir(parents=True, exist_ok=True)
        address = folder / "address.json"
        slurm = llm.get("slurm") or {}
        executor = slurm_executor(folder, slurm, name="llm-server")
        command = llm["command"].replace("{model}", str(llm["model"])).replace("{gpus}", str(slurm.get("gpus_per_node") or 1))
        self.job = executor.submit(run_server_job, command, str(address))
        log.info("LLM server job %s submitted", self.job.job_id)
        deadline = time.time() + float(llm.get("startup_timeout_s", 1800))
        while time.time() < deadline:
            if self.job.done():
                tail = (self.job.stderr() or "").strip().splitlines()[-3:]
                raise RuntimeError(f"the LLM server job {self.job.job_id} ended before answering: {' | '.join(tail)}")
            if address.exists():
                where = json.loads(address.read_text())
                url = f"http://{where['host']}:{where['port']}/v1"
                if answers(url):
                    return url
            time.sleep(2)
        self.stop()
        raise RuntimeError(f"the LLM server job did not answer within {llm.get('startup_timeout_s')} s")

    def stop(self) -> None:
        if not self.started:
            return
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        if self.job is not None and not self.job.done():
            self.job.cancel(check=False)
            log.info("LLM server job %s cancelled", self.job.job_id)
        self.process = self.job = None
        self.started = False
        os.environ.pop(URL_ENV, None)
