"""Report uploads are authorized in the service layer, not only by the web route: ``submit_report``
itself refuses an anonymous caller (401) and a read-only one (403) before it looks at the archive,
and stores nothing; a publisher gets as far as the archive check."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from lair.errors import RegistryError
from lair.registry.service.accounts import create_user
from lair.registry.service.actor import Actor
from lair.registry.service.blobs import FileBlobStore
from lair.registry.service.reports import submit_report
from lair.testing.registry import tgz


@pytest.mark.parametrize(
    ("scopes", "anonymous", "status", "code"),
    [
        (("read", "publish"), True, 401, "unauthorized"),
        (("read",), False, 403, "forbidden"),
        (("read", "publish"), False, 422, None),  # authorized: refused for what the archive is
    ],
)
def test_submit_report_checks_the_caller_before_the_archive(
    engine: Engine, tmp_path: Path, scopes: tuple[str, ...], anonymous: bool, status: int, code: str | None
) -> None:
    with engine.begin() as conn:
        user_id = create_user(conn, "uploader")
    actor = None if anonymous else Actor(user_id, "uploader", scopes=scopes)
    store = FileBlobStore(tmp_path / "blobs")
    with engine.begin() as conn, pytest.raises(RegistryError) as refused:
        # a well-formed archive that is no report: only the archive check could refuse it
        submit_report(conn, tgz({"notes.txt": b"not a report\n"}), actor=actor, store=store)
    assert refused.value.status == status
    if code is not None:
        assert refused.value.code == code
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM reports")).scalar_one() == 0
        assert conn.execute(sa.text("SELECT count(*) FROM measurements")).scalar_one() == 0
    assert not (tmp_path / "blobs").exists() or not any((tmp_path / "blobs").rglob("*"))
