"""The GPU kit: what a bare GPU machine lacks, packed into parts that each fit one device call
(``benchmarks/gpu_kit.py``), and joined and installed there again (``benchmarks/gpu_check.sh install``). The device
run itself happens only where a session is lent a GPU; these pin the packing and the install it relies on."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_kit import pack  # noqa: E402


def _files(folder: Path, sizes: dict[str, int]) -> list[Path]:
    folder.mkdir()
    for i, (name, size) in enumerate(sizes.items()):
        (folder / name).write_bytes(bytes((i * 31 + j) % 251 for j in range(size)))
    return [folder / name for name in sizes]


def test_pack_fits_every_part_and_cuts_only_what_cannot_fit(tmp_path):
    files = _files(tmp_path / "in", {"a.whl": 5, "big.whl": 19, "c.whl": 3, "d.gz": 7})
    manifest = pack(files, tmp_path / "kit", limit=8)
    sizes = {name: sum((tmp_path / "kit" / name / f).stat().st_size for f in part["files"])
             for name, part in manifest["parts"].items()}
    assert all(size <= 8 for size in sizes.values())
    assert sum(sizes.values()) == 5 + 19 + 3 + 7  # nothing lost, nothing doubled
    assert list(manifest["pieces"]) == ["big.whl"]  # only the file over the limit is cut, in order
    pieces = manifest["pieces"]["big.whl"]
    assert [p.rsplit(".piece", 1)[1] for p in pieces] == ["0", "1", "2"]
    assert b"".join((tmp_path / "kit" / p).read_bytes() for p in pieces) == (tmp_path / "in" / "big.whl").read_bytes()
    assert len(manifest["parts"]) == 5  # first fit, largest first: 8 | 8 | 7 | 5+3 | 3 (the last piece)


def _wheel(folder: Path) -> Path:
    """A minimal pure-Python wheel (the format pip installs), large enough to be cut into pieces."""
    path = folder / "tinykit-0.1-py3-none-any.whl"
    body = "VALUE = 42\n" + "# padding\n" * 200
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("tinykit/__init__.py", body)
        zf.writestr("tinykit-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinykit\nVersion: 0.1\n")
        zf.writestr("tinykit-0.1.dist-info/WHEEL",
                    "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr("tinykit-0.1.dist-info/RECORD", "tinykit/__init__.py,,\ntinykit-0.1.dist-info/METADATA,,\n"
                    "tinykit-0.1.dist-info/WHEEL,,\ntinykit-0.1.dist-info/RECORD,,\n")
    return path


def _check(steps: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "out"),
           "GPU_KIT_CARRIED": str(tmp_path / "kit"), "GPU_KIT_DIR": str(tmp_path / "installed")}
    return subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), *steps], env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def kit(tmp_path) -> dict:
    (tmp_path / "in").mkdir()
    data = tmp_path / "in" / "skills-sample.jsonl.gz"
    data.write_bytes(os.urandom(700))
    manifest = pack([_wheel(tmp_path / "in"), data], tmp_path / "kit", limit=400)
    (tmp_path / "kit" / "MANIFEST.json").write_text(json.dumps(manifest))
    return manifest


def test_install_waits_for_every_part_then_joins_and_installs(tmp_path, kit):
    assert len(kit["parts"]) >= 3 and set(kit["pieces"]) == {"tinykit-0.1-py3-none-any.whl", "skills-sample.jsonl.gz"}
    held = tmp_path / "held"
    (tmp_path / "kit" / "part2").rename(held)  # a part not carried yet
    early = _check(["receive", "install"], tmp_path)
    assert "still to carry: part2" in early.stdout
    assert "parts not carried yet: part2" in early.stdout
    assert not (tmp_path / "installed" / "installed").exists()

    held.rename(tmp_path / "kit" / "part2")
    done = _check(["install"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "joined 2 split files; 1 wheels" in done.stdout
    site = tmp_path / "installed" / "site"
    assert subprocess.run([sys.executable, "-c", "import tinykit; print(tinykit.VALUE)"], env={"PYTHONPATH": str(site)},
                          capture_output=True, text=True).stdout.strip() == "42"
    assert (tmp_path / "installed" / "data" / "skills-sample.jsonl.gz").read_bytes() == \
        (tmp_path / "in" / "skills-sample.jsonl.gz").read_bytes()
    assert "== install done" in (tmp_path / "out" / "gpu_check_install.txt").read_text()
