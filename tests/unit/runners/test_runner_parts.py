"""Pure parts of the runner seam: command text, SSH options, host-key bookkeeping, parallel outcomes."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from lair.errors import RunnerError
from lair.runners import (
    LocalRunner,
    SshOptions,
    SshRunner,
    connect_options,
    raise_for_errors,
    run_all,
    runner_for,
    shell_command,
)
from lair.runners.seam import Runner, argv_list, env_guard, stderr_tail
from lair.runners.ssh import _host_pattern, _known, _known_hosts_arg, _record_host_key


@dataclass(frozen=True)
class Target:
    name: str = "n1"
    address: str = "10.9.9.9"
    user: str = "root"
    port: int = 22
    key: str | None = None
    local: bool = False


def test_shell_command_quotes_lists_and_keeps_strings() -> None:
    assert shell_command(["echo", "a b", "$X"]) == "echo 'a b' '$X'"
    assert shell_command("echo $X | wc -c") == "echo $X | wc -c"
    assert argv_list("true") == ["sh", "-c", "true"]


def test_stderr_tail_keeps_last_lines() -> None:
    text = "\n".join(f"line {i}" for i in range(100))
    assert stderr_tail(text, 3) == "line 97\nline 98\nline 99"


def test_env_guard_names_only_and_fails_when_missing() -> None:
    guard = env_guard({"HF_TOKEN": "s3cret-value"})
    assert "s3cret-value" not in guard and "HF_TOKEN" in guard
    argv = ["sh", "-c", guard + "; echo ran"]
    missing = subprocess.run(argv, capture_output=True, text=True, env={})
    assert missing.returncode == 97 and "HF_TOKEN" in missing.stderr
    present = subprocess.run(argv, capture_output=True, text=True, env={"HF_TOKEN": ""})
    assert present.returncode == 0 and present.stdout == "ran\n"


def test_connect_options_defaults() -> None:
    opts = connect_options(Target(key="/k/id"), SshOptions(known_hosts="off", connect_timeout_s=3))
    assert opts["host"] == "10.9.9.9" and opts["port"] == 22 and opts["username"] == "root"
    assert opts["client_keys"] == ["/k/id"] and opts["known_hosts"] is None
    assert opts["connect_timeout"] == 3 and opts["agent_forwarding"] is False
    assert "config" not in opts
    no_key = connect_options(Target(), SshOptions(ssh_config="/c"))
    assert "client_keys" not in no_key and no_key["config"] == ["/c"]


def test_known_hosts_policies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAIR_HOME", str(tmp_path))
    assert _known_hosts_arg(SshOptions()) == str(tmp_path / "state" / "known_hosts")
    assert _known_hosts_arg(SshOptions(known_hosts="strict")) == ()
    assert _known_hosts_arg(SshOptions(known_hosts="strict", known_hosts_file="/kh")) == "/kh"


def _host_key(tmp_path: Path, name: str) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name)], check=True)
    return (tmp_path / f"{name}.pub").read_text()


def test_record_and_find_host_keys(tmp_path: Path) -> None:
    path, key = tmp_path / "kh", _host_key(tmp_path, "k1")
    assert _host_pattern("10.0.0.1", 22) == "10.0.0.1"
    assert _host_pattern("10.0.0.1", 2222) == "[10.0.0.1]:2222"
    assert not _known(path, "10.0.0.1", 22)
    _record_host_key(path, "[10.0.0.1]:2222", key)
    assert _known(path, "10.0.0.1", 2222) and not _known(path, "10.0.0.1", 22)
    assert path.read_text() == f"[10.0.0.1]:2222 {key.strip()}\n"


def test_hashed_and_pattern_known_hosts_entries_are_found(tmp_path: Path) -> None:
    """Entries as OpenSSH writes them with HashKnownHosts (``ssh-keygen -H``), comma lists and
    wildcards: a hand-written parser of the first field misses all three."""
    path, key = tmp_path / "kh", _host_key(tmp_path, "k1")
    path.write_text(f"[10.0.0.7]:2222 {key}node-a,10.0.0.8 {key}10.0.1.* {key}")
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(path)], check=True, capture_output=True)
    assert "10.0.0.7" not in path.read_text()  # hashed by OpenSSH's own tool
    assert _known(path, "10.0.0.7", 2222)
    assert _known(path, "10.0.0.8", 22)
    assert not _known(path, "10.0.0.9", 22)
    path.write_text(f"10.0.1.* {key}")  # ssh-keygen -H leaves wildcards as they are
    assert _known(path, "10.0.1.5", 22) and not _known(path, "10.0.2.5", 22)


def test_runner_for_picks_local_or_ssh() -> None:
    assert isinstance(runner_for(Target(address="127.0.0.1")), LocalRunner)
    assert isinstance(runner_for(Target(local=True)), LocalRunner)
    ssh = runner_for(Target(), SshOptions(known_hosts="off"))
    assert isinstance(ssh, SshRunner) and ssh.host == "n1" and ssh.options.known_hosts == "off"


class Scripted(Runner):
    """A runner whose transport answers from a table: the input of run/run_all under test."""

    def __init__(self, host: str, rc: int, delay: float = 0.0) -> None:
        self.host, self.rc, self.delay = host, rc, delay

    async def _exec(
        self, script: str, *, env: Mapping[str, str] | None, stdin: bytes | None, timeout: float | None
    ) -> tuple[int, bytes, bytes]:
        await asyncio.sleep(self.delay)  # stands for the node's work
        return self.rc, script.encode(), b"boom\n" if self.rc else b""

    async def _stream(self, script: str) -> AsyncIterator[str]:
        yield script

    async def close(self) -> None:
        return None


def test_run_raises_runner_error_with_details() -> None:
    with pytest.raises(RunnerError) as info:
        asyncio.run(Scripted("n2", 3).run(["false", "x"]))
    e = info.value
    assert (e.host, e.argv, e.returncode, e.stderr_tail) == ("n2", ["false", "x"], 3, "boom")
    assert asyncio.run(Scripted("n2", 3).run("x", check=False)).returncode == 3


def test_run_all_is_parallel_and_collects_every_error() -> None:
    runners = [Scripted("a", 0, 0.3), Scripted("b", 1, 0.3), Scripted("c", 2, 0.3)]
    loop = asyncio.new_event_loop()
    start = loop.time()
    outcomes = loop.run_until_complete(run_all(runners, lambda r: r.run("work")))
    elapsed = loop.time() - start
    loop.close()
    assert elapsed < 0.6  # three 0.3 s jobs at once, not 0.9 s
    assert [o.host for o in outcomes] == ["a", "b", "c"]
    assert outcomes[0].ok and outcomes[0].value is not None and outcomes[0].value.stdout == "work"
    assert [type(o.error) for o in outcomes[1:]] == [RunnerError, RunnerError]
    with pytest.raises(RunnerError) as info:
        raise_for_errors(outcomes)
    assert info.value.host == "b,c" and "2 of 3 nodes failed" in info.value.message


def test_raise_for_errors_reraises_a_single_failure_and_returns_values() -> None:
    ok = asyncio.run(run_all([Scripted("a", 0)], lambda r: r.run("v")))
    assert [r.stdout for r in raise_for_errors(ok)] == ["v"]
    one = asyncio.run(run_all([Scripted("a", 0), Scripted("b", 5)], lambda r: r.run("v")))
    with pytest.raises(RunnerError) as info:
        raise_for_errors(one)
    assert info.value.host == "b" and info.value.returncode == 5
