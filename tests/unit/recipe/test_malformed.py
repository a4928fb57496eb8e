"""The malformed-recipe corpus: each file's first error has an exact location, message and hint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lair.recipe import check_file

DATA = Path(__file__).resolve().parents[2] / "data"
EXPECTED: dict[str, dict[str, str]] = json.loads((DATA / "malformed_expected.json").read_text())


def test_corpus_is_large_enough() -> None:
    files = sorted(p.name for p in (DATA / "malformed").iterdir())
    assert len(files) >= 40
    assert files == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_first_error_is_located(name: str) -> None:
    result = check_file(DATA / "malformed" / name)
    assert not result.ok and result.recipe is None
    first = result.errors[0]
    got = f"{first.line}:{first.col} " + (f"{first.path}: " if first.path else "") + first.message
    assert got == EXPECTED[name]["expect"]
    assert first.hint == EXPECTED[name]["hint"]
    assert first.file.endswith(name)


def test_all_errors_of_a_file_in_one_run(tmp_path: Path) -> None:
    bad = tmp_path / "many.toml"
    bad.write_text(
        'engine = "vlm"\nport = "abc"\ncpus = 0\ntensor_paralel_size = 2\n\n'
        '[env]\nX = 1\n\n[meta]\ntitel = "t"\n'
    )
    result = check_file(bad)
    where = [(i.line, i.path) for i in result.errors]
    assert where == [
        (1, "engine"),  # unknown engine 'vlm'
        (1, "engine"),  # runtime 'docker' (the default) needs docker_image: in the same run
        (2, "port"),
        (3, "cpus"),
        (4, "tensor_paralel_size"),
        (7, "env.X"),
        (10, "meta.titel"),
    ]


def test_rendered_error_has_location_and_hint(tmp_path: Path) -> None:
    bad = tmp_path / "r.toml"
    bad.write_text('engine = "vllm"\ndocker_image = "a/b:1"\ntensor_paralel_size = 2\n')
    text = check_file(bad).errors[0].render()
    assert text == (
        f"{bad}:3:1: tensor_paralel_size: unknown key 'tensor_paralel_size'\n\n"
        "hint: did you mean 'tensor_parallel_size'?"
    )
