"""Shared benchmark helpers: where the real sample lives, and writing figures to reports/perf/."""
from __future__ import annotations

import json
import platform
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PERF = ROOT / "reports" / "perf"
SHARED_DATA = ROOT.parent / "shared" / "data"


def write_figures(name: str, figures: dict, command: str) -> None:
    """``reports/perf/<name>.json`` plus a one-table Markdown rendering of the same figures."""
    PERF.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "command": command, "machine": platform.platform(), "date": time.strftime("%Y-%m-%d"),
               "figures": figures}
    (PERF / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n")
    rows = "\n".join(f"| {k} | {v} |" for k, v in figures.items())
    (PERF / f"{name}.md").write_text(f"# {name}\n\n`{command}` on {payload['machine']}\n\n| figure | value |\n|---|---|\n{rows}\n")
    print(json.dumps(payload, indent=2))


class Timer:
    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = round(time.perf_counter() - self.t0, 3)
