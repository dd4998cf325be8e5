"""Fault injection: real processes killed, frozen or starved at named publish steps of the stage
cache, and damaged artifacts. After every fault the next run rebuilds what it must once, reads no
half entry, leaves no lock behind, and ends with the metrics of an undisturbed run.

Each case adds a row to the reliability table (see conftest.py: SKILLROUTER_RELIABILITY_REPORT)."""
from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skillrouter.cache.integrity import MANIFEST, entry_problem
from skillrouter.cache.store import StageCache

from .conftest import ROOT, reliability_row

BASE = ["data=tiny", "encoder=bm25", "progress=false"]


def launch(tmp: Path, run: str, *overrides: str, fault: str | None = None, wait: bool = True, preexec=None):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HYDRA_FULL_ERROR": "0"}
    env.pop("SKILLROUTER_FAULT", None)
    if fault:
        env["SKILLROUTER_FAULT"] = fault
    args = [sys.executable, str(ROOT / "launch.py"), f"hydra.run.dir={tmp / run}", f"cache_dir={tmp / 'cache'}", *BASE, *overrides]
    if not wait:
        return subprocess.Popen(args, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=preexec)
    return subprocess.run(args, cwd=tmp, env=env, capture_output=True, text=True, timeout=600, preexec_fn=preexec)


def metrics(tmp: Path, run: str) -> dict:
    return json.loads((tmp / run / "metrics.json").read_text())


def intact_entries(tmp: Path) -> list[Path]:
    entries = [Path(tmp / "cache" / e["stage"] / e["key"]) for e in StageCache(tmp / "cache").entries()]
    assert all(entry_problem(e, deep=True) is None for e in entries)
    return entries


@pytest.fixture
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reference")
    assert launch(tmp, "run").returncode == 0
    return metrics(tmp, "run")["metrics"]


@pytest.mark.parametrize("point", ["tmp_partial", "tmp_complete", "lock_acquired"])
def test_sigkill_at_each_publish_step(tmp_path, reference, point):
    """Killed before the temporary folder is complete, after it is complete but before the rename,
    and while holding the lock: nothing half-built is published, and the next run builds it once."""
    killed = launch(tmp_path, "killed", fault=f"{point}@retrieve")
    assert killed.returncode == -signal.SIGKILL
    assert not [p for p in (tmp_path / "cache" / "retrieve").glob(f"*/{MANIFEST}") if not p.parent.name.startswith(".")]
    assert list((tmp_path / "cache" / "retrieve").glob("*.lock"))  # the build runs inside the lock: it stays
    t0 = time.perf_counter()
    again = launch(tmp_path, "again")
    recovery = time.perf_counter() - t0
    assert again.returncode == 0, again.stderr[-2000:]
    stages = metrics(tmp_path, "again")["stages"]
    assert stages["retrieve"]["cached"] is False and stages["builtin_data"]["cached"] is True
    assert metrics(tmp_path, "again")["metrics"] == reference
    assert not list((tmp_path / "cache").glob("*/*.lock")) and intact_entries(tmp_path)
    reliability_row(f"SIGKILL at {point} (retrieve stage)",
                    "the killed run published nothing; its lock was taken over at once (holder dead on this host)",
                    "nothing (the stage was rebuilt once; metrics equal an undisturbed run)", recovery)


def _stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] == "T"


def test_frozen_lock_holder_is_taken_over_and_cannot_overwrite(tmp_path, reference):
    """SIGSTOP a holder after it built its copy, past the stale timeout; another process takes the lock
    over and publishes; SIGCONT the first: it discards its copy, and the published entry is untouched."""
    stale = ["cache_lock_stale_s=2"]
    frozen = launch(tmp_path, "frozen", *stale, fault="tmp_complete@retrieve:stop", wait=False)
    deadline = time.time() + 120
    while time.time() < deadline and not _stopped(frozen.pid):
        time.sleep(0.1)
    assert _stopped(frozen.pid)
    time.sleep(2.5)  # past the stale timeout: its heartbeat is frozen too
    t0 = time.perf_counter()
    taker = launch(tmp_path, "taker", *stale)
    recovery = time.perf_counter() - t0
    assert taker.returncode == 0, taker.stderr[-2000:]
    assert "taking over stale lock" in taker.stdout + taker.stderr
    entry = next(p for p in (tmp_path / "cache" / "retrieve").glob(f"*/{MANIFEST}") if not p.parent.name.startswith(".")).parent
    published = (entry / MANIFEST).read_bytes()
    os.kill(frozen.pid, signal.SIGCONT)
    out, err = frozen.communicate(timeout=300)
    assert frozen.returncode == 0, err[-2000:]
    assert (entry / MANIFEST).read_bytes() == published and intact_entries(tmp_path)
    assert not list((tmp_path / "cache").glob("*/*.lock")) and not list((tmp_path / "cache" / "retrieve").glob(".tmp-*"))
    assert metrics(tmp_path, "frozen")["metrics"] == metrics(tmp_path, "taker")["metrics"] == reference
    reliability_row("SIGSTOP a lock holder past the stale timeout, then SIGCONT",
                    "another process took the lock over and published; the woken holder discarded its copy",
                    "nothing (published entry byte-identical; both runs' metrics equal an undisturbed run)", recovery)


