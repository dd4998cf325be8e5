"""``python -m skillrouter.tracking sync SWEEP``: see :mod:`skillrouter.tracking.sync`."""
from __future__ import annotations

import sys

from .sync import main

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "sync":
        print("usage: python -m skillrouter.tracking sync SWEEP [--dry-run]", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[2:]))
