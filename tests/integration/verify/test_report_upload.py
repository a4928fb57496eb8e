"""POST /api/v1/reports in process (the real app over SQLite and PostgreSQL) with real reports of the
tiny-cpu example: accepted once (its rows reported-by-report: a CPU-only rig has no roofline, so
nothing physically checks them), then refused as a duplicate; every tampered report is refused with
its reason and leaves nothing stored (no report row, no measurement from it, no blob)."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import sqlalchemy as sa
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.client import pack_report
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.archive import MAX_ARCHIVE_BYTES, MAX_UNPACKED_BYTES
from lair.registry.service.recompute import check_cells
from lair.testing.registry import gzip_serializer

pytestmark = [pytest.mark.integration]
gzip_serializer()


def _post(c: TestClient, data: bytes, **headers: str) -> Any:
    return c.post("/api/v1/reports", content=data, headers={"content-type": "application/gzip", **headers})


def _stored(engine: Engine, blobs: Path) -> tuple[int, int, list[Path]]:
    with engine.connect() as conn:
        reports = conn.execute(sa.text("SELECT count(*) FROM reports")).scalar_one()
        verified = conn.execute(
            sa.text("SELECT count(*) FROM measurements WHERE provenance <> 'reported'")
        ).scalar_one()
    return reports, verified, [p for p in blobs.rglob("*") if p.is_file()] if blobs.exists() else []


def _refused(
    site: tuple[TestClient, Engine, Path], data: bytes, status: int, *needles: str, **headers: str
) -> list[str]:
    c, engine, blobs = site
    r = _post(c, data, **headers)
    body = r.json()
    assert r.status_code == status, body
    assert body["ok"] is False and body["error"]["status"] == status
    reasons = body["error"].get("reasons") or [body["error"]["message"]]
    for needle in needles:
        assert any(needle in x for x in reasons), (needle, reasons)
    assert _stored(engine, blobs) == (0, 0, [])
    return list(reasons)


def _edit_json(folder: Path, name: str, edit: Any) -> None:
    doc = json.loads((folder / name).read_text())
    edit(doc)
    (folder / name).write_text(json.dumps(doc))


def test_a_real_cpu_report_is_stored_reported_by_report_and_a_second_upload_is_a_duplicate(
    site: tuple[TestClient, Engine, Path], tiny_report: Path
) -> None:
    c, engine, blobs = site
    r = _post(c, pack_report(tiny_report))
    assert r.status_code == 201, r.text
    doc = r.json()
    cells = json.loads((tiny_report / "results.json").read_text())["bench"]["cells"]
    assert (doc["slug"], doc["revision"]) == ("tiny-cpu", 1)
    assert [(x["context"], x["decode_tok_s"]) for x in doc["rows"]] == [
        (c["context"], c["decode_tok_s_aggregate"]) for c in cells
    ]
    assert doc["rows"][0]["roofline"] == {"missing": "no roofline: the fingerprint names no GPU"}
    why = "no roofline: the fingerprint names no GPU"
    assert {(x["provenance"], x["note"]) for x in doc["rows"]} == {("reported-by-report", why)}
    reports, verified, files = _stored(engine, blobs)
    assert (reports, verified) == (1, len(cells))
    with engine.connect() as conn:
        who = "SELECT DISTINCT u.name FROM measurements m JOIN users u ON u.id = m.submitted_by"
        by = conn.execute(sa.text(who + " WHERE m.provenance = 'reported-by-report'")).scalars().all()
    assert by == ["rig-owner"]  # the uploader: the one who may retract the rows
    stored = {p.relative_to(blobs / "reports" / doc["id"]).as_posix(): p.read_bytes() for p in files}
    assert stored["requests.jsonl"] == (tiny_report / "requests.jsonl").read_bytes()
    assert "report.html" not in stored  # never served from the registry's origin
    page = c.get("/recipes/tiny-cpu").text
    assert 'data-tier="reported-by-report"' in page and f"/reports/{doc['id']}/files/fingerprint.json" in page
    assert f"not verified: {why}" in page
    fp = c.get(f"/reports/{doc['id']}/files/fingerprint.json")
    assert fp.json() == json.loads((tiny_report / "fingerprint.json").read_text())
    assert fp.headers["x-content-type-options"] == "nosniff"
    assert c.get("/api/v1/recipes", params={"verified": 1, "sort": "decode"}).json()["items"] == []
    ranked = c.get("/api/v1/recipes", params={"sort": "decode"}).json()["items"]  # any tier: it counts
    best = max(cell["decode_tok_s_aggregate"] for cell in cells)
    tiny = next(i for i in ranked if i["slug"] == "tiny-cpu")
    assert (tiny["best_decode_tok_s"], tiny["best_verified_decode_tok_s"]) == (best, None)
    dup = _post(c, pack_report(tiny_report))
    assert dup.status_code == 409 and dup.json()["error"]["code"] == "duplicate"
    assert _stored(engine, blobs)[:2] == (1, len(cells))


def test_a_real_upload_and_its_duplicate_answer_in_the_openapi_schemas(
    site: tuple[TestClient, Engine, Path], tiny_report: Path
) -> None:
    """schemathesis' checks on the documented ``submitReport`` with a real report: the 201 body in the
    SubmittedReport schema (and, by ``ignored_auth``, the same upload refused without a valid token),
    then the duplicate's 409 in the error schema."""
    from schemathesis.specs.openapi.checks import positive_data_acceptance

    c = site[0]
    op = schemathesis.openapi.from_asgi("/api/v1/openapi.json", c.app).find_operation_by_id("submitReport")
    body, auth = pack_report(tiny_report), {"Authorization": c.headers["authorization"]}
    r = op.Case(body=body, media_type="application/gzip", headers=auth).call_and_validate()
    assert r.status_code == 201, r.text
    doc = r.json()
    cells = json.loads((tiny_report / "results.json").read_text())["bench"]["cells"]
    assert [(x["context"], x["concurrency"]) for x in doc["rows"]] == [
        (c["context"], c["concurrency"]) for c in cells
    ]
    assert doc["report_url"] == f"/reports/{doc['id']}"
    again = op.Case(body=body, media_type="application/gzip", headers=auth)
    dup = again.call_and_validate(excluded_checks=[positive_data_acceptance])  # a valid body, refused
    assert dup.status_code == 409 and dup.json()["error"]["code"] == "duplicate"


