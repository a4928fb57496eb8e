"""A run report folder uploaded as one ``.tar.gz``, read into memory and checked before anything else.

Refused, with the reason: an archive over ``MAX_ARCHIVE_BYTES`` (compressed) or ``MAX_UNPACKED_BYTES``
(unpacked), a truncated or corrupt stream, members that are links, devices or FIFOs, absolute paths or
``..`` (path traversal), more than ``MAX_MEMBERS`` members, and a file named twice. Nothing is ever
written to disk here: the members come back as bytes keyed by their path inside the report folder (a
single top folder, as ``tar -C reports -czf x.tar.gz RUN`` makes, is stripped).
"""

from __future__ import annotations

import io
import tarfile
import zlib
from pathlib import PurePosixPath

from lair.errors import RegistryError

__all__ = ["MAX_ARCHIVE_BYTES", "MAX_MEMBERS", "MAX_UNPACKED_BYTES", "refuse", "unpack"]

MAX_ARCHIVE_BYTES = 16 << 20
"""Largest upload accepted (a report of a few thousand requests is well under 1 MB compressed)."""
MAX_UNPACKED_BYTES = 64 << 20
MAX_MEMBERS = 256


def refuse(status: int, code: str, reasons: list[str]) -> RegistryError:
    """One refusal carrying every reason, as the error envelope's ``reasons``."""
    return RegistryError(status, code, "report refused: " + "; ".join(reasons), reasons=reasons)


def _name(member: tarfile.TarInfo) -> str | None:
    """The member's normalised path, or None when it is not a safe relative path."""
    raw = member.name
    path = PurePosixPath(raw)
    if raw.startswith(("/", "\\")) or path.is_absolute() or ".." in path.parts or "\\" in raw:
        return None
    parts = [p for p in path.parts if p not in ("", ".")]
    return "/".join(parts) if parts else ""


def _check_member(member: tarfile.TarInfo, reasons: list[str]) -> str | None:
    name = _name(member)
    if name is None:
        reasons.append(f"path traversal: member {member.name!r} leaves the report folder")
        return None
    if member.issym() or member.islnk():
        reasons.append(f"link in archive: {member.name!r} -> {member.linkname!r}")
        return None
    if not (member.isfile() or member.isdir()):
        reasons.append(f"special file in archive: {member.name!r}")
        return None
    return name if member.isfile() else None


def _read(data: bytes) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    reasons: list[str] = []
    total = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for i, member in enumerate(tar):
            if i >= MAX_MEMBERS:
                raise refuse(413, "too_large", [f"more than {MAX_MEMBERS} files in the archive"])
            name = _check_member(member, reasons)
            if name is None:
                continue
            total += member.size
            if total > MAX_UNPACKED_BYTES:
                raise refuse(413, "too_large", [f"unpacked report over {MAX_UNPACKED_BYTES >> 20} MiB"])
            if name in files:
                reasons.append(f"file named twice in archive: {name}")
            f = tar.extractfile(member)
            files[name] = f.read() if f is not None else b""
            if len(files[name]) != member.size:
                raise refuse(422, "invalid_archive", [f"truncated archive: {name} is cut short"])
    if reasons:
        raise refuse(422, "invalid_archive", reasons)
    return files


def _strip_top(files: dict[str, bytes]) -> dict[str, bytes]:
    tops = {n.split("/", 1)[0] for n in files}
    if len(tops) == 1 and all("/" in n for n in files):
        return {n.split("/", 1)[1]: b for n, b in files.items()}
    return files


def unpack(data: bytes) -> dict[str, bytes]:
    """The report's files (path -> bytes), or a :class:`RegistryError` with the reasons."""
    if len(data) > MAX_ARCHIVE_BYTES:
        raise refuse(
            413, "too_large", [f"archive of {len(data):,} bytes; the limit is {MAX_ARCHIVE_BYTES:,}"]
        )
    try:
        files = _read(data)
    except RegistryError:
        raise
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        what = (
            "truncated archive"
            if isinstance(exc, EOFError) or "end" in str(exc).lower()
            else "corrupt archive"
        )
        raise refuse(422, "invalid_archive", [f"{what}: {exc}"]) from None
    if not files:
        raise refuse(422, "invalid_archive", ["empty archive: no files"])
    return _strip_top(files)
