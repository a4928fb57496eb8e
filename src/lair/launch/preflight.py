"""Prepare-stage checks on a node before anything starts: ports free, image there (or pulled).

Ports: ``ss -Hltnp`` on the node lists listeners with their process (``users:(("name",pid=N,..))``);
a held port fails the launch naming that process (its pid, process group and command line) and, when
it is the main process of another lair run in the journal, that run.

Pulls: ``IMAGE`` is looked up with ``docker|podman image inspect``; with ``--pull missing`` (default)
a missing image is pulled, ``always`` pulls anyway, ``never`` fails when it is missing. podman is
never asked to pull a short name (no registry host): its search registries could resolve it to
anything. The pull's output is streamed line by line to the progress log (stderr) and has a timeout
of its own. A container engine that does not answer (docker's "Cannot connect to the Docker daemon",
podman's "Cannot connect to Podman") is said as such, with how to start it, not as a failed pull.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING

from lair.errors import LaunchError

if TYPE_CHECKING:
    from lair.plan import Step
    from lair.runners import Runner

__all__ = ["PORT_SCRIPT", "busy_line", "check_ports", "engine_down", "holder_run", "pull_image", "start_hint"]

PORT_SCRIPT = r"""command -v ss >/dev/null 2>&1 || { echo "lair: no ss (iproute2) on the node" >&2; exit 3; }
for p in {ports}; do
  line=$(ss -Hltnp "sport = :$p" 2>/dev/null | head -n 1)
  [ -n "$line" ] || continue
  pid=$(printf '%s' "$line" | sed -n 's/.*pid=\([0-9]*\).*/\1/p')
  pgid=""; cmd=""
  if [ -n "$pid" ]; then
    pgid=$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d ' ')
    cmd=$(tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null | cut -c1-160)
  fi
  printf 'busy\t%s\t%s\t%s\t%s\n' "$p" "$pid" "$pgid" "$cmd"
done
"""


def holder_run(pid: str, pgid: str, address: str) -> str | None:
    """The lair run whose main process (group) on ``address`` holds the port, if any."""
    from lair.launch.journal import ACTIVE, list_journals

    for j in list_journals():
        with contextlib.suppress(Exception):
            r = j.load()
            if r.state in ACTIVE and any(
                n.address == address and n.pid and str(n.pid) in (pid, pgid) for n in r.nodes
            ):
                return r.run_id
    return None


async def check_ports(runner: Runner, node: str, address: str, step: Step) -> None:
    """LaunchError naming the holder of each of ``step.ports`` that is already bound on the node."""
    ports = " ".join(str(int(p)) for p in step.ports or [])
    res = await runner.run(PORT_SCRIPT.replace("{ports}", ports), check=False, timeout=30)
    if res.returncode == 3:
        raise LaunchError(f"{node}: {res.stderr.strip()}", hint="install iproute2 on the node")
    busy = [line.split("\t") for line in res.stdout.splitlines() if line.startswith("busy\t")]
    if not busy:
        return
    lines = [busy_line(node, address, *(b + [""] * (5 - len(b)))[1:5]) for b in busy]
    raise LaunchError(
        "\n".join(lines),
        hint="stop it (a lair run: `lair stop RUN`), or give the recipe another port",
    )


async def pull_image(runner: Runner, node: str, step: Step, say: Callable[[str], None]) -> None:
    """Make sure ``step``'s image is on the node, pulling it per ``step.pull`` (progress via ``say``)."""
    assert step.argv is not None
    binary, image = step.argv[0], step.argv[-1]
    res = await runner.run([binary, "image", "inspect", image], check=False, timeout=60)
    present = res.returncode == 0
    if not present:
        _engine_up(node, binary, res.stderr)
    if step.pull == "never" and not present:
        raise LaunchError(
            f"{node}: image {image} is not there and --pull never was given",
            hint=f"load it on the node (`{binary} pull {image}` or `{binary} load`), or use --pull missing",
        )
    if present and step.pull != "always":
        return
    if binary == "podman" and _short_name(image):
        raise LaunchError(
            f"{node}: image {image} is not in podman's storage on the node (lair does not let podman "
            "pull a short name: its search registries could serve anything under it)",
            hint="pull or load it there first: `podman pull REGISTRY/IMAGE`, or `docker save IMAGE | "
            "podman load`; or write the image with its registry (docker.io/...)",
        )
    say(f"pulling {image} (timeout {step.timeout_s or 0:g}s)")
    await _stream_pull(runner, node, step.argv, step.timeout_s or 3600.0, say)


