"""The stage cache: reuse, incomplete entries, one builder among concurrent processes, stale locks."""
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skillrouter.cache.integrity import MANIFEST
from skillrouter.cache.locks import FileLock
from skillrouter.cache.store import StageCache, code_fingerprint, prune, stage_key


def key(**params) -> str:
    return stage_key("s", 1, "code", params, {})


def _build_counter(counter: Path):
    def build(out: Path):
        with open(counter, "a") as fh:
            fh.write("x")
        time.sleep(0.3)
        (out / "data.txt").write_text("payload")
        return {"note": 1}
    return build


def test_build_once_then_reuse(tmp_path):
    cache, counter = StageCache(tmp_path / "c"), tmp_path / "n"
    first = cache.get_or_build("s", key(a=1), _build_counter(counter), manifest={"params": {"a": 1}}, user="run1")
    second = cache.get_or_build("s", key(a=1), _build_counter(counter), manifest={"params": {"a": 1}}, user="run2")
    assert not first.cached and second.cached and first.key == second.key
    assert counter.read_text() == "x"
    assert (Path(first.path) / "data.txt").read_text() == "payload"
    manifest = json.loads((Path(first.path) / MANIFEST).read_text())
    assert manifest["params"] == {"a": 1} and manifest["note"] == 1
    assert cache.entries()[0]["users"] == ["run1", "run2"]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600)])
def test_an_entrys_manifest_is_as_readable_as_the_umask_lets_any_file_be(tmp_path, umask, mode):
    """A lab shares one cache (and reads each other's metrics): the atomic writes get 0666 less the umask, as any
    file the user writes, not the temporary file's 0600."""
    previous = os.umask(umask)
    try:
        record = StageCache(tmp_path / "c").get_or_build("s", key(a=1), _build_counter(tmp_path / "n"))
    finally:
        os.umask(previous)
    assert (Path(record.path) / MANIFEST).stat().st_mode & 0o777 == mode


def test_key_depends_on_params_inputs_code_and_version():
    base = stage_key("s", 1, "code", {"a": 1}, {"data": "k1"})
    assert base != stage_key("s", 1, "code", {"a": 2}, {"data": "k1"})
    assert base != stage_key("s", 1, "code", {"a": 1}, {"data": "k2"})
    assert base != stage_key("s", 1, "code", {"a": 1}, {"pool": "k1"})  # which input a key feeds matters
    assert base != stage_key("s", 1, "other", {"a": 1}, {"data": "k1"})
    assert base != stage_key("s", 2, "code", {"a": 1}, {"data": "k1"})
    assert base == stage_key("s", 1, "code", {"a": 1}, {"data": "k1"})


def test_entry_without_manifest_is_rebuilt(tmp_path):
    cache, counter = StageCache(tmp_path / "c"), tmp_path / "n"
    rec = cache.get_or_build("s", key(), _build_counter(counter))
    (Path(rec.path) / MANIFEST).unlink()
    again = cache.get_or_build("s", key(), _build_counter(counter))
    assert not again.cached and counter.read_text() == "xx"


def test_failed_build_publishes_nothing(tmp_path):
    cache = StageCache(tmp_path / "c")

    def boom(out):
        (out / "half").write_text("partial")
        raise RuntimeError("killed")

    try:
        cache.get_or_build("s", key(), boom)
    except RuntimeError:
        pass
    assert cache.entries() == [] and not list((tmp_path / "c" / "s").glob(".tmp-*"))


def _worker(root, counter, results):
    rec = StageCache(root).get_or_build("s", key(k=1), _build_counter(Path(counter)))
    results.put(rec.cached)


def test_concurrent_processes_build_once(tmp_path):
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(str(tmp_path / "c"), str(tmp_path / "n"), results)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert sorted(results.get() for _ in procs) == [False, True, True]
    assert (tmp_path / "n").read_text() == "x"


def test_stale_lock_is_taken_over(tmp_path):
    lock_path = tmp_path / "k.lock"
    lock_path.write_text('{"host": "gone", "pid": 1}')
    old = time.time() - 1000
    os.utime(lock_path, (old, old))
    lock = FileLock(lock_path, stale_after=10, poll=0.01)
    lock.acquire()
    assert json.loads(lock_path.read_text())["pid"] == os.getpid()
    lock.release()
    assert not lock_path.exists()


