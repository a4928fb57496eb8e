"""Every command tells the truth or stops, through the real ``lair`` command (a new user's first hour):

- ``lair check`` reports every problem of a file in one run (the cross-field checks run on what
  validates even when the schema found errors) and takes a recipe's folder;
- a recipe folder given where a file is wanted says so and names the file, not "[Errno 21]";
- an unresolved secret is to be exported, not put in a rig;
- ``lair push`` with no terminal to ask on says to pass ``-y``;
- ``-v`` after the command works as before it.

The expected problems are the ones written into each recipe by hand here, line by line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from lair.testing.cli import lair

ROOT = Path(__file__).resolve().parents[2]

# Each line holds one problem (or none); the comment says which check finds it.
BAD = """\
engine = "vllm"
docker_image = "vllm/vllm-openai:v0.11.0@sha256:{digest}"
tensor_paralel_size = 2                         # schema: unknown key
port = "abc"                                    # schema: a string for a port
required_nodes = 2                              # cross-field: 2 nodes, no distributed_backend
tensor_parallel_size = 2
shm_size = 12                                   # schema: a number for a size
before_serve = [{{ script = "no_such_script" }}]  # cross-field: no such hook script
""".format(digest="0" * 64)
BAD_AT = {
    (3, "tensor_paralel_size"),
    (4, "port"),
    (5, "required_nodes"),
    (7, "shm_size"),
    (8, "before_serve[0].script"),
}


def test_check_reports_schema_and_cross_field_problems_in_one_run(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(BAD)
    res = lair("check", str(recipe), "--json")
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    assert {(e["line"], e["path"]) for e in doc["errors"]} == BAD_AT
    by_path = {e["path"]: e for e in doc["errors"]}
    assert by_path["required_nodes"]["message"] == "2 nodes but no distributed_backend"
    assert by_path["before_serve[0].script"]["message"] == "no hook script named 'no_such_script'"
    text = lair("check", str(recipe))
    assert f"{recipe}: 5 error(s)" in text.stdout
    assert f"error: {recipe}:8:" in text.stderr and "no hook script named 'no_such_script'" in text.stderr


def test_check_skips_a_cross_field_check_whose_key_was_dropped(tmp_path: Path) -> None:
    """tensor_parallel_size = "two" is a type error; the parallel check, which reads it, must not
    add "does not split over 2 nodes" from the default of 1 that replaced it."""
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(
        'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\nrequired_nodes = 2\n'
        'tensor_parallel_size = "two"\ndistributed_backend = "mp"\n'
        'before_serve = [{ script = "nope" }]\n'
    )
    doc = json.loads(lair("check", str(recipe), "--json").stdout)
    assert [(e["line"], e["path"]) for e in doc["errors"]] == [
        (4, "tensor_parallel_size"),
        (6, "before_serve[0].script"),
    ]


def test_check_takes_a_recipe_folder() -> None:
    folder = ROOT / "examples" / "tiny-cpu"
    res = lair("check", str(folder))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"{folder / 'recipe.toml'}: ok"


def test_a_folder_where_a_recipe_file_is_wanted_names_the_file() -> None:
    folder = ROOT / "examples" / "tiny-cpu"
    res = lair("show", str(folder))
    assert res.returncode != 0 and "Errno" not in res.stderr and "Traceback" not in res.stderr
    assert f"error: {folder}:1:1: a folder, not a recipe file" in res.stderr
    assert f"hint: give its recipe file: {folder / 'recipe.toml'}" in res.stderr


SECRET = """\
engine = "custom"
runtime = "native"
entrypoint = ["sleep", "1"]
model = "{MODEL_DIR}"

[env]
HF_TOKEN = "{HF_TOKEN}"

[placeholders.HF_TOKEN]
type = "secret"

[placeholders.MODEL_DIR]
type = "path"
"""


def test_an_unresolved_secret_is_to_be_exported(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(SECRET)
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    res = lair("plan", str(recipe), "--set", "MODEL_DIR=/srv/m", env=env | {"HF_TOKEN": ""})
    assert res.returncode == 1
    assert "unresolved placeholder: {HF_TOKEN}" in res.stderr
    hint = res.stderr.split("hint: ", 1)[1]
    assert hint.startswith("export HF_TOKEN=... in the environment")
    assert "rig set" not in hint
    both = lair("plan", str(recipe), env=env | {"HF_TOKEN": ""})
    assert "export HF_TOKEN=..." in both.stderr and "lair rig set RIG MODEL_DIR=VALUE" in both.stderr


def test_verbose_after_the_command_is_the_same_as_before_it(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(SECRET)
    for argv in (["-v", "plan", str(recipe)], ["plan", str(recipe), "-v"]):
        res = lair(*argv, env={"HF_TOKEN": ""})
        assert res.returncode == 1, res.stderr
        assert "Traceback" in res.stderr and "lair.errors.PlaceholderError" in res.stderr  # -v: the traceback
    quiet = lair("plan", str(recipe))
    assert "Traceback" not in quiet.stderr
