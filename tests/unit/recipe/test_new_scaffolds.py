"""``lair new`` for every engine x runtime, through the real ``lair check`` and ``lair plan``; bad
options write nothing; check reports what plan refuses (one rule, lair.recipe.runtime_rules)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lair.cli import main
from lair.recipe.runtime_rules import CONTAINER_ONLY
from lair.recipe.scaffold import ENGINE_DEFAULTS, RUNTIMES

ENGINES = sorted(ENGINE_DEFAULTS)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _model(engine: str, tmp_path: Path) -> str:
    return str(tmp_path / "models" / ("Qwen3-8B-Q4.gguf" if ENGINE_DEFAULTS[engine].gguf else "Qwen3-8B"))


def _start_argv(plan: dict[str, object]) -> list[str]:
    node = plan["nodes"][0]  # type: ignore[index]
    starts = [s for s in node["steps"] if s["stage"] == "start"]
    return [a for s in starts for a in s["argv"]]


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("engine", ENGINES)
def test_each_engine_and_runtime_checks_and_plans(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, engine: str, runtime: str
) -> None:
    target, model = tmp_path / "r.toml", _model(engine, tmp_path)
    rc, _, err = run(capsys, "new", str(target), "--engine", engine, "--runtime", runtime, "--model", model)
    assert rc == 0, err
    rc, out, _ = run(capsys, "check", str(target), "--json")
    assert rc == 0 and json.loads(out)["errors"] == []
    assert not [w for w in json.loads(out)["warnings"] if w["code"] == "runtime"]
    rc, out, err = run(capsys, "plan", str(target), "--json")
    assert rc == 0, err
    argv = _start_argv(json.loads(out))
    assert model in " ".join(argv) and "{MODEL_DIR}" not in out
    if runtime != "native":
        assert (ENGINE_DEFAULTS[engine].image in argv) and argv[0] == runtime
    text = target.read_text()
    assert f"{Path(model).name.removesuffix('.gguf')} on {ENGINE_DEFAULTS[engine].label} ({runtime}" in text


@pytest.mark.parametrize("engine", ENGINES)
def test_without_model_the_placeholder_default_plans(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, engine: str
) -> None:
    target = tmp_path / "r.toml"
    assert run(capsys, "new", str(target), "--engine", engine)[0] == 0
    rc, out, err = run(capsys, "plan", str(target), "--json")
    assert rc == 0, err
    assert "/models/my-model" in " ".join(_start_argv(json.loads(out)))


def test_sglang_gets_the_sglang_image_and_flags(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "s.toml"
    run(capsys, "new", str(target), "--engine", "sglang", "--model", "/m/Llama", "--nodes", "2", "--tp", "2")
    rc, out, err = run(capsys, "plan", str(target), "--nodes", "127.0.0.1,127.0.0.2", "--json")
    assert rc == 0, err
    argv = " ".join(_start_argv(json.loads(out)))
    assert "lmsysorg/sglang" in argv and "sglang.launch_server" in argv
    assert "--context-length 32768" in argv and "--mem-fraction-static 0.88" in argv
    assert "vllm" not in argv and "--max-model-len" not in argv and "--gpu-memory-utilization" not in argv


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--engine", "nope"], "no scaffold for engine 'nope'"),
        (["--runtime", "k8s"], "unknown runtime 'k8s'"),
        (["--engine", "llamacpp", "--nodes", "2"], "does not split one model over nodes"),
        (["--runtime", "native", "--image", "x/y:1"], "--image is for the docker and podman runtimes"),
        (["--tp", "0"], "at least 1"),
        (["--model", "{X}"], "--model expects a path"),
    ],
)
def test_invalid_options_write_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], message: str
) -> None:
    target = tmp_path / "sub" / "bad.toml"
    rc, _, err = run(capsys, "new", str(target), *argv)
    assert rc == 1 and message in err
    assert not target.exists() and not target.parent.exists()


def test_check_reports_what_plan_refuses(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Every container-only setting on a native recipe: check warns at each key, plan refuses each."""
    target = tmp_path / "n.toml"
    target.write_text(
        'engine = "custom"\nruntime = "native"\nentrypoint = ["sleep", "60"]\nshm_size = "1g"\n'
        'memory_limit = "2g"\ncpus = 2\nipc = "host"\npid = "host"\nextra_mounts_manifest = "/m.txt"\n'
        'devices = ["/dev/null"]\ncap_add = ["SYS_NICE"]\nprivileged = true\n'
        '[ulimits]\nnofile = "1024"\n[[extra_mounts]]\nhost = "/a"\ncontainer = "/a"\n'
    )
    rc, out, _ = run(capsys, "check", str(target), "--json")
    warned = {w["path"] for w in json.loads(out)["warnings"] if "lair plan refuses it" in w["message"]}
    assert rc == 0 and warned == {f for f, _ in CONTAINER_ONLY}
    assert all(w["line"] > 1 for w in json.loads(out)["warnings"])  # located at each key
    assert run(capsys, "check", str(target), "--strict")[0] == 1
    rc, _, err = run(capsys, "plan", str(target))
    assert rc == 1 and "cannot run this recipe as written" in err
    assert all(flag in err for _, flag in CONTAINER_ONLY)


def test_the_seed_example_checks_and_plans(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 000 (native, serve.sh starts its own container): check and plan agree that it runs."""
    seed = Path(__file__).resolve().parents[3] / "examples" / "dsv41-1017-engram-ssd" / "recipe.toml"
    rc, out, _ = run(capsys, "check", str(seed), "--json", "--strict")
    assert rc == 0 and json.loads(out)["warnings"] == []
    monkeypatch.setenv("API_KEY", "sk-seed-test-key")
    rc, out, err = run(capsys, "plan", str(seed), "--json")
    assert rc == 0, err
    assert "sk-seed-test-key" not in out
