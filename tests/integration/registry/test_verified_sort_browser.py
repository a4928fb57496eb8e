"""The list page's "verified only" box with the decode sort, in headless Chromium against a real
``lair serve``: the author's reported numbers rank three recipes one way, their verified rows (set by
hand) the other way, and the box switches between the two."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lair.registry.db.engine import make_engine
from lair.registry.service.publish import publish
from lair.testing.registry import add_verified_row

pytestmark = pytest.mark.integration

REPORTED = {"a": 500.0, "b": 100.0, "c": 300.0}  # at ctx 2048
VERIFIED = {"a": 50.0, "b": 250.0}  # c has no verified row


def _recipe(name: str, decode: float) -> str:
    return f"""engine = "vllm"
docker_image = "img/x:1"
model = "org/zircon-{name}"
[meta]
title = "Zircon {name}"
slug = "zircon-{name}"
summary = "zircon recipe {name}"
[[meta.performance]]
context = 2048
decode_tok_s = {decode}
"""


@pytest.fixture(scope="module")
def zircon(served: Any) -> str:
    engine = make_engine(served.db)
    with engine.begin() as conn:
        for name, decode in REPORTED.items():
            publish(conn, _recipe(name, decode), owner="author")
        for name, decode in VERIFIED.items():
            add_verified_row(conn, f"zircon-{name}", context=2048, decode_tok_s=decode)
    engine.dispose()
    return str(served.base)


def _slugs(page: Any) -> list[str]:
    found = page.locator("li.result").evaluate_all("els => els.map(e => e.dataset.slug)")
    return [str(s).removeprefix("zircon-") for s in found]


def test_the_verified_only_box_ranks_by_verified_numbers(page: Any, zircon: str, artifacts: Path) -> None:
    page.goto(zircon + "/recipes?q=zircon")
    page.select_option("#search select[name=sort]", "decode")
    page.click("#search button[type=submit]")
    page.wait_for_url("**sort=decode**")
    assert _slugs(page) == ["a", "c", "b"]  # 500, 300, 250 (b's verified row beats its reported 100)
    page.check("#search input[name=verified]")
    page.click("#search button[type=submit]")
    page.wait_for_url("**verified=1**")
    assert _slugs(page) == ["b", "a"]  # verified 250, 50; c has none
    assert page.locator("#search input[name=verified]").is_checked()
    assert page.locator("li.result[data-slug='zircon-a'] .verified-speed").inner_text() == "verified 50 tok/s"
    page.screenshot(path=str(artifacts / "list-verified-sort.png"), full_page=True)
