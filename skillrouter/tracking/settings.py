"""Where runs go (project, entity, mode, the sweep's group) and the one way a run is started, guarded:
a W&B failure (no network, a quota, a bad setting) costs one warning line, never a stage or a cell."""
from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..secrets import redact_arg, scrub

log = logging.getLogger(__name__)
_ARGV = threading.Lock()  # stages built side by side start runs from several threads; sys.argv is one


@contextlib.contextmanager
def guarded(what: str) -> Iterator[None]:
    """Run a W&B call; on any error log one warning line and go on."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - tracking is never worth a failed stage or cell
        first = (str(exc).splitlines() or [""])[0][:200]
        log.warning("W&B: %s failed (%s: %s); going on without it", what, type(exc).__name__, first)


@dataclass(frozen=True)
class TrackingSettings:
    """Picklable (it travels to SLURM stage jobs with the stages). ``upload``: artifacts carry their files
    instead of referencing the cache entry."""

    project: str
    entity: str | None
    mode: str
    group: str
    upload: bool = False

    def init(self, directory: Path, job_type: str, name: str, config: dict[str, Any], run_id: str | None = None,
             tags: list[str] | None = None) -> Any:
        """A new W&B run writing under ``directory`` (offline: ``directory/wandb/offline-run-*``); a given
        ``run_id`` resumes that run (a requeued stage continues its curve). Several may be open at once. The
        waits for W&B's service are generous: on a loaded node (a login node, CI beside SLURM jobs) its start
        can pass W&B's defaults (30 s, 90 s), and a run given up on is a stage with no curve."""
        import wandb

        directory.mkdir(parents=True, exist_ok=True)
        with _ARGV:  # W&B records the command line: it sees it redacted
            argv = sys.argv
            sys.argv = [argv[0], *map(redact_arg, argv[1:])]
            try:
                return wandb.init(project=self.project, entity=self.entity, mode=self.mode, group=self.group,
                                  job_type=job_type, name=name, id=run_id, resume="allow" if run_id else None,
                                  dir=str(directory), tags=tags, config=scrub(config), reinit="create_new",
                                  settings=wandb.Settings(silent=True, init_timeout=300, x_service_wait=120))
            finally:
                sys.argv = argv


def finish(run: Any, exit_code: int = 0, wait_s: float = 60.0) -> None:
    """End ``run`` and wait (at most ``wait_s``) until W&B's service has written its exit record: ``finish`` returns
    before the service has flushed the run file, and whatever reads it next (``sync``, a test, the node once the job
    has exited) would find the run's last records, an artifact among them, missing."""
    from .offline import ended

    folder = Path(run.dir).parent  # <run folder>/files
    run.finish(exit_code=exit_code)
    deadline = time.monotonic() + wait_s
    while not ended(folder) and time.monotonic() < deadline:
        time.sleep(0.05)
