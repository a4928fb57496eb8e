"""The runner contract, against a local runner and an SSH runner on a real netns sshd node."""

from __future__ import annotations

import asyncio
import random
import signal
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any, TypeVar

import pytest

from lair.errors import RunnerError
from lair.runners import Runner

pytestmark = pytest.mark.integration

T = TypeVar("T")
MakeRunner = Callable[[], Runner]


def drive(make: MakeRunner, body: Callable[[Runner], Awaitable[T]]) -> T:
    """Run ``body(runner)`` in a fresh event loop and close the runner afterwards."""

    async def main() -> T:
        runner = make()
        try:
            return await body(runner)
        finally:
            await runner.close()

    return asyncio.run(main())


async def poll(check: Callable[[], Awaitable[Any]], deadline_s: float = 10.0) -> Any:
    """Await ``check()`` until it is truthy or the deadline passes (then return the last value)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while True:
        value = await check()
        if value or loop.time() > end:
            return value
        await asyncio.sleep(0.05)


def test_run_argv_string_env_stdin(make_runner: MakeRunner) -> None:
    async def body(r: Runner) -> None:
        assert (await r.run(["printf", "%s|", "a b", "$HOME"])).stdout == "a b|$HOME|"
        assert (await r.run("echo $((6 * 7)) | tr 4 x")).stdout == "x2\n"
        res = await r.run(
            "echo $LAIR_T1-$LAIR_T2; cat", env={"LAIR_T1": "one", "LAIR_T2": "two"}, stdin=b"IN"
        )
        assert (res.returncode, res.stdout, res.stderr) == (0, "one-two\nIN", "")

    drive(make_runner, body)


def test_failure_carries_host_command_code_and_stderr_tail(make_runner: MakeRunner) -> None:
    async def body(r: Runner) -> None:
        script = "for i in $(seq 1 40); do echo err$i >&2; done; exit 3"
        with pytest.raises(RunnerError) as info:
            await r.run(script, env={"API_KEY": "s3cr3t-value"})
        e = info.value
        assert (e.host, e.returncode, e.argv) == (r.host, 3, ["sh", "-c", script])
        assert e.stderr_tail.splitlines() == [f"err{i}" for i in range(21, 41)]
        assert "s3cr3t-value" not in e.render()
        assert (await r.run("exit 4", check=False)).returncode == 4

    drive(make_runner, body)


def test_timeout_kills_the_whole_process_group(make_runner: MakeRunner, tmp_path: Path) -> None:
    pids = tmp_path / "pids"

    async def body(r: Runner) -> None:
        with pytest.raises(RunnerError, match="timed out after 1 s"):
            await r.run(f"sleep 300 & echo $! >{pids}; echo $$ >>{pids}; sleep 301", timeout=1)
        children = [int(p) for p in pids.read_text().split()]
        assert len(children) == 2

        async def all_gone() -> bool:
            return not any([await r.is_alive(p) for p in children])

        assert await poll(all_gone)

    drive(make_runner, body)


def test_detached_process_outlives_the_runner(make_runner: MakeRunner, tmp_path: Path) -> None:
    log = str(tmp_path / "logs" / "engine.log")
    handle = drive(
        make_runner,
        lambda r: r.start(
            ["sh", "-c", 'echo "on $(hostname) with $LAIR_MODE"; exec sleep 300'],
            env={"LAIR_MODE": "serve"},
            log_path=log,
            cwd=str(tmp_path),
        ),
    )
    assert Path(handle.pid_path).read_text().strip() == str(handle.pid)

    async def check(r: Runner) -> None:
        assert await r.is_alive(handle.pid)  # a new runner (new SSH connection) still sees it
        hostname = (await r.run("hostname")).stdout.strip()
        assert await poll(lambda: r.tail(log, 5)) == f"on {hostname} with serve\n"
        assert await r.kill(handle.pid, signal.SIGTERM)

        async def gone() -> bool:
            return not await r.is_alive(handle.pid)

        assert await poll(gone)
        assert not await r.kill(4194305)  # above pid_max: no such process group
        assert not await r.is_alive(4194305)

    drive(make_runner, check)


def test_put_file_modes_read_file_and_tail(make_runner: MakeRunner, tmp_path: Path) -> None:
    env_file = str(tmp_path / "run" / "engine.env")
    public = str(tmp_path / "run" / "notes.txt")

    async def body(r: Runner) -> None:
        await r.put_file(env_file, b"HF_TOKEN=secret\n")
        await r.put_file(public, b"".join(b"line %d\n" % i for i in range(10)), mode=0o644)
        assert (await r.run(["stat", "-c", "%a", env_file, public])).stdout.split() == ["600", "644"]
        assert await r.read_file(env_file) == b"HF_TOKEN=secret\n"
        assert await r.tail(public, 2) == "line 8\nline 9\n"
        assert await r.tail(str(tmp_path / "missing"), 2) == ""
        with pytest.raises(RunnerError, match="cannot read file"):
            await r.read_file(str(tmp_path / "missing"))

    drive(make_runner, body)


def test_follow_streams_new_lines_and_stops(make_runner: MakeRunner, tmp_path: Path) -> None:
    path = str(tmp_path / "follow.log")

    async def body(r: Runner) -> None:
        await r.run(f"echo first >{path}")
        seen = []
        async with aclosing(r.follow(path)) as lines:
            async for line in lines:
                seen.append(line)
                if line == "first":
                    await r.run(f"echo second >>{path}; echo third >>{path}")
                if line == "third":
                    break
        assert seen == ["first", "second", "third"]

        async def tail_gone() -> bool:
            return (await r.run(f"pgrep -f '[t]ail -n .* -F {path}'", check=False)).returncode == 1

        assert await poll(tail_gone)

    drive(make_runner, body)


def test_stream_merges_output_and_closing_kills_the_command(make_runner: MakeRunner) -> None:
    naptime = f"300.{random.randrange(10**6):06d}"  # a command line no other process has

    async def body(r: Runner) -> None:
        seen = []
        async with aclosing(r.stream(["sh", "-c", f"echo out; echo err >&2; exec sleep {naptime}"])) as lines:
            async for line in lines:
                seen.append(line)
                if len(seen) == 2:
                    break
        assert sorted(seen) == ["err", "out"]

        async def running() -> bool:
            return (await r.run(["pgrep", "-f", f"[s]leep {naptime}"], check=False)).returncode == 0

        async def gone() -> bool:
            return not await running()

        assert await poll(gone)

    drive(make_runner, body)