def _file_size_limit():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))


def test_file_size_limit_during_a_write_is_one_line_and_leaves_nothing(tmp_path):
    starved = launch(tmp_path, "starved", "data=builtin", preexec=_file_size_limit)
    assert starved.returncode == 2
    lines = [line for line in starved.stderr.splitlines() if line.startswith("skillrouter:")]
    assert len(lines) == 1 and "Traceback" not in starved.stderr
    assert lines[0].startswith("skillrouter: write error: stage builtin_data: cannot write ")
    assert "File too large" in lines[0] and str(tmp_path / "cache" / "builtin_data") in lines[0]
    assert not list((tmp_path / "cache").glob("*/*")), "no partial entry, no temporary folder"
    t0 = time.perf_counter()
    assert launch(tmp_path, "after", "data=builtin").returncode == 0
    reliability_row("file-size limit (RLIMIT_FSIZE) hit while writing an artifact",
                    "the cell failed with one line naming the stage and the path; its temporary folder was removed",
                    "nothing (no partial entry; the next run built every stage)", time.perf_counter() - t0)


def _flip_one_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def prune_retrieval(tmp: Path) -> None:
    subprocess.run([sys.executable, "-m", "skillrouter.cache", "--cache-dir", str(tmp / "cache"), "prune", "--stage",
                    "retrieve"], check=True, capture_output=True)


def test_flipped_byte_in_an_embedding_file_is_quarantined_and_rebuilt(tmp_path):
    dense = ["encoder=minilm"]
    assert launch(tmp_path, "first", *dense).returncode == 0
    entry = next((tmp_path / "cache" / "embed_pool").glob(f"*/{MANIFEST}")).parent
    _flip_one_byte(entry / "embeddings.npy")
    proc = subprocess.run([sys.executable, "-m", "skillrouter.cache", "--cache-dir", str(tmp_path / "cache"), "verify"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and f"quarantined embed_pool/{entry.name}: embeddings.npy: content differs" in proc.stdout
    assert not entry.exists() and list((tmp_path / "cache" / ".quarantine" / "embed_pool").iterdir())
    # the retrieval is intact, so the next run needs no embeddings: it says so instead of claiming a reuse
    assert launch(tmp_path, "unneeded", *dense).returncode == 0
    record = metrics(tmp_path, "unneeded")["stages"]["embed_pool"]
    assert {k: v for k, v in record.items() if k not in ("code", "modules")} == {"key": entry.name, "cached": False, "needed": False,
                                                                            "seconds": 0.0}
    assert metrics(tmp_path, "unneeded")["stages"]["retrieve"]["cached"] is True and not entry.exists()
    prune_retrieval(tmp_path)  # so the next run reads the embeddings again
    t0 = time.perf_counter()
    assert launch(tmp_path, "repaired", *dense).returncode == 0
    recovery = time.perf_counter() - t0
    assert metrics(tmp_path, "repaired")["stages"]["embed_pool"]["cached"] is False
    assert metrics(tmp_path, "repaired")["metrics"] == metrics(tmp_path, "first")["metrics"]
    # the same damage found on first use, without `cache verify`, when the entry is due for hashing
    _flip_one_byte(entry / "embeddings.npy")
    prune_retrieval(tmp_path)
    assert launch(tmp_path, "on_use", *dense, "cache_verify_after_days=0").returncode == 0
    on_use = metrics(tmp_path, "on_use")
    assert [q["stage"] for q in on_use["cache"]["quarantined"]] == ["embed_pool"]
    assert on_use["stages"]["embed_pool"]["cached"] is False and on_use["metrics"] == metrics(tmp_path, "first")["metrics"]
    reliability_row("one byte flipped in a published embedding file",
                    "`cache verify` (or first use after cache_verify_after_days) found the checksum mismatch and "
                    "quarantined the entry; the next run rebuilt it", "nothing (metrics equal the run before the damage)",
                    recovery)


def test_a_truncated_file_is_caught_by_the_size_check_on_every_use(tmp_path):
    cache = StageCache(tmp_path / "cache")
    rec = cache.get_or_build("s", "k1", lambda out: (out / "a.bin").write_bytes(b"x" * 100) and None)
    (Path(rec.path) / "a.bin").write_bytes(b"x" * 50)
    again = cache.get_or_build("s", "k1", lambda out: (out / "a.bin").write_bytes(b"x" * 100) and None)
    assert not again.cached and cache.quarantined[0]["problem"] == "a.bin: 50 bytes, manifest says 100"
