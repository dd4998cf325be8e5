"""Line-numbered JSONL reading (plain or gzip) and atomic JSONL/JSON writing."""
from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

from .types import DataError

_SURROGATE_LO, _SURROGATE_HI = "\udc80", "\udcff"


def _open_bytes(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _field_with_bad_bytes(record: Any, prefix: str = "") -> str | None:
    """Find the (dotted) field whose string holds undecodable bytes, to name it in the error."""
    if isinstance(record, str):
        return prefix or "<value>" if any(_SURROGATE_LO <= c <= _SURROGATE_HI for c in record) else None
    if isinstance(record, dict):
        items: Iterable = record.items()
    elif isinstance(record, list):
        items = enumerate(record)
    else:
        return None
    for key, value in items:
        found = _field_with_bad_bytes(value, f"{prefix}.{key}" if prefix else str(key))
        if found:
            return found
    return None


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, record)``; raise :class:`DataError` naming the line on any defect.

    Non-UTF-8 bytes are decoded with ``surrogateescape`` first so the error can name the field
    that holds them rather than only the line.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(str(path), None, None, "file not found")
    with _open_bytes(path) as fh:
        try:
            for lineno, raw in enumerate(fh, start=1):
                if not raw.strip():
                    continue
                text = raw.decode("utf-8", errors="surrogateescape")
                try:
                    record = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise DataError(str(path), lineno, None, f"invalid JSON ({exc.msg} at column {exc.colno})") from None
                if not isinstance(record, dict):
                    raise DataError(str(path), lineno, None, f"expected a JSON object, got {type(record).__name__}")
                bad = _field_with_bad_bytes(record)
                if bad:
                    raise DataError(str(path), lineno, bad, "contains bytes that are not valid UTF-8")
                yield lineno, record
        except (OSError, EOFError) as exc:  # truncated or corrupt gzip
            raise DataError(str(path), None, None, f"cannot read file: {exc}") from None


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write via a temporary file in the same folder and rename, so readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def atomic_write_jsonl(path: str | Path, records: Iterable[Any]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
