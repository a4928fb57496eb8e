"""scripts/daemon.sh (what scripts/host-setup.sh starts dockerd with): the daemon inherits none of the
caller's file descriptors, so a lock the caller holds (flock) is not held for the daemon's life."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_daemon_inherits_no_descriptor_of_its_caller(tmp_path: Path) -> None:
    lock = tmp_path / "held.lock"
    script = (
        f". {ROOT / 'scripts' / 'daemon.sh'}; exec 7>{lock}; exec 9<{ROOT / 'README.md'}; "
        f"start_daemon {tmp_path / 'daemon.log'} sleep 30; echo $!"
    )
    pid = int(subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout)
    try:
        deadline = time.monotonic() + 10
        # in its sleep, not just exec'd: while the loader runs it holds ld.so.cache and libc open for a moment
        while "nanosleep" not in Path(f"/proc/{pid}/wchan").read_text():
            assert time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.01)
        assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] == b"sleep"
        fds = sorted(int(n) for n in os.listdir(f"/proc/{pid}/fd"))
        assert fds == [0, 1, 2]
        assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
        assert os.getsid(pid) == pid  # its own session
        probe = subprocess.run(["flock", "-n", str(lock), "true"])  # the caller is gone: the lock is free
        assert probe.returncode == 0
    finally:
        os.kill(pid, 15)


def test_host_setup_starts_dockerd_through_it() -> None:
    text = (ROOT / "scripts" / "host-setup.sh").read_text()
    assert '. "$(dirname "$0")/daemon.sh"' in text and "start_daemon /var/log/dockerd.log dockerd" in text
    assert "setsid dockerd" not in text