def test_key_changes_with_the_stage_source():
    """Modules are named, not imported (test_graph: planning loads no torch); a name that is no module
    fails where the stage is declared."""
    assert code_fingerprint(["skillrouter.data.builtin"]) != code_fingerprint(["skillrouter.fields"])
    assert code_fingerprint(["skillrouter.data.builtin"]) == code_fingerprint(["skillrouter.data.builtin"])
    with pytest.raises(ModuleNotFoundError, match="skillrouter.no_such_module"):
        code_fingerprint(["skillrouter.no_such_module"])


def test_a_resumable_build_keeps_its_work_until_it_publishes(tmp_path):
    cache = StageCache(tmp_path / "c")
    seen = []

    def build(out: Path, work: Path):
        work.mkdir(parents=True, exist_ok=True)
        seen.append(sorted(p.name for p in work.iterdir()))
        (work / "step-1").write_text("checkpoint")
        if len(seen) == 1:
            raise KeyboardInterrupt("killed")
        (out / "model").write_text("trained")

    try:
        cache.get_or_build("train", key(), build, resumable=True)
    except KeyboardInterrupt:
        pass
    assert cache.work_dir("train", key()).exists()
    rec = cache.get_or_build("train", key(), build, resumable=True)
    assert seen == [[], ["step-1"]] and not rec.cached and not cache.work_dir("train", key()).exists()


def test_lock_of_a_dead_process_on_this_host_is_taken_over_at_once(tmp_path):
    import socket
    import subprocess
    dead = subprocess.Popen(["true"])
    dead.wait()
    lock_path = tmp_path / "k.lock"
    lock_path.write_text(json.dumps({"host": socket.gethostname(), "pid": dead.pid, "time": time.time()}))
    lock = FileLock(lock_path, stale_after=3600, poll=0.01)
    lock.acquire()
    assert json.loads(lock_path.read_text())["pid"] == os.getpid()
    lock.release()


def test_prune_unused_and_by_stage(tmp_path):
    from skillrouter.cache.store import prune
    cache = StageCache(tmp_path / "c")
    live = tmp_path / "run-live"
    live.mkdir()
    cache.get_or_build("a", key(x=1), lambda out: None, user=str(live))
    cache.get_or_build("a", key(x=2), lambda out: None, user=str(tmp_path / "run-deleted"))
    cache.get_or_build("b", key(), lambda out: None, user=str(live))
    assert [e["key"] for e in prune(cache, unused=True, dry_run=True)] == [key(x=2)]
    assert len(cache.entries()) == 3
    prune(cache, unused=True)
    assert sorted(e["stage"] for e in cache.entries()) == ["a", "b"]
    prune(cache, stage="b")
    assert [e["stage"] for e in cache.entries()] == ["a"]
    assert prune(cache) == [] and len(cache.entries()) == 1  # no criterion: nothing goes


def _cache_cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "skillrouter.cache", "--cache-dir", str(root), *args],
                          capture_output=True, text=True, timeout=120)


def test_damaged_bookkeeping_is_one_line_and_the_commands_complete(tmp_path):
    cache = StageCache(tmp_path)
    for key in ("k1", "k2", "k3"):
        cache.get_or_build("s", key, lambda out: (out / "a.txt").write_text("x") and None, user=str(tmp_path / "run"))
    with open(tmp_path / "s" / "k1" / "users.txt", "ab") as fh:
        fh.write(b"/runs/caf\xe9\n")  # one byte that is not UTF-8
    (tmp_path / "s" / "k2" / "manifest.json").write_bytes(b"{not json\xff")
    listed = _cache_cli(tmp_path, "list")
    assert listed.returncode == 0, listed.stderr
    assert "s/k1: users.txt: not UTF-8 at byte" in listed.stdout and "s/k2: manifest.json: unreadable" in listed.stdout
    assert "3 entries" in listed.stdout and "Traceback" not in listed.stderr
    verified = _cache_cli(tmp_path, "verify")
    assert verified.returncode == 0, verified.stderr
    assert "s/k1: users.txt: not UTF-8 at byte" in verified.stdout and "(entry kept)" in verified.stdout
    assert "quarantined s/k2: manifest unreadable" in verified.stdout
    assert "verified 3 entries: 2 intact, 1 quarantined" in verified.stdout
    assert (tmp_path / "s" / "k1" / "a.txt").exists() and not (tmp_path / "s" / "k2").exists()
    assert [e["key"] for e in prune(StageCache(tmp_path), unused=True)] == ["k3"]  # k1's users are partly unknown: kept
