"""Line-numbered JSONL reading (plain or gzip), whole-file JSON reading, and atomic JSONL/JSON writing."""
from __future__ import annotations

import gzip
import io
import json
import os
import secrets
from pathlib import Path
from typing import Any, Iterable, Iterator

from .types import DataError

_SURROGATE_LO, _SURROGATE_HI = "\ud800", "\udfff"  # undecodable bytes (surrogateescape) or unpaired escapes


def _open_bytes(path: Path):
    """Gzip is decompressed by python-isal (about 1.6x the standard library's speed here), in this thread:
    its threaded reader joins a worker thread on close, and a reader left in an abandoned generator is
    closed by the garbage collector wherever it runs — once inside a starting thread's bootstrap, where that
    join deadlocks on threading's own lock (seen in the loader fuzz test). The standard library is the fallback."""
    if path.suffix != ".gz":
        return open(path, "rb", buffering=1 << 20)
    try:
        from isal import igzip
    except ImportError:
        return io.BufferedReader(gzip.open(path, "rb"), buffer_size=1 << 20)
    return io.BufferedReader(igzip.open(path, "rb"), buffer_size=1 << 20)


def _field_with_bad_bytes(record: Any, prefix: str = "") -> str | None:
    """Find the (dotted) field whose string holds a surrogate (an undecodable byte kept by
    ``surrogateescape``, or an unpaired ``\\udXXX`` escape), to name it in the error."""
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

    Lines are decoded strictly; only a line that holds non-UTF-8 bytes is decoded again with
    ``surrogateescape`` and searched, so the error names the field that holds them.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(str(path), None, None, "file not found")
    with _open_bytes(path) as fh:
        try:
            for lineno, raw in enumerate(fh, start=1):
                if not raw.strip():
                    continue
                try:
                    text, bad_bytes = raw.decode("utf-8"), False
                except UnicodeDecodeError:  # rare: decode losslessly so the error can name the field
                    text, bad_bytes = raw.decode("utf-8", errors="surrogateescape"), True
                try:
                    record = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise DataError(str(path), lineno, None, f"invalid JSON ({exc.msg} at column {exc.colno})") from None
                except RecursionError:
                    raise DataError(str(path), lineno, None, "invalid JSON (nested too deeply)") from None
                if not isinstance(record, dict):
                    raise DataError(str(path), lineno, None, f"expected a JSON object, got {type(record).__name__}")
                if bad_bytes:
                    raise DataError(str(path), lineno, _field_with_bad_bytes(record) or None,
                                    "contains bytes that are not valid UTF-8")
                if "\\ud" in text or "\\uD" in text:  # a paired escape is a real character; an unpaired one is not
                    field = _field_with_bad_bytes(record)
                    if field:
                        raise DataError(str(path), lineno, field, "contains an unpaired surrogate escape (not valid Unicode)")
                yield lineno, record
        except (OSError, EOFError) as exc:  # truncated or corrupt gzip
            raise DataError(str(path), None, None, f"cannot read file: {exc}") from None


def read_json(path: str | Path) -> Any:
    """A whole JSON file a user or a release supplied; any defect is a :class:`DataError` naming it."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(str(path), None, None, "file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(str(path), None, None, f"invalid JSON ({exc})") from None
    except RecursionError:
        raise DataError(str(path), None, None, "invalid JSON (nested too deeply)") from None


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write via a temporary file in the same folder and rename, so readers never see half a file. The file gets the
    permissions any file the user writes gets (0666 less the umask), not ``mkstemp``'s 0600: a lab's shared cache,
    its sweeps' metrics and reports stay readable by the group the umask lets read them."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def atomic_write_jsonl(path: str | Path, records: Iterable[Any]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
