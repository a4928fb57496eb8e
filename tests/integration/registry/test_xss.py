"""XSS: 50+ payloads in every user-controlled field of a recipe (and its revision notes, a second
revision's diff, a retraction reason), in the search box, in the sign-in and sign-up forms' user
name, rendered in Chromium with the page's CSP bypassed (so escaping alone must hold): no dialog
opens, no console message from a payload, no element a payload would create exists."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import sqlalchemy as sa

from lair.registry.db.engine import make_engine
from lair.registry.db.tables import MEASUREMENTS, USERS
from lair.registry.db.version import now
from lair.registry.serve import prepare
from lair.registry.service.publish import add_revision, publish
from lair.testing.registry import add_verified_row, rendered, serve_process
from lair.testing.xss import PAYLOADS, created

pytestmark = pytest.mark.integration


def _s(v: str) -> str:
    return json.dumps(v)  # a TOML basic string


def recipe_with(i: int, p: str) -> str:
    """The payload in every free-text field a recipe page shows."""
    return f"""engine = "vllm"
docker_image = "vllm/vllm-openai:v0.11.0"
model = {_s(p)}
served_model_name = {_s(p)}
[env]
KNOB = {_s(p)}
[placeholders.DIR]
type = "path"
description = {_s(p)}
default = {_s("/x" + p)}
[meta]
title = {_s(f"xss {i} {p}")}
slug = "xss-{i}"
summary = {_s(p)}
tags = [{_s(p[:90])}]
license = {_s(p[:90])}
listed_by = {_s(p)}
upstream_weights = {_s(p)}
model_repo = {_s(p)}
quantization = {_s(p)}
launch_command = {_s(p)}
flags = {_s(p)}
notes = {_s(p)}
performance_notes = {_s(p)}
[[meta.credits]]
who = {_s(p)}
role = {_s(p)}
link = {_s(p)}
[meta.hardware]
gpu_model = {_s(p[:90])}
gpu_count = 1
cpu = {_s(p)}
notes = {_s(p)}
[meta.engine]
name = {_s(p[:60])}
install_note = {_s(p)}
[[meta.env_knobs]]
name = "KNOB"
value = {_s(p)}
description = {_s(p)}
[[meta.performance]]
context = 2048
decode_tok_s = 100
note = {_s(p)}
[[meta.quality]]
suite = {_s(p)}
score = 1
[[meta.downloads]]
name = {_s(p)}
url = {_s(p)}

"""


@pytest.fixture(scope="module")
def xss_site(tmp_path_factory: pytest.TempPathFactory, artifacts: Path) -> Iterator[str]:
    db = f"sqlite:///{tmp_path_factory.mktemp('xss') / 'registry.sqlite3'}"
    prepare(db, seed=False)
    engine = make_engine(db)
    with engine.begin() as conn:
        for i, p in enumerate(PAYLOADS):
            publish(conn, recipe_with(i, p), owner="mallory", notes=p)
            add_revision(conn, f"xss-{i}", recipe_with(i, p + "2"), author="mallory", notes=p)
            uid = conn.execute(sa.select(USERS.c.id).where(USERS.c.name == "mallory")).scalar_one()
            mid = add_verified_row(conn, f"xss-{i}", context=2048, decode_tok_s=100.0, submitted_by=uid)
            struck = {"retracted_at": now(), "retracted_reason": p, "retracted_by": uid}
            conn.execute(sa.update(MEASUREMENTS).where(MEASUREMENTS.c.id == mid).values(**struck))
            rendered(conn, f"xss-{i}")  # struck behind the service layer: render as a retraction does
    engine.dispose()
    with serve_process(db, seed=False, log=artifacts / "serve-xss.log") as base:
        yield base


def _submit(page: Any, url: str, name: str) -> None:
    page.goto(url)
    page.fill("main input[name=name]", name)
    page.fill("main input[name=password]", "not the password 1")
    with page.expect_navigation():
        page.click("main form button[type=submit]")


def test_no_payload_executes_in_any_page(browser: Any, xss_site: str, artifacts: Path) -> None:
    assert len(PAYLOADS) >= 50
    ctx = browser.new_context(bypass_csp=True)
    page = ctx.new_page()
    fired: list[str] = []
    page.on("dialog", lambda d: (fired.append(d.message), d.dismiss()))
    page.on("console", lambda m: fired.append("console: " + m.text) if "alert" in m.text else None)
    urls = ["/", "/recipes?q=xss", "/api/v1/recipes/xss-0.json"]
    for i in range(len(PAYLOADS)):
        urls += [
            f"/recipes/xss-{i}",
            f"/recipes/xss-{i}/revisions/1",
            f"/recipes/xss-{i}/placeholders?DIR=/y",
        ]
    for i, p in enumerate(PAYLOADS):
        urls += [
            f"/recipes/xss-{i}/edit",  # the payload inside the TOML textarea, </textarea> included
            f"/recipes/xss-{i}/revisions/2",
            f"/recipes/xss-{i}/compare?from=1&to=2",
            f"/recipes?q={quote(p)}",  # reflected in the search box
        ]
    for url in urls:
        page.goto(xss_site + url)
        assert created(page) == 0, url
    page.goto(xss_site + "/recipes/xss-0")  # the struck row shows its reason as text
    assert page.locator(".retracted-reason").first.inner_text() == f"(retracted: {PAYLOADS[0]})"
    for p in PAYLOADS[:8]:  # under the sign-in limit (10/minute): the error page after a payload name
        _submit(page, xss_site + "/signin", p)
        assert page.locator("#form-error").count() == 1 and created(page) == 0, p
    for p in PAYLOADS[8:12]:  # under the sign-up limit (5/minute): refused by the name rules
        _submit(page, xss_site + "/signup", p)
        assert "lowercase letters" in page.content() and created(page) == 0, p
    page.goto(xss_site + "/recipes/xss-1")
    page.screenshot(path=str(artifacts / "xss-recipe.png"), full_page=True)
    ctx.close()
    assert fired == []