# what docker (old and new clients) and podman say when their engine is not there to answer
_ENGINE_DOWN = re.compile(
    r"cannot connect to the docker daemon|failed to connect to the docker api|is the docker daemon running"
    r"|cannot connect to podman",
    re.IGNORECASE,
)
_START = {
    "docker": "start Docker on the node (`sudo systemctl start docker`; Docker Desktop: open it), "
    "then launch again",
    "podman": "start podman's service on the node (`systemctl --user start podman.socket`; macOS/Windows: "
    "`podman machine start`), then launch again",
}


def busy_line(node: str, address: str, port: str, pid: str, pgid: str, cmd: str) -> str:
    """``port P on NODE is in use by pid N (group G): CMD`` (and the lair run that holds it, if one)."""
    run = holder_run(pid, pgid, address)
    who = f"pid {pid}" + (f" (group {pgid})" if pgid and pgid != pid else "") if pid else "a process"
    who += f": {cmd.strip()}" if cmd.strip() else ""
    return f"port {port} on {node} is in use by {who}" + (f" - lair run {run}" if run else "")


def engine_down(output: str) -> str | None:
    """The line of a ``docker``/``podman`` command's output that says its engine is down, if one does."""
    return next((line.strip() for line in output.splitlines() if _ENGINE_DOWN.search(line)), None)


def start_hint(binary: str) -> str:
    """How to start ``binary``'s container engine on a node."""
    return _START.get(binary, f"start {binary}'s engine on the node, then launch again")


def _engine_up(node: str, binary: str, output: str) -> None:
    """Raise when ``output`` of a ``docker``/``podman`` command says the container engine is down."""
    said = engine_down(output)
    if said is not None:
        raise LaunchError(
            f"{node}: the {binary} engine is not running: {said}",
            hint=start_hint(binary),
        )


def _short_name(image: str) -> bool:
    """An image name without a registry host (podman would resolve it through search registries)."""
    first = image.split("/", 1)[0]
    return "/" not in image or not ("." in first or ":" in first or first == "localhost")


async def _stream_pull(
    runner: Runner, node: str, argv: list[str], timeout: float, say: Callable[[str], None]
) -> None:
    lines: list[str] = []
    code = None
    try:
        async with asyncio.timeout(timeout):
            script = f'{shlex.join(argv)} 2>&1; echo "@lair-exit $?"'
            it = runner.stream(script)
            try:
                async for line in it:
                    if line.startswith("@lair-exit "):
                        code = int(line.split()[1])
                        break
                    lines.append(line)
                    say(f"pull: {line}")
            finally:
                await it.aclose()  # type: ignore[attr-defined]  # an async generator: kills the pull
    except TimeoutError:
        raise LaunchError(
            f"{node}: {shlex.join(argv)} did not finish in {timeout:g}s (stopped)",
            hint="raise --pull-timeout, or pull the image on the node beforehand",
        ) from None
    if code != 0:
        _engine_up(node, argv[0], "\n".join(lines))
        tail = "\n    ".join(lines[-10:]) or "(no output)"
        raise LaunchError(
            f"{node}: {shlex.join(argv)} failed (exit {code}):\n    {tail}",
            hint="check the image name and the node's registry access, or load the image there",
        )
