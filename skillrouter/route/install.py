"""``route install``: a task's top-k skills written as SKILL.md folders into an agent's skills directory (the
downstream study's injection, by hand). Folders are named as the downstream sets name them (the Agent Skills
rule, clashes numbered); the set is written aside and moved in, so a failure leaves the directory as it was."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ..agents.skill_sets import place, write_set
from .router import Hit, Router


def install(router: Router, task: str, k: int, into: Path, replace: bool = False) -> list[tuple[Hit, str]]:
    """Write the top ``k`` skills for ``task`` into ``into``; returns each hit with its folder name. An existing
    folder of the same name is an error unless ``replace``."""
    hits = router.route([task], k)[0]
    snap = router.snapshot
    placed = place([snap.skills[h.id] for h in hits])
    into.mkdir(parents=True, exist_ok=True)
    taken = [p.folder for p in placed if (into / p.folder).exists()]
    if taken and not replace:
        raise FileExistsError(f"{into}: already has {', '.join(taken)}; pass --replace to overwrite them")
    with tempfile.TemporaryDirectory(dir=into, prefix=".install-") as tmp:
        write_set(Path(tmp) / "set", placed, router.folder.root if router.folder else _pool_tree(router))
        for p in placed:
            target = into / p.folder
            if target.exists():
                shutil.rmtree(target)
            (Path(tmp) / "set" / p.folder).rename(target)
    return [(h, p.folder) for h, p in zip(hits, placed)]


def _pool_tree(router: Router) -> Path | None:
    """The cell's pool folder when its pool was read from a SKILL.md tree (its folders are copied whole)."""
    pool = router.cell.graph.data.get("pool")
    return Path(pool) if isinstance(pool, str) and Path(pool).is_dir() else None
