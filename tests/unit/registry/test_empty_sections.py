"""Sections with no data say so briefly, as the seed page does: a minimal recipe's page has one short
"none" line in every section it gives nothing for, and the seed-000 example (which fills them) has
none of them. On SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import lxml.html
import pytest
from registry_paths import SEED_000
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.registry.service.publish import publish
from lair.registry.web.app import create_app

MINIMAL = 'engine = "vllm"\ndocker_image = "example/engine:v1"\nmodel = "m"\nname = "minimal"\n'
# written by hand from what each section of the seed page holds when it has no data; the launch
# command and the hardware are derived from the launch fields (docker run ...; 1 GPU), never empty
EXPECTED = {
    "summary": ["No summary."],
    "env": ["No environment."],
    "flags": ["No flags."],
    "notes": ["No notes."],
    "engine": ["No install note."],
    "model": ["No model details."],
    "context": ["Not given."],
    "kv-pool": ["Not given."],
    "performance": [
        "No measurements yet.",
        "No performance notes.",
        "No quality figures yet; measure them with lair eval.",
    ],
    "placeholders": ["This recipe has no placeholders."],
    "fit": ["model facts unknown: the registry has no config for m."],
    "downloads": ["No downloads."],
}


@pytest.fixture
def client(engine: Engine, db_url: str) -> Iterator[TestClient]:
    with engine.begin() as conn:
        publish(conn, MINIMAL, owner="alice")
        publish(conn, SEED_000.read_text(), owner="diffbot", slug="seed-000")
    with TestClient(create_app(db_url), raise_server_exceptions=False) as c:
        yield c


def _none_lines(html: str) -> dict[str, list[str]]:
    """Each section's "none" lines (``class="none"``), as the reader sees them."""
    out: dict[str, list[str]] = {}
    for sec in lxml.html.fromstring(html).xpath("//section[@data-section]"):
        found = sec.xpath('.//*[contains(concat(" ", normalize-space(@class), " "), " none ")]')
        if found:
            out[sec.get("data-section")] = [" ".join(n.text_content().split()) for n in found]
    return out


def test_a_minimal_recipe_says_none_in_each_empty_section(client: TestClient) -> None:
    r = client.get("/recipes/minimal")
    assert r.status_code == 200
    assert _none_lines(r.text) == EXPECTED
    page = lxml.html.fromstring(r.text)
    tags = page.xpath("//section[@data-section='tags']")[0]
    assert tags.text_content().strip() == "no tags"
    hardware = page.xpath("//section[@data-section='hardware']")[0]
    assert " ".join(hardware.text_content().split()) == (
        "Hardware 1 GPU (derived from the launch fields: no meta.hardware)"
    )
    command = page.xpath("//code[@id='derived-command']")[0].text_content()
    assert command.startswith("docker run --rm") and "example/engine:v1" in command
    context = page.xpath("//section[@data-section='context']")[0]
    assert "tokens" not in context.text_content()  # no "max context: — tokens"


def test_a_full_recipe_says_none_nowhere_it_has_data(client: TestClient) -> None:
    r = client.get("/recipes/seed-000")
    assert r.status_code == 200
    assert set(_none_lines(r.text)) == set()  # its meta.model_facts give the fit widget its facts
