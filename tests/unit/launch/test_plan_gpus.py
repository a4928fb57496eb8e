"""GPU access in plans, per capability profile: --gpus, CDI devices, per-node selections, native
CUDA_VISIBLE_DEVICES, and the capability error on hosts without a GPU runtime."""

from __future__ import annotations

import pytest

from lair.errors import CapabilityError, ConfigError
from lair.plan import Stage, Target, plan
from lair.recipe import load_text
from lair.rig import Capabilities

VLLM = 'engine = "vllm"\nruntime = "{runtime}"\ndocker_image = "vllm/vllm-openai:v1"\nmodel = "m"\n{extra}'
ONE = [Target(name="a", address="10.0.0.1", rank=0)]


def _argv(runtime: str = "docker", extra: str = "", caps: Capabilities | None = None, nodes=ONE) -> list[str]:  # type: ignore[no-untyped-def]
    p = plan(load_text(VLLM.format(runtime=runtime, extra=extra)), nodes, run_id="g", capabilities=caps)
    return p.nodes[0].stage(Stage.START)[0].argv or []


def _gpu_flags(argv: list[str]) -> list[str]:
    out = []
    for i, a in enumerate(argv):
        if a == "--gpus" or (a == "--device" and argv[i + 1].startswith("nvidia.com/gpu=")):
            out += [a, argv[i + 1]]
    return out


@pytest.mark.parametrize(
    ("runtime", "access", "gpus", "flags"),
    [
        ("docker", "auto", None, ["--gpus", "all"]),  # a GPU engine gets every GPU by default
        ("docker", "auto", "2", ["--gpus", "2"]),
        ("docker", "auto", "0,3", ["--gpus", '"device=0,3"']),
        ("docker", "auto", "device=1", ["--gpus", '"device=1"']),
        ("docker", "auto", "none", []),
        ("docker", "cdi", None, ["--device", "nvidia.com/gpu=all"]),
        ("docker", "cdi", "2", ["--device", "nvidia.com/gpu=0", "--device", "nvidia.com/gpu=1"]),
        ("podman", "auto", None, ["--device", "nvidia.com/gpu=all"]),  # podman: CDI
        ("podman", "auto", "1,2", ["--device", "nvidia.com/gpu=1", "--device", "nvidia.com/gpu=2"]),
        ("podman", "gpus-flag", "all", ["--gpus", "all"]),
    ],
)
def test_gpu_flags_per_capability_profile(
    runtime: str, access: str, gpus: str | None, flags: list[str]
) -> None:
    extra = f'gpus = "{gpus}"\n' if gpus else ""
    argv = _argv(runtime, extra, Capabilities(gpu_access=access))  # type: ignore[arg-type]
    assert _gpu_flags(argv) == flags
    assert argv.index("--env-file") > max([argv.index(f) for f in flags] or [0])  # before the image


def test_the_plan_shows_the_selection_and_a_node_can_override_it() -> None:
    from lair.plan import render_text

    nodes = [Target(name="a", address="10.0.0.1", rank=0, gpus="1")]
    p = plan(load_text(VLLM.format(runtime="docker", extra="")), nodes, run_id="g2")
    assert p.run.gpus == "all" and p.nodes[0].gpus == "1"
    text = render_text(p)
    assert "  gpus all, pull missing" in text and "rank 0, head, gpus 1" in text and "--gpus 1" in text


def test_a_cpu_engine_gets_no_gpu_unless_asked() -> None:
    custom = 'engine = "custom"\ndocker_image = "i:1"\nentrypoint = ["serve"]\n'
    p = plan(load_text(custom), ONE, run_id="g3")
    assert p.run.gpus == "none" and "--gpus" not in (p.nodes[0].stage(Stage.START)[0].argv or [])
    p = plan(load_text(custom + 'gpus = "all"\n'), ONE, run_id="g4")
    assert _gpu_flags(p.nodes[0].stage(Stage.START)[0].argv or []) == ["--gpus", "all"]


def test_hosts_without_a_gpu_runtime_get_the_capability_error() -> None:
    no_gpu = Capabilities(gpus=False)
    with pytest.raises(CapabilityError, match="--gpus all: the host has no GPU container runtime"):
        _argv(caps=no_gpu)
    nodes = [Target(name="a", address="10.0.0.1", rank=0, gpus="0")]
    with pytest.raises(CapabilityError, match="gpus 0 on a: the host has no GPU container runtime"):
        _argv(extra='gpus = "none"\n', caps=no_gpu, nodes=nodes)
    assert _gpu_flags(_argv(extra='gpus = "none"\n', caps=no_gpu)) == []
    p = plan(
        load_text(VLLM.format(runtime="docker", extra="")),
        ONE,
        run_id="g5",
        capabilities=no_gpu,
        drop_unsupported=True,
    )
    assert p.run.gpus == "none" and p.run.dropped == ["--gpus all (the host has no GPU container runtime)"]


def test_native_processes_get_cuda_visible_devices() -> None:
    native = 'engine = "custom"\nruntime = "native"\nentrypoint = ["serve"]\n'
    assert "CUDA_VISIBLE_DEVICES" not in plan(load_text(native), ONE, run_id="n1").nodes[0].lair_env
    assert (
        plan(load_text(native + 'gpus = "2"\n'), ONE, run_id="n2").nodes[0].lair_env["CUDA_VISIBLE_DEVICES"]
        == "0,1"
    )
    assert (
        plan(load_text(native + 'gpus = "3,1"\n'), ONE, run_id="n3").nodes[0].lair_env["CUDA_VISIBLE_DEVICES"]
        == "3,1"
    )
    assert (
        plan(load_text(native + 'gpus = "none"\n'), ONE, run_id="n4")
        .nodes[0]
        .lair_env["CUDA_VISIBLE_DEVICES"]
        == ""
    )
    env = native + 'gpus = "2"\n[env]\nCUDA_VISIBLE_DEVICES = "5"\n'  # the recipe's own value wins
    assert "CUDA_VISIBLE_DEVICES" not in plan(load_text(env), ONE, run_id="n5").nodes[0].lair_env


def test_a_malformed_selection_is_refused() -> None:
    with pytest.raises(ConfigError, match="not a GPU selection: 'two'"):
        _argv(extra='gpus = "two"\n')
