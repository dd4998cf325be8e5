"""How long `make setup` and `make harbor` take to install the project's and Harbor's packages: pip, as they did,
against uv, as they do, in one run, each into a fresh venv, each tool's cache warmed by an untimed install first (a
machine that has set up once; both tools download what they lack), both compiling the modules to bytecode (pip does
by default; uv is asked to: without it, where PYTHONDONTWRITEBYTECODE is set, every process compiles what it
imports). torch is installed by pip in both (uv does not look in pip's find-links, where a machine may keep its CPU
wheel) and timed apart. The two environments must hold the same packages at the same versions: a faster install of
something else would be no speed-up.

    python benchmarks/setup_time.py     # -> reports/perf/setup.{json,md}
"""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import ROOT, Timer, write_figures  # noqa: E402

TORCH = re.search(r"pip install -q (torch==\S+)", (ROOT / "Makefile").read_text()).group(1)  # the Makefile's pin


def _run(*command: str | Path) -> float:
    with Timer() as timer:
        subprocess.run([str(c) for c in command], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return round(timer.seconds, 1)


def _venv(python: str, path: Path) -> Path:
    subprocess.run([python, "-m", "venv", str(path)], check=True)
    return path / "bin"


def _packages(bin_dir: Path) -> dict[str, str]:
    """name -> version of what a venv holds (uv's listing: it reads any venv), the installers themselves left out."""
    listing = subprocess.run([str(bin_dir / "uv"), "pip", "list", "--python", str(bin_dir / "python"),
                              "--format", "freeze"], capture_output=True, text=True, check=True).stdout
    pairs = (line.split("==", 1) for line in listing.splitlines() if "==" in line)
    return {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in pairs
            if name.lower() not in {"pip", "uv", "setuptools"}}


def _install_both(python: str, requirements: list[str], scratch: Path, pre: list[str]) -> dict:
    """``requirements`` into two fresh venvs, by pip and by uv (``pre`` by pip first in both), each tool warmed by an
    untimed install into a third and fourth."""
    times: dict[str, float] = {}
    before: dict[str, float] = {}
    held: dict[str, dict[str, str]] = {}
    for tool in ("pip", "uv"):
        for run in ("warm-up", "timed"):
            bin_dir = _venv(python, scratch / f"{tool}-{run}")
            pre_s = _run(bin_dir / "pip", "install", "-q", *pre, "uv")  # uv in both: it lists what each venv holds
            if tool == "pip":
                seconds = _run(bin_dir / "pip", "install", "-q", *requirements)
            else:
                seconds = _run(bin_dir / "uv", "pip", "install", "-q", "--compile-bytecode",
                               "--python", bin_dir / "python", *requirements)
            if run == "timed":
                times[tool], before[f"{tool}: pip install {' '.join([*pre, 'uv'])}"] = seconds, pre_s
                held[tool] = _packages(bin_dir)
    differ = sorted(f"{n}: pip {held['pip'].get(n)}, uv {held['uv'].get(n)}"
                    for n in held["pip"].keys() | held["uv"].keys() if held["pip"].get(n) != held["uv"].get(n))
    return {"pip (s)": times["pip"], "uv (s)": times["uv"], "speed-up": round(times["pip"] / times["uv"], 1),
            "before either (s)": before,
            "packages": len(held["uv"]), "packages that differ": differ or "none"}


def _harbor_python() -> tuple[str, list[str]]:
    """The Python >= 3.12 and the pins `scripts/harbor_env.sh` uses (it finds the one, it declares the other)."""
    script = (ROOT / "scripts" / "harbor_env.sh").read_text()
    pins = re.search(r"^PINS=\((.*)\)$", script, re.M).group(1).replace('"', "").split()
    python = subprocess.run(["bash", str(ROOT / "scripts" / "harbor_env.sh"), "--print-python"], capture_output=True,
                            text=True, check=True).stdout.strip()
    return python, pins


def main() -> None:
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        project = ["-e", f"{ROOT}[dev]"]
        figures["project (.[dev], after torch)"] = _install_both(sys.executable, project, Path(tmp) / "p", [TORCH])
    python, pins = _harbor_python()
    with tempfile.TemporaryDirectory() as tmp:
        figures[f"Harbor ({' '.join(pins)})"] = _install_both(python, pins, Path(tmp) / "h", [])
    write_figures("setup", figures, "python benchmarks/setup_time.py")  # prints them too


if __name__ == "__main__":
    main()
