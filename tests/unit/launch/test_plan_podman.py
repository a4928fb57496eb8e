"""The podman runtime: the same CLI as Docker, never pulling, and the ulimits a capped host needs."""

from __future__ import annotations

import pytest

from lair.errors import CapabilityError, RunnerError
from lair.launch.node import explain_start_failure
from lair.plan import PODMAN_DEFAULT_ULIMIT, Stage, Target, plan, render_text, runtime_ulimits
from lair.recipe import Recipe, load_text
from lair.rig import Capabilities, set_rig_values

RECIPE = """
engine = "xllamacpp"
runtime = "{runtime}"
docker_image = "lair-test/engine:1"
model = "/model/tiny.gguf"
served_model_name = "tiny"
port = 8123
{extra}
"""
ONE = [Target(name="local", address="127.0.0.1", rank=0, local=True)]
CAPPED = Capabilities(max_ulimit_nofile=16384, max_ulimit_nproc=4096)


def _recipe(runtime: str = "podman", extra: str = "") -> Recipe:
    return load_text(RECIPE.format(runtime=runtime, extra=extra))


def _start(runtime: str = "podman", extra: str = "", caps: Capabilities | None = None) -> list[str]:
    p = plan(
        _recipe(runtime, extra), ONE, run_id="pod-1", capabilities=caps, python=lambda _t: "/venv/python"
    )
    return p.nodes[0].stage(Stage.START)[0].argv or []


def _ulimits(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "--ulimit"]


def test_podman_and_docker_run_the_same_command_with_pull_never() -> None:
    podman, docker = _start("podman"), _start("docker")
    assert podman[:6] == ["podman", "run", "-d", "--pull", "never", "--name"]
    assert podman[1:] == docker[1:] and docker[:5] == ["docker", "run", "-d", "--pull", "never"]
    p = plan(_recipe(), ONE, run_id="pod-2")
    stop, rm = (s.argv for s in p.nodes[0].stage(Stage.STOP))
    assert stop == ["podman", "stop", "--time", "30", "lair-pod-2-r0"]
    assert rm == ["podman", "rm", "-f", "-v", "lair-pod-2-r0"]


def test_the_container_runs_its_own_python_not_the_nodes() -> None:
    argv = _start("podman")
    i = argv.index("--entrypoint")
    assert argv[i : i + 5] == [
        "--entrypoint",
        "python3",
        "lair-test/engine:1",
        "-m",
        "lair.engines.xllamacpp_server",
    ]
    assert "/venv/python" not in argv


def test_capped_host_gets_explicit_ulimits_and_the_plan_says_so() -> None:
    p = plan(_recipe(), ONE, run_id="pod-3", capabilities=CAPPED)
    argv = p.nodes[0].stage(Stage.START)[0].argv or []
    assert _ulimits(argv) == ["nofile=16384:16384", "nproc=4096:4096"]
    assert argv.index("--ulimit") < argv.index("--env-file") < argv.index("lair-test/engine:1")
    assert [a.split(" (")[0] for a in p.run.added] == [
        "--ulimit nofile=16384:16384",
        "--ulimit nproc=4096:4096",
    ]
    assert "  added: --ulimit nproc=4096:4096 (the hosts cap nproc" in render_text(p)


def test_docker_and_uncapped_hosts_get_no_added_ulimits() -> None:
    assert _ulimits(_start("docker", caps=CAPPED)) == []
    assert _ulimits(_start("podman")) == []  # the default profile allows podman's own default
    assert runtime_ulimits(_recipe(), Capabilities(max_ulimit_nofile=PODMAN_DEFAULT_ULIMIT)) == {}


def test_the_recipes_own_ulimit_is_kept_within_the_cap() -> None:
    argv = _start(extra='ulimits = { nofile = "8192:8192" }', caps=CAPPED)
    assert _ulimits(argv) == ["nofile=8192:8192", "nproc=4096:4096"]


def test_nproc_is_uncapped_unless_the_profile_says_so() -> None:
    argv = _start(extra='ulimits = { nproc = "-1" }')
    assert _ulimits(argv) == ["nproc=-1"]
    assert runtime_ulimits(_recipe(), Capabilities(max_ulimit_nofile=16384)) == {"nofile": "16384:16384"}


def test_a_recipe_nproc_above_the_cap_is_refused_before_anything_starts() -> None:
    with pytest.raises(CapabilityError) as exc:
        _start(extra='ulimits = { nproc = "65536" }', caps=CAPPED)
    assert "--ulimit nproc=65536: the host accepts nproc up to 4096" in exc.value.render()


def test_rig_capabilities_take_nproc_as_an_integer() -> None:
    rig = set_rig_values(
        "podhost", {"max_ulimit_nofile": "20000", "max_ulimit_nproc": "32768"}, section="capabilities"
    )
    assert (rig.capabilities.max_ulimit_nofile, rig.capabilities.max_ulimit_nproc) == (20000, 32768)
    p = plan(_recipe(), ONE, run_id="pod-4", rig=rig)
    assert _ulimits(p.nodes[0].stage(Stage.START)[0].argv or []) == [
        "nofile=20000:20000",
        "nproc=32768:32768",
    ]


def _failure(stderr: str) -> RunnerError:
    argv = ["podman", "run", "-d", "--pull", "never", "img:1"]
    return RunnerError("command failed", host="local", argv=argv, returncode=125, stderr_tail=stderr)


def test_an_image_missing_from_podman_storage_is_a_plain_error_with_a_hint() -> None:
    exc = explain_start_failure(_failure("Error: img:1: image not known"), "img:1")
    text = exc.render()
    assert text.startswith("local: image img:1 is not in podman's storage on the node")
    assert "exit code: 125" in text and "podman run -d --pull never img:1" in text
    assert "hint: pull or load it there first" in text and "docker save IMAGE | podman load" in text


def test_refused_ulimits_point_at_the_capability_profile() -> None:
    stderr = "Error: runc: ... error setting rlimits for ready process: error setting rlimit type 7: ..."
    exc = explain_start_failure(_failure(stderr), "img:1")
    assert exc.message.startswith("local: the host refuses the container's ulimits")
    assert "max_ulimit_nofile and max_ulimit_nproc" in exc.hint and exc.returncode == 125


def test_other_start_failures_are_left_as_they_are() -> None:
    original = _failure("Error: something else")
    assert explain_start_failure(original, "img:1") is original
