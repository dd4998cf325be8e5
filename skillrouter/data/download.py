"""Fetch a released benchmark into ``data_dir`` when ``data.root`` is not given.

    python -m skillrouter.data.download skillrouter_core|r3_skill --dest DIR

SkillRouter eval-core comes from its Hugging Face dataset with the release's own allow-patterns
(``scripts/download_eval_data.sh`` upstream); R3-Skill's two data files from its GitHub repository.
A download lands in a temporary folder and is renamed into place only when complete, under a lock,
so concurrent cells fetch it once. Offline, the error says what to run elsewhere or which path to pass.
"""
from __future__ import annotations

import argparse
import shutil
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .types import DataError

COMPLETE = ".complete"


@dataclass(frozen=True)
class Release:
    name: str
    folder: str
    fetch: Callable[[Path], None]
    manual: str  # what to do by hand when this machine cannot download


SKILLROUTER_CORE_REPO = "pipizhao/SkillRouter-Eval-Core"
SKILLROUTER_CORE_PATTERNS = ["manifest.json", "tasks.jsonl", "relevance.json", "easy/*.jsonl.gz", "hard/*.jsonl.gz"]
R3_RAW_URL = "https://raw.githubusercontent.com/Tencent/R3-Skill/main/"
R3_FILES = ("data/test.jsonl", "data/skills_test.jsonl")


def fetch_skillrouter_core(dest: Path) -> None:
    from huggingface_hub import snapshot_download

    snapshot_download(repo_id=SKILLROUTER_CORE_REPO, repo_type="dataset", local_dir=str(dest),
                      allow_patterns=SKILLROUTER_CORE_PATTERNS)


def fetch_r3_skill(dest: Path) -> None:
    for rel in R3_FILES:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(R3_RAW_URL + rel, timeout=120) as resp, open(target, "wb") as fh:
            shutil.copyfileobj(resp, fh)
        with open(target, "rb") as fh:
            if fh.read(40).startswith(b"version https://git-lfs"):
                raise OSError(f"{R3_RAW_URL + rel} is a Git LFS pointer, not the data")


RELEASES = {
    "skillrouter_core": Release(
        "skillrouter_core", "skillrouter-eval-core", fetch_skillrouter_core,
        "on a machine with internet: `python -m skillrouter.data.download skillrouter_core --dest DIR` (or the "
        "release's scripts/download_eval_data.sh), copy DIR here and pass data.root=DIR"),
    "r3_skill": Release(
        "r3_skill", "r3-skill", fetch_r3_skill,
        "`git clone https://github.com/Tencent/R3-Skill DIR` (with git-lfs if its data is LFS-tracked) "
        "and pass data.root=DIR"),
}


def ensure_release(name: str, data_dir: str | Path) -> Path:
    """The release's folder under ``data_dir``, downloading it first if it is not there yet. Lock-free:
    each downloader fills its own temporary folder and renames it into place; a loser of the race
    finds the winner's complete copy and discards its own."""
    release = RELEASES[name]
    final = Path(data_dir) / release.folder
    if (final / COMPLETE).exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{release.folder}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        try:
            release.fetch(tmp)
        except Exception as exc:
            reason = str(exc).splitlines()[0] if str(exc) else ""
            raise DataError("config", None, "data.root", f"not set, and {name} could not be downloaded into {final} "
                            f"({type(exc).__name__}: {reason}); {release.manual}") from None
        (tmp / COMPLETE).write_text("")
        try:
            if final.exists() and not (final / COMPLETE).exists():
                shutil.rmtree(final)  # an incomplete leftover
            tmp.rename(final)
        except OSError:
            if not (final / COMPLETE).exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def main() -> None:
    parser = argparse.ArgumentParser(description="Download a released benchmark.")
    parser.add_argument("release", choices=sorted(RELEASES))
    parser.add_argument("--dest", type=Path, required=True, help="folder to hold the release (pass it as data.root)")
    args = parser.parse_args()
    args.dest.mkdir(parents=True, exist_ok=True)
    RELEASES[args.release].fetch(args.dest)
    print(f"{args.release}: downloaded; use data.root={args.dest.resolve()}")


if __name__ == "__main__":
    main()
