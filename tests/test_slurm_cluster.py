"""scripts/slurm_cluster.sh without a cluster: what it does with the pid files a dead cluster left behind."""
from __future__ import annotations

import os
import subprocess
import time

from .conftest import ROOT


def test_a_stale_pid_file_naming_another_process_is_not_the_daemon(tmp_path):
    """After a machine restart the pid in an old pid file can belong to any process (a test worker, the CI
    job itself): the script takes it for no daemon of its own, so `down` leaves that process alone (and `up`
    would start the daemon instead of trusting the file)."""
    other = subprocess.Popen(["sleep", "60"])
    try:
        for daemon in ("slurmctld", "slurmd"):
            (tmp_path / f"{daemon}.pid").write_text(f"{other.pid}\n")
        env = dict(os.environ, SKILLROUTER_SLURM_DIR=str(tmp_path))
        down = subprocess.run(["bash", str(ROOT / "scripts" / "slurm_cluster.sh"), "down"], env=env, capture_output=True,
                              text=True, timeout=60)
        assert down.returncode == 0, down.stderr
        time.sleep(0.2)
        assert other.poll() is None, "the script killed a process that was not its daemon"
    finally:
        other.kill()
        other.wait()
