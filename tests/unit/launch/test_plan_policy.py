"""Host capability profiles and trust: clear errors before anything starts, or a plan without them."""

from __future__ import annotations

import pytest

from lair.errors import AllocationError, CapabilityError, LaunchError, TrustError
from lair.plan import Acceptance, Stage, Target, check_capabilities, fingerprint, plan, risky_requests
from lair.recipe import load_text
from lair.rig import Capabilities

GPU = """
engine = "vllm"
docker_image = "vllm/vllm-openai:v1"
model = "org/m"
gpus = "all"
privileged = true
ipc = "host"
ulimits = { memlock = "-1", nofile = "65536:65536" }
"""
NO_GPU = Capabilities(gpus=False, privileged=False, ulimit_memlock_unlimited=False, max_ulimit_nofile=20000)
ONE = [Target(name="a", address="10.0.0.1", rank=0)]


def test_every_refused_flag_is_named_in_one_error() -> None:
    with pytest.raises(CapabilityError) as exc:
        plan(load_text(GPU), ONE, run_id="c1", capabilities=NO_GPU)
    text = exc.value.render()
    for flag in ("--gpus all", "--privileged", "--ulimit memlock=-1", "--ulimit nofile=65536:65536"):
        assert flag in text
    assert "--drop-unsupported" in text


def test_drop_unsupported_plans_without_them_and_says_so() -> None:
    p = plan(load_text(GPU), ONE, run_id="c2", capabilities=NO_GPU, drop_unsupported=True)
    argv = p.nodes[0].stage(Stage.START)[0].argv or []
    assert "--gpus" not in argv and "--privileged" not in argv and "--ulimit" not in argv
    assert argv[argv.index("--ipc") : argv.index("--ipc") + 2] == ["--ipc", "host"]
    assert len(p.run.dropped) == 4 and p.run.dropped[0].startswith("--gpus all")


def test_default_capabilities_allow_a_gpu_recipe() -> None:
    p = plan(load_text(GPU), ONE, run_id="c3")
    argv = p.nodes[0].stage(Stage.START)[0].argv or []
    assert "--privileged" in argv and "memlock=-1" in argv and argv[argv.index("--gpus") + 1] == "all"


def test_native_runtime_refuses_container_settings() -> None:
    r = load_text('engine = "custom"\nruntime = "native"\nentrypoint = ["sleep", "9"]\nshm_size = "1g"\n')
    assert [u.field for u in check_capabilities(r, Capabilities())] == ["shm_size"]
    with pytest.raises(CapabilityError, match="native runtime"):
        plan(r, ONE, run_id="n1")


def test_runtime_not_offered_by_the_hosts() -> None:
    r = load_text('engine = "custom"\nruntime = "podman"\ndocker_image = "i:1"\nentrypoint = ["x"]\n')
    with pytest.raises(CapabilityError, match="podman"):
        plan(r, ONE, run_id="p1", capabilities=Capabilities(runtimes=["docker"]))
    p = plan(r, ONE, run_id="p2")
    assert (p.nodes[0].stage(Stage.START)[0].argv or [])[0] == "podman"
    assert (p.nodes[0].stage(Stage.STOP)[0].argv or [])[:2] == ["podman", "stop"]


RISKY = """
engine = "custom"
docker_image = "i:1"
entrypoint = ["serve"]
privileged = true
before_serve = ["echo hi"]
[[extra_mounts]]
host = "/var/run/docker.sock"
container = "/var/run/docker.sock"
[[extra_mounts]]
host = "/root/.ssh"
container = "/keys"
[[extra_mounts]]
host = "/"
container = "/host"
[[extra_mounts]]
host = "/data"
container = "/data"
"""


def test_untrusted_recipe_is_refused_until_accepted() -> None:
    r = load_text(RISKY)
    assert risky_requests(r) == [
        "image i:1: its code runs with everything below",
        "entrypoint serve (replaces the image's own command: this runs in the container)",
        "hook sh -c echo hi (before_serve, runs on the node itself)",
        "mount /var/run/docker.sock:/var/run/docker.sock (read-write, a system path, a socket (a container "
        "runtime's socket gives root on the host))",
        "mount /root/.ssh:/keys (read-write, a system path, SSH keys)",
        "mount /:/host (read-write, the host's whole filesystem)",
        "mount /data:/data (read-write)",
        "privileged mode (every device and capability of the host)",
    ]
    with pytest.raises(TrustError, match=r"mount /root/\.ssh"):
        plan(r, ONE, run_id="t1", trusted=False)
    ok = Acceptance(fingerprint=fingerprint(r), source="https://x", requests={}, accepted_at="now")
    assert plan(r, ONE, run_id="t2", trusted=False, acceptance=ok).run.trusted is False
    stale = ok.model_copy(update={"fingerprint": "0" * 64})
    with pytest.raises(TrustError):
        plan(r, ONE, run_id="t3", trusted=False, acceptance=stale)
    assert plan(r, ONE, run_id="t4").run.trusted is True


def test_untrusted_plain_recipe_still_needs_acceptance_of_its_image() -> None:
    r = load_text('engine = "custom"\ndocker_image = "i:1"\nentrypoint = ["serve"]\n')
    with pytest.raises(TrustError) as e:
        plan(r, ONE, run_id="t5", trusted=False)
    assert e.value.risks == [
        "image i:1: its code runs with everything below",
        "entrypoint serve (replaces the image's own command: this runs in the container)",
    ]
    ok = Acceptance(fingerprint=fingerprint(r), source="https://x", requests={}, accepted_at="now")
    assert plan(r, ONE, run_id="t5", trusted=False, acceptance=ok).nodes[0].container == "lair-t5-r0"


def test_too_few_nodes_and_single_node_engines() -> None:
    multi = 'docker_image = "i:1"\nmodel = "m"\nrequired_nodes = 2\ntensor_parallel_size = 2\n'
    multi += 'distributed_backend = "mp"\n'
    two = load_text('engine = "vllm"\n' + multi)
    with pytest.raises(AllocationError, match="needs 2 nodes, 1 given"):
        plan(two, ONE, run_id="a1")
    llama = load_text('engine = "llamacpp"\n' + multi)
    nodes = [*ONE, Target(name="b", address="10.0.0.2", rank=1)]
    with pytest.raises(LaunchError, match="does not span nodes"):
        plan(llama, nodes, run_id="a2")
