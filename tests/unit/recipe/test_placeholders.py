"""Typed placeholders, rigs, rendering, redaction and comment-preserving edits."""

from __future__ import annotations

from pathlib import Path

import pytest

from lair.errors import ConfigError, PlaceholderError
from lair.recipe import check_file, edit_toml, load_recipe, redacted_toml, render_recipe
from lair.recipe.placeholders import find_refs
from lair.rig import load_rig, set_rig_values

RECIPE = """\
# my recipe
engine = "vllm"
docker_image = "img/x:1@sha256:abc"
model = "{MODEL_DIR}/weights"   # weights live here
args = ["--port", "{PORT}", "--api-key", "{API_KEY}"]
before_serve = ["echo ${HOME} {{literal}}"]

[env]
HF_TOKEN = "{API_KEY}"
HOST_NAME = "{HEAD}"

[placeholders.MODEL_DIR]
type = "path"
description = "weights folder"

[placeholders.PORT]
type = "int"
default = 8001

[placeholders.API_KEY]
type = "secret"

[placeholders.HEAD]
type = "host"
default = "10.0.0.2"
"""


@pytest.fixture
def recipe_file(tmp_path: Path) -> Path:
    p = tmp_path / "r.toml"
    p.write_text(RECIPE)
    return p


def test_reference_syntax() -> None:
    assert find_refs("a {X} ${HOME} {{lit}} {y_1}") == ["X", "y_1"]


def test_render_with_rig_env_and_defaults(recipe_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("API_KEY", "sk-live-123")
    r = render_recipe(load_recipe(recipe_file), {"MODEL_DIR": "/models/m"})
    assert r.model == "/models/m/weights"
    assert r.args == ["--port", "8001", "--api-key", "sk-live-123"]
    assert r.env == {"HF_TOKEN": "sk-live-123", "HOST_NAME": "10.0.0.2"}
    assert r.before_serve[0].run == "echo ${HOME} {{literal}}"


def test_unresolved_placeholder_is_an_error(recipe_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("API_KEY", raising=False)
    with pytest.raises(PlaceholderError) as exc:
        render_recipe(load_recipe(recipe_file), {"MODEL_DIR": "/m"})
    assert exc.value.names == ["API_KEY"]
    assert "{API_KEY}" in exc.value.render() and "hint:" in exc.value.render()


def test_typed_value_is_checked(recipe_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("API_KEY", "k")
    with pytest.raises(ConfigError, match=r"placeholder \{PORT\}: expected an integer, got 'eighty'"):
        render_recipe(load_recipe(recipe_file), {"MODEL_DIR": "/m", "PORT": "eighty"})
    with pytest.raises(ConfigError, match="not a host name"):
        render_recipe(load_recipe(recipe_file), {"MODEL_DIR": "/m", "HEAD": "bad host!"})


def test_rig_supplies_values(recipe_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("API_KEY", "k")
    set_rig_values("home", {"MODEL_DIR": "/srv/models"})
    set_rig_values("home", {"gpu_model": "RTX PRO 6000", "gpu_count": "2"}, section="hardware")
    rig = load_rig("home")
    assert rig.hardware.gpu_count == 2 and rig.values == {"MODEL_DIR": "/srv/models"}
    assert render_recipe(load_recipe(recipe_file), rig.string_values()).model == "/srv/models/weights"


def test_missing_rig_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="no rig named 'nope'"):
        load_rig("nope")


def test_redacted_toml_keeps_comments_and_hides_secrets(
    recipe_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("API_KEY", "sk-live-123")
    text = redacted_toml(recipe_file, {"MODEL_DIR": "/models/m"})
    assert "sk-live-123" not in text
    assert "# my recipe" in text and "# weights live here" in text
    assert 'model = "/models/m/weights"' in text
    assert 'HF_TOKEN = "***"' in text and '"--api-key", "***"' in text
    assert "[placeholders.API_KEY]" in text  # declarations stay as documentation


def test_edit_keeps_comments_and_refuses_invalid(recipe_file: Path) -> None:
    ok = edit_toml(recipe_file, {"port": "9000", "meta.title": "Tuned"})
    assert ok.ok
    text = recipe_file.read_text()
    assert "# my recipe" in text and "# weights live here" in text
    assert "port = 9000" in text and 'title = "Tuned"' in text
    before = recipe_file.read_text()
    bad = edit_toml(recipe_file, {"port": "70000"})
    assert not bad.ok and bad.errors[0].path == "port"
    assert recipe_file.read_text() == before


def test_lint_warnings(tmp_path: Path) -> None:
    p = tmp_path / "w.toml"
    p.write_text(
        'engine = "vllm"\ndocker_image = "vllm/vllm-openai:latest"\ngpu_memory_utilization = 0.97\n'
        'args = ["--gpu-memory-utilization", "0.99"]\n\n'
        '[[extra_mounts]]\nhost = "/data/models"\ncontainer = "/models"\n\n'
        '[env]\nAPI_KEY = "change-me"\nMODEL_PATH = "/data/models/x"\nCACHE = "/home/me/.cache"\n'
        'LONG_PREFILL_TOKEN_THRESHOLD = "2816"\n'
    )
    result = check_file(p)
    assert result.ok
    got = [(w.code, w.path) for w in result.warnings]
    assert got == [
        ("image-unpinned", "docker_image"),
        ("memory-fraction", "gpu_memory_utilization"),
        ("memory-fraction", "args[1]"),
        ("secret-plaintext", "env.API_KEY"),
        ("host-path", "env.MODEL_PATH"),
        ("host-path", "env.CACHE"),
    ]
    assert result.warnings[0].message == "image 'vllm/vllm-openai:latest' is unpinned (:latest)"