def test_a_report_row_retracted_by_its_uploader_stays_struck(site: Any, tiny_report: Path) -> None:
    c = site[0]
    assert _post(c, pack_report(tiny_report)).status_code == 201
    (row,) = [
        m for m in c.get("/api/v1/recipes/tiny-cpu.json").json()["measurements"] if m["tier"] != "reported"
    ]
    r = c.post(f"/api/v1/measurements/{row['id']}/retract", json={"reason": "thermal throttling"})
    assert r.status_code == 200, r.text
    (after,) = [
        m for m in c.get("/api/v1/recipes/tiny-cpu.json").json()["measurements"] if m["id"] == row["id"]
    ]
    assert (
        after["retracted"]
        and after["retracted_reason"] == "thermal throttling"
        and after["tier"] == "reported-by-report"
    )
    page = c.get("/recipes/tiny-cpu").text
    assert "<s>reported-by-report</s>" in page and "thermal throttling" in page
    items = c.get("/api/v1/recipes", params={"sort": "decode"}).json()["items"]
    assert next(i for i in items if i["slug"] == "tiny-cpu")["best_decode_tok_s"] is None  # no longer counts


def test_faster_numbers_in_results_json_are_refused(site: Any, report_copy: Path) -> None:
    def faster(doc: dict[str, Any]) -> None:
        cell = doc["bench"]["cells"][0]
        cell["decode_tok_s_per_stream"] *= 1.5
        cell["decode_tok_s_aggregate"] *= 1.5

    _edit_json(report_copy, "results.json", faster)
    _refused(site, pack_report(report_copy), 422, "decode_tok_s_per_stream is", "decode_tok_s_aggregate is")


