"""The stage cache's command line: ``python -m skillrouter.cache [--cache-dir DIR] list|prune|verify``."""
from __future__ import annotations

import argparse
from pathlib import Path

from .store import StageCache, prune


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def main() -> None:
    """``python -m skillrouter.cache [--cache-dir DIR] list|prune|verify ...``"""
    parser = argparse.ArgumentParser(description="Show or prune the stage cache.")
    parser.add_argument("--cache-dir", type=Path, default=Path(".cache/skillrouter"))
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="entries, sizes and the runs that use them")
    p = sub.add_parser("prune", help="remove entries matching all given criteria")
    p.add_argument("--stage")
    p.add_argument("--older-than", type=float, metavar="DAYS")
    p.add_argument("--unused", action="store_true", help="no run directory that used the entry still exists")
    p.add_argument("--all", action="store_true", help="everything, including resumable training work")
    p.add_argument("--dry-run", action="store_true")
    v = sub.add_parser("verify", help="hash every entry against its manifest; quarantine the damaged ones")
    v.add_argument("--stage")
    args = parser.parse_args()
    cache = StageCache(args.cache_dir)
    if args.command == "verify":
        entries = [e for e in cache.entries() if not args.stage or e["stage"] == args.stage]
        for e in entries:
            if e["problem"] and not e["problem"].startswith("manifest"):  # bookkeeping only: the content is checked below
                print(f"{e['stage']}/{e['key']}: {e['problem']} (entry kept)")
            if not cache.check(e["stage"], e["key"], deep=True):
                bad = cache.quarantined[-1]
                print(f"quarantined {e['stage']}/{e['key']}: {bad['problem']} (moved to {bad['moved_to']}; rebuilt on next use)")
        print(f"verified {len(entries)} entries: {len(entries) - len(cache.quarantined)} intact, {len(cache.quarantined)} quarantined")
        return
    if args.command == "list":
        entries = cache.entries()
        for e in entries:
            users = f"{len(e['users'])} runs" + (f" (e.g. {e['users'][-1]})" if e["users"] else "")
            print(f"{e['stage']:<16} {e['key']}  {_human(e['bytes']):>9}  {users}")
            if e["problem"]:
                print(f"  {e['stage']}/{e['key']}: {e['problem']}")
        work = list(cache.root.glob("*/*.work"))
        print(f"{len(entries)} entries, {_human(sum(e['bytes'] for e in entries))}"
              + (f"; {len(work)} interrupted training run(s) resumable" if work else ""))
        return
    removed = prune(cache, stage=args.stage, older_than_days=args.older_than, unused=args.unused,
                    everything=args.all, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for e in removed:
        print(f"{verb} {e['stage']}/{e['key']}")
    print(f"{verb} {len(removed)} entries")


if __name__ == "__main__":
    main()
