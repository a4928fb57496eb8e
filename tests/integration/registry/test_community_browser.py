"""Community flows in Chromium on SQLite: sign up, sign in, publish (and see located errors), edit with
notes, compare two revisions, fork and see the upstream diff, vote and unvote, retract, sign out (cross-site
posts: test_csrf_browser.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

RECIPE = """engine = "vllm"
docker_image = "vllm/vllm-openai:v0.11.0"
max_model_len = 32768
[meta]
title = "Alice's Qwen"
slug = "alice-qwen"
summary = "Qwen 2.5 7B on one H200."
upstream_weights = "Qwen/Qwen2.5-7B-Instruct"
[meta.hardware]
gpu_model = "H200"
gpu_count = 1
[[meta.performance]]
context = 2048
decode_tok_s = 90
"""


def _sign_up(page: Any, site: str, name: str) -> None:
    page.goto(site + "/signup")
    page.fill("#signup input[name=name]", name)
    page.fill("#signup input[name=password]", f"{name}-long-password")
    page.click("#signup button[type=submit]")
    page.wait_for_url(site + "/")
    assert page.locator("#me").inner_text() == name


def _publish(page: Any, site: str, text: str, notes: str = "") -> None:
    page.goto(site + "/publish")
    page.fill("#publish textarea[name=toml]", text)
    page.fill("#publish input[name=notes]", notes)
    page.click("#publish button[type=submit]")


def test_community_flow(browser: Any, site: str, artifacts: Path) -> None:
    alice_ctx, bob_ctx = browser.new_context(), browser.new_context()
    alice, bob = alice_ctx.new_page(), bob_ctx.new_page()
    _sign_up(alice, site, "alice")
    _publish(alice, site, RECIPE.replace("max_model_len = 32768", "max_modle_len = 1"))
    err = alice.locator("#form-error").inner_text()
    assert "line 3" in err and "max_modle_len" in err  # lair's located error, in the form
    _publish(alice, site, RECIPE, "first")
    alice.wait_for_url(site + "/recipes/alice-qwen")
    alice.screenshot(path=str(artifacts / "community-published.png"), full_page=True)
    alice.click("#edit")
    alice.fill("#publish textarea[name=toml]", RECIPE.replace("32768", "16384"))
    alice.fill("#publish input[name=notes]", "halve the context")
    alice.click("#publish button[type=submit]")
    alice.wait_for_url(site + "/recipes/alice-qwen")
    assert "halve the context" in alice.locator("[data-section=revision-history]").inner_text()
    alice.click("#compare-link")
    unified = alice.locator("#unified").inner_text()
    assert "-max_model_len = 32768" in unified and "+max_model_len = 16384" in unified
    assert alice.locator("#side-by-side tr.replace").count() >= 1
    alice.screenshot(path=str(artifacts / "community-compare.png"), full_page=True)

    _sign_up(bob, site, "bob")
    bob.goto(site + "/recipes/alice-qwen")
    assert bob.locator("#edit").count() == 0  # not the owner
    bob.click("#vote button")
    bob.wait_for_url(site + "/recipes/alice-qwen")
    assert bob.locator("#votes").inner_text() == "1"
    bob.click("#vote button")  # unvote
    assert bob.locator("#votes").inner_text() == "0"
    bob.click("#fork button")
    bob.wait_for_url(site + "/recipes/alice-qwen-bob")
    assert "Forked from" in bob.locator("[data-section=fork]").inner_text()
    assert bob.locator("#upstream-newer").count() == 0

    alice.goto(site + "/recipes/alice-qwen/edit")
    alice.fill("#publish textarea[name=toml]", RECIPE.replace("32768", "8192"))
    alice.fill("#publish input[name=notes]", "8K")
    alice.click("#publish button[type=submit]")
    alice.wait_for_url(site + "/recipes/alice-qwen")
    bob.goto(site + "/recipes/alice-qwen-bob")
    assert bob.locator("#upstream-newer").inner_text() == "upstream has a newer revision"
    bob.click("#upstream-diff")
    assert (
        "+max_model_len = 16384" in bob.locator("#unified").inner_text()
    )  # the fork (rev 2) vs upstream (8K)
    bob.screenshot(path=str(artifacts / "community-fork-diff.png"), full_page=True)

    alice.goto(site + "/recipes/alice-qwen")
    row = alice.locator("table.speed tbody tr").first
    row.locator("input[name=reason]").fill("thermal throttling")
    row.locator("button").click()
    alice.wait_for_url(site + "/recipes/alice-qwen")
    struck = alice.locator("table.speed tbody tr.retracted")
    assert struck.count() == 1 and "thermal throttling" in struck.inner_text()
    alice.screenshot(path=str(artifacts / "community-retracted.png"), full_page=True)
    alice.click("#signout")
    alice.wait_for_url(site + "/")
    assert alice.locator("#me").count() == 0
    alice.goto(site + "/recipes/alice-qwen")
    assert "sign in to vote" in alice.locator("[data-section=votes]").inner_text()
    alice_ctx.close()
    bob_ctx.close()
