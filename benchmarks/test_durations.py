"""How long the README's test command takes, and where the time goes: runs ``bash .ci/run`` (exactly what CI runs:
the venv, the system packages, Harbor's environment, the SLURM cluster, ``lint-imports``, the tests on two workers),
records its wall time, and writes pytest's ``--durations`` report (every phase of a test over 1 s) with each file's
total to reports/perf/test_durations.{json,md}. Run it in a fresh clone on a quiet machine to get CI's figure.

    python benchmarks/test_durations.py
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PERF, ROOT, write_figures  # noqa: E402

DURATION = re.compile(r"^([\d.]+)s (call|setup|teardown)\s+(\S+)$")
SUMMARY = re.compile(r"^=* ?(.*(?:passed|failed).*) in ([\d.]+)s")


def main() -> None:
    log = PERF / "test_durations.log"
    PERF.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        code = subprocess.run(["bash", ".ci/run"], cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT,
                              env={**os.environ, "CI": "true"}).returncode
    wall = round(time.perf_counter() - t0, 1)
    lines = log.read_text(errors="replace").splitlines()
    tests, files = [], defaultdict(float)
    summary, pytest_s = "", None
    for line in lines:
        if m := DURATION.match(line.strip()):
            seconds, phase, test = float(m.group(1)), m.group(2), m.group(3)
            tests.append((seconds, phase, test))
            files[test.split("::")[0]] += seconds
        elif m := SUMMARY.match(line.strip()):
            summary, pytest_s = m.group(1), float(m.group(2))
    figures = {"exit status": code, "wall_s (.ci/run: setup and tests)": wall, "wall_min": round(wall / 60, 1),
               "pytest_s": pytest_s, "summary": summary, "longest test (s)": max((t[0] for t in tests), default=None),
               "seconds per file (phases over 1 s)": {f: round(s, 1) for f, s in sorted(files.items(), key=lambda kv: -kv[1])},
               "durations (phases over 1 s)": {f"{test} ({phase})": s for s, phase, test in sorted(tests, reverse=True)}}
    write_figures("test_durations", figures, "python benchmarks/test_durations.py (CI=true bash .ci/run)")
    log.unlink()
    sys.exit(code)


if __name__ == "__main__":
    main()
