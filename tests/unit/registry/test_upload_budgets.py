"""The upload reader's budgets: each hostile archive is refused from its headers within 1 s, by lair's
own tar reader (tarfile never parses an upload: it takes 20 s over the 100,000-digit pax header), and
real archives of every tar format read back exactly as tarfile reads them."""

from __future__ import annotations

import io
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from lair.errors import RegistryError
from lair.registry.service import archive
from lair.registry.service.archive import MAX_EXTENSION_BYTES, MAX_MEMBERS, unpack
from lair.testing.uploads import HOSTILE, pax_digits


def _refused(data: bytes) -> tuple[RegistryError, float]:
    start = time.monotonic()
    with pytest.raises(RegistryError) as refused:
        unpack(data)
    return refused.value, time.monotonic() - start


@pytest.mark.parametrize("name", HOSTILE)
def test_each_hostile_archive_is_refused_within_a_second(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    build, status, needle = HOSTILE[name]
    data = build()
    monkeypatch.setattr(tarfile.TarFile, "next", _forbidden)  # the reader must not fall back to tarfile
    err, took = _refused(data)
    assert (err.status, took < 1.0) == (status, True), (err.reasons, took)
    assert any(needle in r for r in err.reasons), err.reasons


def _forbidden(*_: object) -> None:
    raise AssertionError("tarfile parsed an upload")


def test_a_pax_header_under_the_limit_without_record_lengths_is_corrupt_at_once() -> None:
    err, took = _refused(pax_digits(MAX_EXTENSION_BYTES - 1024))
    assert (err.status, err.reasons, took < 1.0) == (
        422,
        ["corrupt archive: a pax record without its length"],
        True,
    )


def _archive(fmt: int, files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=fmt) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        d = tarfile.TarInfo("run/logs")
        d.type = tarfile.DIRTYPE
        tar.addfile(d)
    return buf.getvalue()


def _peer(data: bytes) -> dict[str, bytes]:
    """What tarfile reads (trusted input only: archives this test wrote)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]


FILES = {
    "run/results.json": b'{"kind": "lair.run_report"}',
    f"run/{'a' * 120}/{'b' * 150}.log": b"long name\n" * 300,  # pax path / GNU ././@LongLink / ustar prefix
    "run/logs/\u00e9ngine.log": bytes(range(256)) * 40,  # a non-ASCII name: a pax header in PAX format
    "run/empty.log": b"",
}


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT])
def test_every_tar_format_reads_back_as_tarfile_reads_it(fmt: int) -> None:
    data = _archive(fmt, FILES)
    assert unpack(data) == _peer(data)


def test_a_ustar_prefix_name_reads_back() -> None:
    files = {f"run/{'p' * 90}/{'n' * 90}.log": b"x" * 700}
    data = _archive(tarfile.USTAR_FORMAT, files)
    assert unpack(data) == _peer(data) == {f"{'p' * 90}/{'n' * 90}.log": b"x" * 700}


@pytest.mark.parametrize("flags", [[], ["--format=posix"]])
def test_archives_of_the_tar_command_read_back(tmp_path: Path, flags: list[str]) -> None:
    run = tmp_path / "2026-01-01_000000_a-run-name-long-enough-to-need-more-than-one-hundred-bytes-of-path"
    (run / "logs").mkdir(parents=True)
    (run / "results.json").write_bytes(b"{}")
    (run / "logs" / ("engine-" + "x" * 60 + ".log")).write_bytes(b"log line\n" * 1000)
    out = tmp_path / "r.tar.gz"
    subprocess.run(["tar", *flags, "-C", str(tmp_path), "-czf", str(out), run.name], check=True)
    data = out.read_bytes()
    assert unpack(data) == _peer(data)


def test_skipped_members_count_against_the_budgets() -> None:
    """Directories are skipped, not free: 257 of them are over the member limit."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for i in range(MAX_MEMBERS + 1):
            d = tarfile.TarInfo(f"run/d{i}")
            d.type = tarfile.DIRTYPE
            tar.addfile(d)
    err, _ = _refused(buf.getvalue())
    assert (err.status, err.reasons) == (413, [f"more than {MAX_MEMBERS} files in the archive"])


def test_the_deadline_stops_a_slow_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archive, "DEADLINE_S", -1.0)  # already past: the first inflate step refuses
    err, _ = _refused(_archive(tarfile.PAX_FORMAT, FILES))
    assert (err.status, err.reasons) == (413, ["archive not read within -1 s"])


def test_a_member_cut_short_is_truncated() -> None:
    data = _archive(tarfile.PAX_FORMAT, {"run/results.json": bytes(range(256)) * 400})
    err, _ = _refused(data[: len(data) * 2 // 3])
    assert err.status == 422 and err.reasons[0].startswith("truncated archive")
