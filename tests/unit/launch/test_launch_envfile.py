"""Env-file formats and where manifest mounts go in a docker run command."""

from __future__ import annotations

import subprocess
from pathlib import Path

from lair.launch.node import _image_index, env_file_text


def test_native_env_file_is_sourced_by_sh_with_values_intact(tmp_path: Path) -> None:
    env = {"A": "it's a $HOME `x` \\n", "B": "", "C": "plain"}
    f = tmp_path / "env"
    f.write_bytes(env_file_text(env, "native"))
    script = 'set -a; . "$0"; set +a; exec "$@"'
    out = subprocess.run(
        ["sh", "-c", script, str(f), "sh", "-c", 'printf "%s|%s|%s" "$A" "$B" "$C"'],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out == "it's a $HOME `x` \\n||plain"


def test_docker_env_file_is_name_equals_value_verbatim() -> None:
    assert env_file_text({"A": "x y", "B": "'q'"}, "docker") == b"A=x y\nB='q'\n"


def test_manifest_mounts_go_right_before_the_image() -> None:
    with_ep = ["docker", "run", "-d", "--env-file", "/e", "--entrypoint", "sh", "img:1", "-c", "x"]
    assert with_ep[_image_index(with_ep)] == "img:1"
    without = ["docker", "run", "-d", "--env-file", "/e", "img:1", "serve"]
    assert without[_image_index(without)] == "img:1"
