"""The one secret scanner (lair.redaction): every shape of :data:`lair.testing.fake_secrets.SHAPES` is
redacted (and refused in published text, but the log-only ones), ordinary text is left alone, and
``lair doctor --bundle`` writes none of them (a bundle goes to public issues)."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from lair.launch.doctor.bundle import write_bundle
from lair.launch.doctor.findings import DoctorReport, NodeFacts
from lair.redaction import LOG_RULES, RULES, hits, redact
from lair.registry.service.scrub import scan
from lair.testing.fake_secrets import ORDINARY, SHAPES


@pytest.mark.parametrize("name", SHAPES)
def test_each_secret_shape_is_redacted(name: str) -> None:
    shape = SHAPES[name]
    out = redact(shape.line)
    assert shape.secret not in out and "[REDACTED:" in out, out
    assert bool(hits(shape.line, RULES)) is shape.published  # what published text refuses


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact(text) == text
    assert hits(text, LOG_RULES) == []


def test_the_flag_name_and_the_url_stay_readable() -> None:
    out = redact(SHAPES["--api-key VALUE"].line + " " + SHAPES["database URL password"].line)
    assert "--api-key [REDACTED:secret flag value] --port 8000" in out
    assert "postgresql+psycopg://lair:[REDACTED:" in out and "@db.internal:5432/lair" in out


def _report(lines: list[str]) -> DoctorReport:
    node = NodeFacts(name="gpu1", address="10.0.0.7", rank=0, reachable=True, raw="\n".join(lines))
    return DoctorReport(ok=True, nodes=[node], findings=[], checks=[])


def test_a_doctor_bundle_holds_no_secret_of_any_shape(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text("\n".join(f"# {s.line}" for s in SHAPES.values()) + "\n")
    bundle = tmp_path / "bundle.tgz"
    names = write_bundle(bundle, _report([s.line for s in SHAPES.values()]), [], recipe)
    assert {"nodes/gpu1.txt", "recipe.toml", "findings.json"} <= set(names)
    with tarfile.open(bundle) as tar:
        text = "\n".join(tar.extractfile(m).read().decode() for m in tar.getmembers())  # type: ignore[union-attr]
    leaked = [name for name, s in SHAPES.items() if s.secret in text]
    assert leaked == []
    assert text.count("[REDACTED:") >= 2 * len(SHAPES)  # in the node's raw facts and in the recipe


def test_a_doctor_bundle_keeps_what_is_no_secret(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle.tgz"
    write_bundle(bundle, _report(list(ORDINARY)), [])
    with tarfile.open(bundle) as tar:
        raw = tar.extractfile("lair-doctor/nodes/gpu1.txt").read().decode()  # type: ignore[union-attr]
    assert raw == "\n".join(ORDINARY)


def test_a_shape_is_a_shape_everywhere() -> None:
    """The registry's published-text scanner is the same: each shape but the log-only ones is named
    in a note."""
    assert [n for n, s in SHAPES.items() if bool(scan(s.line, "notes")) is not s.published] == []
