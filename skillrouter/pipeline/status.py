"""The state of a grid read from its run directories: ``python -m skillrouter.pipeline.status DIR``."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

HEADLINE = ("hit@1", "mrr@10", "r@10")


def run_dirs(sweep_dir: Path) -> list[Path]:
    return sorted((p.parent for p in sweep_dir.rglob("status.json")), key=lambda p: str(p))


def cell_status(run_dir: Path) -> dict[str, Any]:
    """Status from ``metrics.json`` when the cell ended, else from ``status.json`` (running or killed)."""
    metrics_file, status_file = run_dir / "metrics.json", run_dir / "status.json"
    data = json.loads((metrics_file if metrics_file.exists() else status_file).read_text())
    stages = data.get("stages", {})
    return {
        "run": str(run_dir), "status": data.get("status", "unknown"), "choices": data.get("choices", {}),
        "error": data.get("error"), "metrics": {k: data.get("metrics", {}).get(k) for k in HEADLINE},
        "stages_reused": sum(1 for s in stages.values() if s.get("cached")), "stages": len(stages),
        "seconds": data.get("seconds"),
    }


def grid_status(sweep_dir: Path) -> list[dict[str, Any]]:
    return [cell_status(d) for d in run_dirs(sweep_dir)]


def format_status(rows: list[dict[str, Any]]) -> str:
    lines = [f"{len(rows)} cells: " + ", ".join(f"{sum(r['status'] == s for r in rows)} {s}"
                                               for s in sorted({r["status"] for r in rows}))]
    reused = sum(r["stages_reused"] for r in rows)
    lines.append(f"stages reused from cache: {reused} of {sum(r['stages'] for r in rows)}")
    for r in rows:
        cell = " ".join(f"{k}={v}" for k, v in sorted(r["choices"].items()))
        detail = r["error"] if r["status"] == "failed" else " ".join(
            f"{k}={v:.4f}" for k, v in r["metrics"].items() if v is not None)
        lines.append(f"  [{r['status']:>9}] {cell}  {detail}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="Print the state of a grid (a multirun directory).")
    parser.add_argument("sweep_dir", type=Path)
    print(format_status(grid_status(parser.parse_args().sweep_dir)))


if __name__ == "__main__":
    main()
