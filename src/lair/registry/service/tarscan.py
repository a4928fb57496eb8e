"""The headers of a backup archive, walked before :mod:`tarfile` reads any of them.

Python 3.11.7's ``tarfile`` parses pax headers with a quadratic regex (CVE-2024-6232: one big pax
header of a tampered backup held a restore for 10 s), and it reads links and devices as members. So
:func:`walk` reads every 512-byte header itself, with the upload reader's own parts
(:mod:`lair.registry.service.archive`): a pax or GNU long-name header over ``MAX_EXTENSION_BYTES``
is refused from its block header, a pax header is split by its records' length prefixes (at most
``MAX_PAX_RECORDS``), and every member must be a regular file named once. Only then may
``tarfile`` open the archive: what it parses is known to be small and well formed.
"""

from __future__ import annotations

import gzip
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from lair.errors import Invalid, RegistryError
from lair.registry.service.archive import MAX_EXTENSION_BYTES, checksum_ok, octal, pax_records

__all__ = ["Header", "walk"]

BLOCK = 512
_KINDS = {b"1": "a hard link", b"2": "a symbolic link", b"3": "a device", b"4": "a device", b"6": "a FIFO"}


@dataclass(frozen=True)
class Header:
    """One member: its name and the size of its data."""

    name: str
    size: int


def _invalid(where: str, message: str) -> Invalid:
    return Invalid(message, location=where, hint="restore an archive lair wrote")


def _ustar_name(block: bytes) -> bytes:
    name = block[0:100].split(b"\x00", 1)[0]
    prefix = block[345:500].split(b"\x00", 1)[0] if block[257:263] == b"ustar\x00" else b""
    return prefix + b"/" + name if prefix else name


def _read(f: gzip.GzipFile, n: int, where: str) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise _invalid(where, "the archive is cut short")
    return data


def _extension(f: gzip.GzipFile, size: int, where: str) -> bytes:
    if size > MAX_EXTENSION_BYTES:
        raise _invalid(where, f"an extended header of {size:,} bytes (the limit is {MAX_EXTENSION_BYTES:,})")
    return _read(f, -(-size // BLOCK) * BLOCK, where)[:size]


def _member(block: bytes, pax: dict[str, bytes], long_name: bytes, where: str) -> Header:
    raw = pax.get("path") or long_name or _ustar_name(block)
    name = raw.decode(errors="replace")
    kind = block[156:157]
    if kind in _KINDS:
        raise _invalid(where, f"{name} is {_KINDS[kind]} (a backup holds only regular files)")
    if kind not in b"0\x007":
        raise _invalid(where, f"{name} is not a regular file (type {kind!r})")
    size = octal(block[124:136], "size")
    if "size" in pax:
        value = pax["size"]
        if not value.isdigit() or len(value) > 20:
            raise _invalid(where, f"{name}: a pax size that is not a number")
        size = int(value)
    return Header(name, size)


def _headers(f: gzip.GzipFile, where: str) -> list[Header]:
    out: list[Header] = []
    pax: dict[str, bytes] = {}
    long_name = b""
    while (block := f.read(BLOCK)) and block != bytes(BLOCK):
        if len(block) != BLOCK or not checksum_ok(block):
            raise _invalid(where, "a bad tar header (not an archive lair wrote, or damaged)")
        kind, size = block[156:157], octal(block[124:136], "size")
        if kind in (b"x", b"g"):
            records = pax_records(_extension(f, size, where))
            pax |= records if kind == b"x" else {}
        elif kind in (b"L", b"K"):
            data = _extension(f, size, where).split(b"\x00", 1)[0]
            long_name = data if kind == b"L" else long_name
        else:
            out.append(_member(block, pax, long_name, where))
            f.seek(-(-out[-1].size // BLOCK) * BLOCK, 1)
            pax, long_name = {}, b""
    return out


def walk(path: Path, where: str) -> list[Header]:
    """Every member of the ``.tar.gz`` at ``path``; ``Invalid`` (422) for an extended header
    over the bounds, a link or any other non-regular member, a name given twice, or a damaged
    stream."""
    try:
        with gzip.open(path, "rb") as f:
            found = _headers(f, where)
    except Invalid:
        raise
    except RegistryError as exc:
        raise _invalid(where, exc.reasons[0] if exc.reasons else exc.message) from None
    except (OSError, EOFError, zlib.error) as exc:
        raise _invalid(where, f"cannot be read as .tar.gz ({exc})") from None
    if twice := sorted(n for n, c in Counter(h.name for h in found).items() if c > 1):
        raise _invalid(where, f"members named twice: {twice[:5]}")
    return found
