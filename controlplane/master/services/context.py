"""The model definition: a list of v1File entries in, a tar.gz out (reference §2.2).

Everything is checked before anything is decoded or written: the entry count, the budget (each
entry's header plus its decoded size), and the names and link targets under the rules the CLI and
the agent share (``controlplane.common.context_names``). Types: 48 regular file, 53 directory,
50 symlink (its ``content`` is the base64 of the target, as in Determined's archive items).
CPU-heavy (base64, gzip): callers run it in a worker thread.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import tarfile
from typing import Any

from controlplane.common import context_names as names
from controlplane.master.errors import BadRequest, PayloadTooLarge

MAX_CONTEXT_BYTES = names.MAX_CONTEXT_BYTES
FILE, SYMLINK, DIRECTORY = 48, 50, 53
KINDS = {FILE: names.FILE, DIRECTORY: names.DIRECTORY, SYMLINK: names.SYMLINK}
_INT64 = 2**63


def _field(entry: Any, key: str, default: Any = None) -> Any:
    """v1File as a dict (raw JSON) or a typed struct."""
    if isinstance(entry, dict):
        return entry.get(key, default)
    return getattr(entry, key, default)


def _decoded_size(content: str) -> int:
    return len(content) * 3 // 4 - content[-2:].count("=")


def _int(value: Any, where: str, default: int) -> int:
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except (TypeError, ValueError) as e:
        raise BadRequest(f"{where}: must be an integer, got {str(value)[:40]!r}") from e
    if not -_INT64 <= number < _INT64:
        raise BadRequest(f"{where}: integer out of range (must fit in 64 bits)")
    return number


def _check(entries: list[Any], limit: int) -> list[tuple[Any, names.Entry, int]]:
    """Every entry checked, nothing decoded: (entry, its name record, kind)."""
    if len(entries) > names.MAX_ENTRIES:
        raise BadRequest(f"modelDefinition: the context has {len(entries)} entries, over the limit of "
                         f"{names.MAX_ENTRIES}")
    checked = []
    total = 0
    for i, entry in enumerate(entries):
        if entry is None or isinstance(entry, (str, int, float, list)):
            raise BadRequest(f"modelDefinition[{i}]: must be an object")
        kind = _field(entry, "type", FILE)
        if isinstance(kind, bool) or kind not in KINDS:
            raise BadRequest(f"modelDefinition[{i}].type: {_field(entry, 'path')!r} is of type {kind!r}; "
                             "only regular files (48), directories (53) and symlinks (50) are allowed")
        content = _field(entry, "content") or ""
        if not isinstance(content, str):
            raise BadRequest(f"modelDefinition[{i}].content: must be a base64 string")
        target = ""
        if kind == SYMLINK:
            target = _decode(content, i, _field(entry, "path")).decode("utf-8", "replace")
        total += names.entry_cost(_decoded_size(content) if kind == FILE else len(target))
        if total > limit:
            raise PayloadTooLarge(f"modelDefinition: the context is larger than {limit} bytes "
                                  f"(each of its {len(entries)} entries counts {names.ENTRY_COST} bytes "
                                  "for its header, plus its content)")
        checked.append((entry, names.Entry(_field(entry, "path"), KINDS[kind], target), kind))
    try:
        names.check_entries(record for _, record, _ in checked)
    except names.BadContextEntry as e:
        where = "modelDefinition" if e.index is None else f"modelDefinition[{e.index}].path"
        raise BadRequest(f"{where}: {e}" if e.name else f"{where}: {e.problem}") from e
    return checked


def _decode(content: str, index: int, path: Any) -> bytes:
    try:
        return base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError) as e:
        raise BadRequest(f"modelDefinition[{index}].content: not valid base64 ({path!r})") from e


def build_archive(entries: Any, limit: int | None = None) -> tuple[bytes, str]:
    """Returns (tar.gz bytes, sha256 hex). Raises BadRequest/PayloadTooLarge naming the entry.
    ``limit``: the bytes the entries may add up to (a context's 95 MiB by default)."""
    if entries is None:
        entries = []
    if not isinstance(entries, (list, tuple)):
        raise BadRequest("modelDefinition: must be a list of files")
    checked = _check(list(entries), MAX_CONTEXT_BYTES if limit is None else limit)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1, format=tarfile.PAX_FORMAT) as tar:
        for i, (entry, record, kind) in enumerate(checked):
            info = tarfile.TarInfo(record.name)
            info.mode = _int(_field(entry, "mode"), f"modelDefinition[{i}].mode", 0o644) & 0o7777
            info.mtime = _int(_field(entry, "mtime"), f"modelDefinition[{i}].mtime", 0)
            if kind == DIRECTORY:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == SYMLINK:
                info.type = tarfile.SYMTYPE
                info.linkname = record.target
                tar.addfile(info)
            else:
                data = _decode(_field(entry, "content") or "", i, record.name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    blob = buf.getvalue()
    return blob, hashlib.sha256(blob).hexdigest()