def test_a_report_of_another_revision_is_refused(site: Any, report_copy: Path) -> None:
    _edit_json(report_copy, "results.json", lambda d: d["recipe"].update(model_sha256="0" * 64))
    _refused(
        site,
        pack_report(report_copy),
        422,
        f"no published revision has the source recipe's sha256 {'0' * 64}",
    )


def test_a_recipe_run_with_other_flags_than_its_revision_is_refused(site: Any, report_copy: Path) -> None:
    (recipe,) = report_copy.glob("*.recipe.toml")
    recipe.write_text(recipe.read_text().replace('"--threads", "2"', '"--threads", "1"'))
    _refused(site, pack_report(report_copy), 422, "recipe as run: entrypoint[")


def test_timings_sped_up_past_one_token_a_microsecond_are_refused(site: Any, report_copy: Path) -> None:
    """On an H100 (as the fingerprint now says, in nvidia-smi's spelling) the tiny model's roofline is
    ~3.9M tok/s, above the per-stream floor of one token a microsecond: timings sped up 10,000x, with
    the results recomputed from them, fail that floor (the roofline refusal of a model with real
    weights is in tests/unit/registry/test_verified_physics.py)."""
    rows = [json.loads(line) for line in (report_copy / "requests.jsonl").read_text().splitlines()]
    for row in rows:
        row["send_ms"] = round(row["send_ms"] / 1e4, 3)
        row["chunk_ms"] = [round(t / 1e4, 6) for t in row["chunk_ms"]]
        row["ttft_ms"] = row["chunk_ms"][0]
    (report_copy / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    gpus = {
        "count": 1,
        "models": ["NVIDIA H100 80GB HBM3"],
        "driver": "570.0",
        "memory": ["81559 MiB"],
        "cuda": "12.8",
    }

    def on_h100(doc: dict[str, Any]) -> None:
        (doc["fingerprint"] if "bench" in doc else doc)["gpus"] = gpus
        if "bench" in doc:
            cells, _ = check_cells(doc["bench"], rows)
            for cell, again in zip(doc["bench"]["cells"], cells, strict=True):
                cell.update({k: again[k] for k in ("ttft_ms_p50", "ttft_ms_p90", "prefill_tok_s")})
                cell.update({k: again[k] for k in ("decode_tok_s_per_stream", "decode_tok_s_aggregate")})

    _edit_json(report_copy, "results.json", on_h100)
    _edit_json(report_copy, "fingerprint.json", on_h100)
    reasons = _refused(site, pack_report(report_copy), 422, "past one token a microsecond")
    assert not [x for x in reasons if "raw timings give" in x], reasons


def test_the_client_bound_flag_is_checked_against_the_recorded_client_load(
    site: Any, report_copy: Path
) -> None:
    def busy(doc: dict[str, Any]) -> None:
        doc["bench"]["cells"][0]["client"]["cpu_fraction_max"] = 0.95  # the bound is 0.8; flag left off

    _edit_json(report_copy, "results.json", busy)
    _refused(site, pack_report(report_copy), 422, "client-bound (the bench, not the server")


def test_a_cache_never_proven_cold_is_refused(site: Any, report_copy: Path) -> None:
    rows = [
        json.loads(line) | {"cached_tokens": None}
        for line in (report_copy / "requests.jsonl").read_text().splitlines()
    ]
    (report_copy / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def unproven(doc: dict[str, Any]) -> None:
        for cell in doc["bench"]["cells"]:
            cell["cached_tokens"] = None
            cell["engine_metrics"] = [m | {"prefix_cache_hits_delta": None} for m in cell["engine_metrics"]]

    _edit_json(report_copy, "results.json", unproven)
    reasons = _refused(site, pack_report(report_copy), 422, "cold cache not proven")
    assert not [x for x in reasons if "raw timings give" in x], reasons


def test_short_outputs_are_refused(site: Any, report_copy: Path) -> None:
    _edit_json(report_copy, "results.json", lambda d: d["bench"]["options"].update(decode_tokens=64))
    _refused(
        site,
        pack_report(report_copy),
        422,
        "output lengths short of the 64 tokens",
        "output_length_ok is True",
    )


def test_a_truncated_archive_is_refused(site: Any, tiny_report: Path) -> None:
    data = pack_report(tiny_report)
    _refused(site, data[: len(data) // 2], 422, "truncated archive")


def test_an_oversized_archive_is_refused(site: Any, report_copy: Path) -> None:
    (report_copy / "logs" / "big.log").write_bytes(os.urandom(MAX_ARCHIVE_BYTES + 1024))
    _refused(site, pack_report(report_copy), 413, "the limit is")


def test_an_archive_that_unpacks_too_large_is_refused(site: Any, report_copy: Path) -> None:
    (report_copy / "logs" / "zeros.log").write_bytes(bytes(MAX_UNPACKED_BYTES + 1))
    data = pack_report(report_copy)
    assert len(data) < MAX_ARCHIVE_BYTES
    _refused(site, data, 413, "unpacked report over")


def _tar_with(folder: Path, extra: tarfile.TarInfo, payload: bytes = b"") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                tar.add(p, arcname=f"run/{p.relative_to(folder).as_posix()}")
        extra.size = len(payload)
        tar.addfile(extra, io.BytesIO(payload) if payload else None)
    return buf.getvalue()


def test_a_path_traversal_archive_is_refused(site: Any, tiny_report: Path) -> None:
    evil = tarfile.TarInfo("run/../../etc/lair-evil.txt")
    _refused(
        site, _tar_with(tiny_report, evil, b"x"), 422, "path traversal: member 'run/../../etc/lair-evil.txt'"
    )


def test_links_in_an_archive_are_refused(site: Any, tiny_report: Path) -> None:
    link = tarfile.TarInfo("run/logs/passwd.log")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    _refused(
        site, _tar_with(tiny_report, link), 422, "link in archive: 'run/logs/passwd.log' -> '/etc/passwd'"
    )


def test_not_gzip_at_all_is_refused(site: Any) -> None:
    _refused(site, gzip.compress(b"not a tar"), 422, "archive")


def test_uploads_need_a_token_with_publish(site: Any, tiny_report: Path) -> None:
    engine = site[1]
    _refused(site, pack_report(tiny_report), 401, "sign in first", authorization="")
    with engine.begin() as conn:
        read_only = create_token(conn, create_user(conn, "reader"), "cli", ("read",))
    _refused(
        site, pack_report(tiny_report), 403, "lacks the 'publish' scope", authorization=f"Bearer {read_only}"
    )


def test_a_report_in_the_database_blob_store_is_served_from_it(
    db_blobs_site: tuple[TestClient, Engine], tiny_report: Path, tmp_path: Path
) -> None:
    c, engine = db_blobs_site
    r = _post(c, pack_report(tiny_report))
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    with engine.connect() as conn:
        keys = conn.execute(sa.text("SELECT key FROM blobs ORDER BY key")).scalars().all()
    files = c.get(f"/api/v1/reports/{rid}.json").json()["files"]
    assert keys == [f"reports/{rid}/{name}" for name in sorted(files)] and "requests.jsonl" in files
    raw = c.get(f"/reports/{rid}/files/requests.jsonl")
    assert raw.status_code == 200 and raw.content == (tiny_report / "requests.jsonl").read_bytes()
    assert not (tmp_path / "r-blobs").exists()  # nothing went to the default folder
