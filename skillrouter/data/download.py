"""Fetch a released benchmark into ``data_dir`` when ``data.root`` is not given.

    python -m skillrouter.data.download skillrouter_core|r3_skill|skillret|sra_bench|skillretbench --dest DIR [--revision R]

The Hugging Face releases (SkillRouter eval-core, SkillRet, SkillRetBench) come through ``snapshot_download``
with allow-patterns (eval-core's are its own ``scripts/download_eval_data.sh``) and, for SkillRet, the pinned
``data.revision``; R3-Skill's and SRA-Bench's files from their GitHub repositories.
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
    fetch: Callable[[Path, str | None], None]  # (dest, revision)
    manual: str  # what to do by hand when this machine cannot download


SKILLROUTER_CORE_REPO = "pipizhao/SkillRouter-Eval-Core"
SKILLROUTER_CORE_PATTERNS = ["manifest.json", "tasks.jsonl", "relevance.json", "easy/*.jsonl.gz", "hard/*.jsonl.gz"]
SKILLRET_REPO = "ThakiCloud/SKILLRET"
SKILLRET_PATTERNS = ["data/skills/*.jsonl", "data/queries/*.jsonl", "data/qrels/*.jsonl", "data/skills.jsonl",
                     "data/taxonomy.json"]
SKILLRETBENCH_REPO = "thaki-AI/SkillRetBench"
SKILLRETBENCH_PATTERNS = ["skill_corpus.json", "skillretbench_queries.json", "data/skill_corpus.json",
                          "data/skillretbench_queries.json"]
R3_RAW_URL = "https://raw.githubusercontent.com/Tencent/R3-Skill/main/"
R3_FILES = ("data/test.jsonl", "data/skills_test.jsonl")
SRA_RAW_URL = "https://raw.githubusercontent.com/oneal2000/SR-Agents/main/"
SRA_FILES = ("data/bench/corpus/corpus.json.zip",
             *(f"data/bench/instances/{d}.json" for d in ("theoremqa", "logicbench", "toolqa", "champ", "medcalcbench",
                                                          "bigcodebench")),
             "src/sragents/toolqa/prompts.py", "src/sragents/toolqa/fewshots.py")  # ToolQA's query strings


def hub_fetch(repo: str, patterns: list[str]) -> Callable[[Path, str | None], None]:
    def fetch(dest: Path, revision: str | None) -> None:
        from huggingface_hub import snapshot_download

        snapshot_download(repo_id=repo, repo_type="dataset", local_dir=str(dest), allow_patterns=patterns, revision=revision)

    return fetch


def github_fetch(base_url: str, files: tuple[str, ...]) -> Callable[[Path, str | None], None]:
    def fetch(dest: Path, revision: str | None) -> None:
        url = base_url if revision is None else base_url.replace("/main/", f"/{revision}/")
        for rel in files:
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with urllib.request.urlopen(url + rel, timeout=120) as resp, open(target, "wb") as fh:
                shutil.copyfileobj(resp, fh)
            with open(target, "rb") as fh:
                if fh.read(40).startswith(b"version https://git-lfs"):
                    raise OSError(f"{url + rel} is a Git LFS pointer, not the data")

    return fetch


fetch_skillrouter_core = hub_fetch(SKILLROUTER_CORE_REPO, SKILLROUTER_CORE_PATTERNS)


RELEASES = {
    "skillrouter_core": Release(
        "skillrouter_core", "skillrouter-eval-core", fetch_skillrouter_core,
        "on a machine with internet: `python -m skillrouter.data.download skillrouter_core --dest DIR` (or the "
        "release's scripts/download_eval_data.sh), copy DIR here and pass data.root=DIR"),
    "r3_skill": Release(
        "r3_skill", "r3-skill", github_fetch(R3_RAW_URL, R3_FILES),
        "`git clone https://github.com/Tencent/R3-Skill DIR` (with git-lfs if its data is LFS-tracked) "
        "and pass data.root=DIR"),
    "skillret": Release(
        "skillret", "skillret", hub_fetch(SKILLRET_REPO, SKILLRET_PATTERNS),
        "on a machine with internet: `python -m skillrouter.data.download skillret --revision REV --dest DIR` "
        "(REV = your data.revision), copy DIR here and pass data.root=DIR"),
    "sra_bench": Release(
        "sra_bench", "sra-bench", github_fetch(SRA_RAW_URL, SRA_FILES),
        "`git clone https://github.com/oneal2000/SR-Agents DIR` (with git-lfs for data/bench) and pass data.root=DIR"),
    "skillretbench": Release(
        "skillretbench", "skillretbench", hub_fetch(SKILLRETBENCH_REPO, SKILLRETBENCH_PATTERNS),
        "on a machine with internet: `python -m skillrouter.data.download skillretbench --dest DIR`, copy DIR here "
        "and pass data.root=DIR"),
}


def ensure_release(name: str, data_dir: str | Path, revision: str | None = None) -> Path:
    """The release's folder under ``data_dir`` (one per pinned ``revision``), downloading it first if it is
    not there yet. Lock-free: each downloader fills its own temporary folder and renames it into place; a
    loser of the race finds the winner's complete copy and discards its own."""
    release = RELEASES[name]
    final = Path(data_dir) / (release.folder if revision is None else f"{release.folder}@{revision}")
    if (final / COMPLETE).exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{release.folder}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        try:
            release.fetch(tmp, revision)
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
    parser.add_argument("--revision", default=None, help="the release revision to pin (SkillRet: its data.revision)")
    args = parser.parse_args()
    args.dest.mkdir(parents=True, exist_ok=True)
    RELEASES[args.release].fetch(args.dest, args.revision)
    print(f"{args.release}: downloaded; use data.root={args.dest.resolve()}")


if __name__ == "__main__":
    main()
