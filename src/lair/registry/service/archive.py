"""A run report folder uploaded as one ``.tar.gz``, read as a stream under hard budgets.

The reader is lair's own (512-byte ustar headers, pax records split by their length prefix, GNU long
names), not :mod:`tarfile`: no byte of an upload ever reaches ``tarfile``. That is what covers the
Pythons whose ``tarfile`` parses pax headers with a quadratic regex (CVE-2024-6232, Python 3.11.7
among them: a 256-byte upload holding a 100,000-digit pax header took 20 s of one worker); here a
pax record is read by its decimal length, in one pass, and a pax or GNU long-name header over
``MAX_EXTENSION_BYTES`` is refused from its block header, before its payload is decompressed.

Budgets, counted for every member, skipped ones (directories, refused ones) included:

- ``MAX_ARCHIVE_BYTES`` compressed (the upload itself);
- ``MAX_UNPACKED_BYTES`` declared by the headers' sizes, checked before a member's data is read;
- ``MAX_STREAM_BYTES`` decompressed and read (headers, data, padding): gzip is inflated through
  :func:`zlib.decompressobj` with ``max_length``, never more than one buffer ahead, so a gzip bomb
  allocates nothing beyond the budget;
- ``MAX_EXTENSION_BYTES`` per pax or GNU long-name header, ``MAX_EXTENSION_TOTAL`` of them in all,
  ``MAX_PAX_RECORDS`` records in one pax header; ``MAX_MEMBERS`` members and ``MAX_HEADERS`` headers
  in all;
- ``DEADLINE_S`` of wall time for the whole archive.

Refused as well, with the reason: a truncated or corrupt stream (a bad header checksum, an unknown
encoding), members that are links, devices, FIFOs or sparse files, absolute paths or ``..`` (path
traversal), and a file named twice. Nothing is ever written to disk here: the members come back as
bytes keyed by their path inside the report folder (a single top folder, as ``tar -C reports -czf
x.tar.gz RUN`` makes, is stripped).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath

from lair.errors import Invalid, TooLarge

__all__ = [
    "DEADLINE_S",
    "MAX_ARCHIVE_BYTES",
    "MAX_EXTENSION_BYTES",
    "MAX_EXTENSION_TOTAL",
    "MAX_HEADERS",
    "MAX_MEMBERS",
    "MAX_PAX_RECORDS",
    "MAX_STREAM_BYTES",
    "MAX_UNPACKED_BYTES",
    "Member",
    "checksum_ok",
    "members",
    "octal",
    "pax_records",
    "refuse",
    "unpack",
]

MAX_ARCHIVE_BYTES = 16 << 20
"""Largest upload accepted (a report of a few thousand requests is well under 1 MB compressed)."""
MAX_UNPACKED_BYTES = 64 << 20
"""Sum of the sizes every member's header declares."""
MAX_MEMBERS = 256
MAX_HEADERS = 4 * MAX_MEMBERS
"""Headers in all: each member's own, plus at most a pax and a long-name header or two."""
MAX_EXTENSION_BYTES = 64 << 10
"""Largest pax ('x', 'g') or GNU long-name ('L', 'K') header (a path is at most a few KiB)."""
MAX_PAX_RECORDS = 64
"""Records of one pax header (a writer puts a dozen: path, size, times, owner, a few xattrs)."""
MAX_EXTENSION_TOTAL = 1 << 20
"""pax and GNU long-name header bytes of the whole archive (256 members' long paths fit many times)."""
MAX_NAME_BYTES = 4096
MAX_STREAM_BYTES = MAX_UNPACKED_BYTES + MAX_HEADERS * (512 + MAX_EXTENSION_BYTES // 16)
"""Decompressed bytes read in all: the declared data, every header block and the padding."""
DEADLINE_S = 10.0
"""Wall time for reading one archive (a real report takes milliseconds)."""

BLOCK = 512
_STEP = 1 << 16
"""Bytes inflated at most per call (the only buffer a bomb can fill)."""

_FILE, _DIR = b"0\x007", b"5"
_LINKS = {b"1": "hard link", b"2": "symbolic link"}
_PAX, _GNU_NAME, _GNU_LINK = b"xg", b"L", b"K"


def refuse(code: str, reasons: list[str]) -> Invalid | TooLarge:
    """One refusal carrying every reason, as the error envelope's ``reasons``: ``too_large`` (413) when
    a size budget was passed, else 422."""
    kind = TooLarge if code == "too_large" else Invalid
    return kind("report refused: " + "; ".join(reasons), code=code, reasons=reasons)


def _corrupt(why: str) -> Invalid | TooLarge:
    return refuse("invalid_archive", [f"corrupt archive: {why}"])


def _truncated(why: str) -> Invalid | TooLarge:
    return refuse("invalid_archive", [f"truncated archive: {why}"])


def _too_large(why: str) -> Invalid | TooLarge:
    return refuse("too_large", [why])


class _Inflater:
    """The decompressed tar stream of a gzip upload, read by exact sizes under the stream budget and
    the deadline (concatenated gzip members are one stream, as gzip reads them)."""

    def __init__(self, data: bytes, deadline: float) -> None:
        self._data, self._pos, self._deadline = memoryview(data), 0, deadline
        self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._buf = bytearray()
        self.read_total = 0
        if data[:2] != b"\x1f\x8b":
            raise _corrupt("not gzip (a report is uploaded as .tar.gz)")

    def _more(self) -> bool:
        """Inflate at most ``_STEP`` more bytes into the buffer; False at the end of the input."""
        if time.monotonic() > self._deadline:
            raise _too_large(f"archive not read within {DEADLINE_S:g} s")
        if self._z.eof:
            rest = bytes(self._z.unused_data) + bytes(self._data[self._pos :])
            self._pos = len(self._data)
            if not rest.strip(b"\x00"):
                return False
            if rest[:2] != b"\x1f\x8b":
                raise _corrupt("trailing bytes after the gzip stream")
            self._data, self._pos = memoryview(rest), 0
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        tail: bytes | memoryview = self._z.unconsumed_tail
        if not tail and self._pos >= len(self._data):
            if self._z.eof:
                return False
            raise _truncated("the gzip stream is cut short")
        if not tail:
            tail, self._pos = self._data[self._pos : self._pos + _STEP], self._pos + _STEP
        try:
            out = self._z.decompress(tail, _STEP)
        except zlib.error as exc:
            raise _corrupt(f"gzip: {exc}") from None
        self._buf += out
        return True

    def read(self, n: int) -> bytes:
        """Exactly ``n`` bytes, or b"" at a clean end of the stream before any of them."""
        self.read_total += n
        if self.read_total > MAX_STREAM_BYTES:
            raise _too_large(f"unpacked report over {MAX_STREAM_BYTES >> 20} MiB read")
        while len(self._buf) < n:
            if not self._more():
                if not self._buf:
                    return b""
                raise _truncated(f"{n - len(self._buf)} bytes missing at the end")
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def skip(self, n: int) -> None:
        while n > 0:
            step = min(n, _STEP)
            if len(self.read(step)) != step:
                raise _truncated("a member's data is cut short")
            n -= step


@dataclass(frozen=True)
class Member:
    """One entry of the archive: its path as given, its type flag, declared size and, for a regular
    file, its bytes (b"" for every other type: their data is never kept)."""

    name: str
    type: bytes
    size: int
    data: bytes
    linkname: str = ""


def octal(field: bytes, what: str) -> int:
    if field[:1] and field[0] & 0x80:  # GNU base-256: a big-endian number in the remaining bytes
        if field[0] != 0x80:
            raise _corrupt(f"negative {what} in a header")
        return int.from_bytes(field[1:], "big")
    digits = field.split(b"\x00", 1)[0].strip(b" ")
    if not digits:
        return 0
    if not all(0x30 <= c <= 0x37 for c in digits):
        raise _corrupt(f"{what} is not an octal number in a header")
    return int(digits, 8)


def checksum_ok(block: bytes) -> bool:
    want = octal(block[148:156], "checksum")
    unsigned = sum(block[:148]) + 8 * 0x20 + sum(block[156:])
    signed = unsigned - 2 * sum(b for b in block[:148] + block[156:] if b > 127)
    return want in (unsigned, signed)


def _text(raw: bytes, what: str) -> str:
    if b"\x00" in raw:
        raise _corrupt(f"NUL in a {what}")
    if len(raw) > MAX_NAME_BYTES:
        raise _too_large(f"{what} of {len(raw):,} bytes; the limit is {MAX_NAME_BYTES:,}")
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise _corrupt(f"{what} is not UTF-8: {raw[:80]!r}") from None


def pax_records(payload: bytes) -> dict[str, bytes]:
    """pax records ``"<len> <key>=<value>\\n"``, each taken by its length prefix (no regex), in one
    pass; more than ``MAX_PAX_RECORDS`` of them are refused (each was a dict entry and a copy)."""
    out: dict[str, bytes] = {}
    pos, stop, count = 0, len(payload.rstrip(b"\x00")), 0
    while pos < stop:
        count += 1
        if count > MAX_PAX_RECORDS:
            raise _too_large(f"pax header of more than {MAX_PAX_RECORDS} records")
        space = payload.find(b" ", pos, pos + 12)
        digits = payload[pos:space] if space > pos else b""
        if not digits.isdigit():
            raise _corrupt("a pax record without its length")
        end = pos + int(digits)
        record = payload[space + 1 : end]
        if end > len(payload) or end <= space + 1 or not record.endswith(b"\n") or b"=" not in record:
            raise _corrupt("a pax record of the wrong length")
        key, _, value = record[:-1].partition(b"=")
        out[key.decode(errors="replace")] = value
        pos = end
    return out


def _pax_size(value: bytes) -> int:
    if not value.isdigit() or len(value) > 20:
        raise _corrupt(f"pax size {value[:40]!r} is not a number")
    return int(value)


class _Reader:
    """Headers and data in order, every budget counted as it goes."""

    def __init__(self, data: bytes) -> None:
        self.stream = _Inflater(data, time.monotonic() + DEADLINE_S)
        self.headers = 0
        self.declared = 0
        self.extensions = 0

    def _block(self) -> bytes | None:
        block = self.stream.read(BLOCK)
        if not block or block == bytes(BLOCK):
            return None  # the end-of-archive marker (or a clean end at a block boundary)
        self.headers += 1
        if self.headers > MAX_HEADERS:
            raise _too_large(f"more than {MAX_HEADERS} headers in the archive")
        if not checksum_ok(block):
            raise _corrupt("bad header checksum (not a tar archive)")
        return block

    def _declare(self, size: int) -> None:
        self.declared += size
        if self.declared > MAX_UNPACKED_BYTES:
            raise _too_large(f"unpacked report over {MAX_UNPACKED_BYTES >> 20} MiB")

    def _payload(self, size: int) -> bytes:
        padded = -(-size // BLOCK) * BLOCK
        data = self.stream.read(padded)
        if len(data) != padded:
            raise _truncated("a header's data is cut short")
        return data[:size]

    def _extension(self, kind: bytes, size: int) -> bytes:
        label = "pax" if kind in _PAX else "GNU long-name"
        if size > MAX_EXTENSION_BYTES:
            raise _too_large(f"{label} header of {size:,} bytes; the limit is {MAX_EXTENSION_BYTES:,}")
        self.extensions += size
        if self.extensions > MAX_EXTENSION_TOTAL:
            raise _too_large(f"{label} headers over {MAX_EXTENSION_TOTAL >> 10} KiB in all")
        return self._payload(size)

    def __iter__(self) -> Iterator[Member]:
        pax: dict[str, bytes] = {}
        long_name = long_link = b""
        while (block := self._block()) is not None:
            kind, size = block[156:157], octal(block[124:136], "size")
            if kind in _PAX + _GNU_NAME + _GNU_LINK:
                payload = self._extension(kind, size)
                if kind == b"x":
                    pax |= pax_records(payload)
                elif kind == b"g":
                    pax_records(payload)  # checked, then ignored: it names nothing lair reads
                elif kind == _GNU_NAME:
                    long_name = payload.split(b"\x00", 1)[0]
                else:
                    long_link = payload.split(b"\x00", 1)[0]
                continue
            if "size" in pax:
                size = _pax_size(pax["size"])
            yield self._member(block, kind, size, pax, long_name, long_link)
            pax, long_name, long_link = {}, b"", b""

    def _member(
        self, block: bytes, kind: bytes, size: int, pax: dict[str, bytes], long_name: bytes, link: bytes
    ) -> Member:
        raw = pax.get("path") or long_name or _ustar_name(block)
        name = _text(raw, "member name")
        linkname = _text(pax.get("linkpath") or link or block[157:257].split(b"\x00", 1)[0], "link name")
        self._declare(size)
        if kind in _FILE:  # a regular file (an old one named with a final "/" is a directory)
            data = self._payload(size)
            return (
                Member(name, _DIR, size, b"", linkname)
                if name.endswith("/")
                else Member(name, b"0", size, data, linkname)
            )
        if size and kind not in b"0123456\x007":  # links, devices, FIFOs, directories carry none
            self.stream.skip(-(-size // BLOCK) * BLOCK)
        return Member(name, kind, size, b"", linkname)


def _ustar_name(block: bytes) -> bytes:
    name = block[0:100].split(b"\x00", 1)[0]
    if block[257:263] == b"ustar\x00":  # POSIX ustar: a prefix (GNU's magic keeps other fields there)
        prefix = block[345:500].split(b"\x00", 1)[0]
        if prefix:
            return prefix + b"/" + name
    return name


def members(data: bytes) -> Iterator[Member]:
    """Every entry of the gzip-compressed tar ``data``, under the budgets (an :class:`~lair.errors.Invalid`
    once one is spent, or when the stream is corrupt or cut short)."""
    if len(data) > MAX_ARCHIVE_BYTES:
        raise _too_large(f"archive of {len(data):,} bytes; the limit is {MAX_ARCHIVE_BYTES:,}")
    for count, m in enumerate(_Reader(data), 1):
        if count > MAX_MEMBERS:
            raise _too_large(f"more than {MAX_MEMBERS} files in the archive")
        yield m


def _name(raw: str) -> str | None:
    """The member's normalised path, or None when it is not a safe relative path."""
    path = PurePosixPath(raw)
    if raw.startswith(("/", "\\")) or path.is_absolute() or ".." in path.parts or "\\" in raw:
        return None
    parts = [p for p in path.parts if p not in ("", ".")]
    return "/".join(parts) if parts else ""


def _check_member(m: Member, reasons: list[str]) -> str | None:
    name = _name(m.name)
    if name is None:
        reasons.append(f"path traversal: member {m.name!r} leaves the report folder")
        return None
    if m.type in _LINKS:
        reasons.append(f"link in archive: {m.name!r} -> {m.linkname!r}")
        return None
    if m.type not in (b"0", _DIR):
        reasons.append(f"special file in archive: {m.name!r}")
        return None
    return name if m.type == b"0" else None


def _read(data: bytes) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    reasons: list[str] = []
    for m in members(data):
        name = _check_member(m, reasons)
        if name is None:
            continue
        if name in files:
            reasons.append(f"file named twice in archive: {name}")
        files[name] = m.data
    if reasons:
        raise refuse("invalid_archive", reasons)
    return files


def _strip_top(files: dict[str, bytes]) -> dict[str, bytes]:
    tops = {n.split("/", 1)[0] for n in files}
    if len(tops) == 1 and all("/" in n for n in files):
        return {n.split("/", 1)[1]: b for n, b in files.items()}
    return files


def unpack(data: bytes) -> dict[str, bytes]:
    """The report's files (path -> bytes), or an :class:`~lair.errors.Invalid` with the reasons."""
    files = _read(data)
    if not files:
        raise refuse("invalid_archive", ["empty archive: no files"])
    return _strip_top(files)
