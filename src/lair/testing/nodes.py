"""Throwaway SSH nodes on one Linux machine (root): N network namespaces on a private bridge, each
with its own address, hostname (UTS namespace) and sshd (own host key, key-only root login), and
optionally its own Docker engine. They share the host's filesystem, users and PIDs.

    with NetnsNodes(2) as nodes:                     # or NetnsNodes(2, dockerd=True)
        nodes.write_cluster("test")                  # [clusters.test] in lair's clusters file
        ... lair launch --cluster test ...

    python -m lair.testing.nodes up 2 --cluster test [--dockerd]   |  down PREFIX

Names (``prefix``, ``bridge``) and the /24 (``subnet``) default to values derived from the pid and
checked against the addresses in use, so parallel test runs do not collide. Teardown kills every
process inside the namespaces (also ones that tests started there), deletes veths, namespaces, the
bridge and the iptables rule, and unmounts the per-node Docker folders.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lair.inventory import Cluster

__all__ = ["HOST_CAPABILITIES", "SESSION_PATH", "NetnsNodes", "TestNode", "free_subnet"]

SSHD = "/usr/sbin/sshd"
# What a plain Docker engine without GPUs accepts (see docs/clusters.md): written into test clusters.
HOST_CAPABILITIES: dict[str, Any] = {
    "gpus": False,
    "privileged": False,
    "ulimit_memlock_unlimited": False,
    "max_ulimit_nofile": 20000,
    "devices": True,
}

SESSION_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # sshd's own default
SSHD_CONFIG = """\
ListenAddress {address}
Port 22
HostKey {dir}/ssh_host_ed25519_key
PidFile {dir}/sshd.pid
AuthorizedKeysFile {base}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AcceptEnv *
MaxStartups 100:30:200
MaxSessions 50
{setenv}
Subsystem sftp /usr/lib/openssh/sftp-server
"""


@dataclass(frozen=True)
class TestNode:
    """One namespace node: ``name`` is also its netns name and hostname."""

    __test__ = False  # not a pytest test class

    name: str
    address: str
    dir: Path
    docker_host: str | None = None  # unix:///.../docker.sock when it has its own dockerd

    @property
    def netns(self) -> str:
        return f"/var/run/netns/{self.name}"

    @property
    def bin_dir(self) -> Path:
        """First on the PATH of the node's SSH sessions (empty): a test puts a stand-in command
        there (a ``date`` that is off, an ``nvidia-smi``) for that node alone."""
        return self.dir / "bin"


def _run(*argv: str, check: bool = True, **kw: Any) -> subprocess.CompletedProcess[str]:
    """``argv``'s result; a command not installed exits 127 as in a shell (a clean-up goes on)."""
    try:
        done = subprocess.run(argv, check=False, capture_output=True, text=True, **kw)
    except FileNotFoundError:
        done = subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: not found: run scripts/host-setup.sh")
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
    return done


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while n:
        n, r = divmod(n, 36)
        out = digits[r] + out
    return out or "0"


_SEQ = itertools.count()
_CLAIMED_SUBNETS: set[str] = set()  # handed out in this process (an instance may not be up yet)


def free_subnet(start: int | None = None) -> str:
    """A ``10.231.X`` /24 that no interface on this machine uses (first three octets)."""
    used = _run("ip", "-4", "-o", "addr", "show").stdout
    first = start if start is not None else 20 + os.getpid() % 200
    for i in range(230):
        net = f"10.231.{(first + i) % 230 + 20}"
        if f" {net}." not in used and net not in _CLAIMED_SUBNETS:
            _CLAIMED_SUBNETS.add(net)
            return net
    raise RuntimeError("no free 10.231.X/24 subnet")


def _free_tag() -> str:
    """A name tag unique to this instance: the pid, a per-process sequence number, and no namespace or
    state folder of that name on the machine (two instances in one process never share a tag)."""
    pid = _base36(os.getpid() % 36**4)
    for _ in range(36**2):
        tag = pid + _base36(next(_SEQ) % 36**2).rjust(2, "0")
        if not Path(f"/run/netns/ln{tag}n1").exists() and not Path(f"/var/tmp/lair-nodes-ln{tag}n").exists():
            return tag
    raise RuntimeError("no free name for test nodes")


class NetnsNodes:
    """``count`` SSH nodes in network namespaces; a context manager (``up`` on enter, ``down`` on exit)."""

    def __init__(
        self,
        count: int = 2,
        *,
        prefix: str | None = None,
        bridge: str | None = None,
        subnet: str | None = None,
        base_dir: Path | None = None,
        dockerd: bool = False,
        session_paths: dict[int, str] | None = None,
    ) -> None:
        """``session_paths``: the PATH (after the node's bin folder) of node i's SSH sessions, by
        number from 1, instead of sshd's default (a node without some command installed)."""
        tag = _free_tag()
        self.session_paths = dict(session_paths or {})
        self.count = count
        self.prefix = prefix or f"ln{tag}n"
        self.bridge = bridge or f"ln{tag}br"
        if len(self.bridge) > 15 or len(self.prefix) + 3 > 15:
            raise ValueError("prefix/bridge too long for Linux interface names (15)")
        self.subnet = subnet or free_subnet()
        self.base = base_dir or Path("/var/tmp") / f"lair-nodes-{self.prefix}"
        self.dockerd = dockerd
        self.nodes: list[TestNode] = []
        self.cluster_name: str | None = None  # set by write_cluster
        self._daemons: list[subprocess.Popen[bytes]] = []  # dockerd children, reaped in down()

    # -- paths ---------------------------------------------------------------------------------
    @property
    def key_path(self) -> Path:
        """The client private key every node accepts for root."""
        return self.base / "id_ed25519"

    @property
    def known_hosts_path(self) -> Path:
        return self.base / "known_hosts"

    @property
    def ssh_config_path(self) -> Path:
        """An OpenSSH client config with a ``Host`` entry per node (``ssh -F PATH NAME``)."""
        return self.base / "ssh_config"

    # -- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> NetnsNodes:
        try:
            return self.up()
        except BaseException:
            self.down()
            raise

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> NetnsNodes:
        """Create the bridge, the namespaces and their sshd (and dockerd); wait until they answer."""
        if os.geteuid() != 0:
            raise RuntimeError("SSH test nodes need root (network namespaces, veths, sshd on port 22)")
        missing = [t for t in (SSHD, "ip", "nsenter", "unshare", "iptables") if not shutil.which(t)]
        if missing or (self.dockerd and not shutil.which("dockerd")):
            raise RuntimeError(f"SSH test nodes need {missing or ['dockerd']}: run scripts/host-setup.sh")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        self.base.mkdir(parents=True, exist_ok=True)
        self._client_key()
        self._bridge_up()
        self.nodes = [self._node_up(i) for i in range(1, self.count + 1)]
        self._write_client_files()
        for node in self.nodes:
            _wait_tcp(node.address, 22, deadline_s=20)
            if node.docker_host:
                _wait_docker(node, deadline_s=60)
        (self.base / "state.json").write_text(json.dumps(self.describe(), indent=2))
        return self

    def down(self) -> None:
        """Stop everything ``up`` started and remove every trace (idempotent)."""
        for pidfile in self.base.glob("*/*.pid"):
            _kill_pidfile(pidfile)
        for i in range(1, self.count + 1):
            self._node_down(f"{self.prefix}{i}")
        _run("ip", "link", "del", self.bridge, check=False)
        while _run(*self._forward_rule("-D"), check=False).returncode == 0:
            pass
        self._unmount_docker_dirs()
        for proc in self._daemons:  # reap them (their pidfiles were killed above)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._daemons = []
        shutil.rmtree(self.base, ignore_errors=True)
        self.nodes = []

    # -- helpers for tests ---------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        return {
            "prefix": self.prefix,
            "bridge": self.bridge,
            "subnet": self.subnet,
            "key": str(self.key_path),
            "nodes": [
                {"name": n.name, "address": n.address, "docker_host": n.docker_host} for n in self.nodes
            ],
        }

    def cluster_fields(self) -> dict[str, Any]:
        """A ``[clusters.NAME]`` table for these nodes (host keys pinned: ``known_hosts = strict``)."""
        return {
            "known_hosts": "strict",
            "known_hosts_file": str(self.known_hosts_path),
            "connect_timeout_s": 10.0,
            "capabilities": dict(HOST_CAPABILITIES),
            "nodes": [
                {"name": n.name, "address": n.address, "user": "root", "key": str(self.key_path), "rank": i}
                for i, n in enumerate(self.nodes)
            ],
        }

    def cluster(self, name: str = "test-nodes") -> Cluster:
        """These nodes as an inventory cluster (nodes bound to its SSH settings), without any file."""
        from lair.inventory import parse_inventory

        return parse_inventory({"clusters": {name: self.cluster_fields()}}, "test nodes").get(name)

    def write_cluster(self, name: str, clusters_file: Path | None = None) -> None:
        """Write (or replace) ``[clusters.NAME]`` in lair's clusters file (default: the current one)."""
        from lair.inventory import add_cluster

        add_cluster(name, self.cluster(name), replace=True, path=clusters_file)
        self.cluster_name = name

    def ssh_argv(self, node: TestNode, *command: str) -> list[str]:
        """An OpenSSH command line that runs ``command`` on ``node``."""
        return ["ssh", "-n", "-F", str(self.ssh_config_path), node.name, *command]

    def stop_dockerd(self, node: TestNode) -> None:
        """Stop the node's own Docker engine (as when it is down); :meth:`start_dockerd` brings it back."""
        pidfile = node.dir / "dockerd.pid"
        pid = int(pidfile.read_text().split()[0])
        _kill_pidfile(pidfile)
        for proc in [p for p in self._daemons if p.pid == pid]:  # nsenter execs dockerd: one pid
            proc.wait(timeout=30)
            self._daemons.remove(proc)
        if not _wait_gone(lambda: Path(f"/proc/{pid}/cmdline").exists(), deadline_s=30):
            raise RuntimeError(f"dockerd of {node.name} (pid {pid}) did not stop")

    def start_dockerd(self, node: TestNode) -> None:
        if not node.docker_host:
            raise RuntimeError(f"{node.name} has no dockerd of its own (NetnsNodes(dockerd=True))")
        self._start_dockerd(node)
        _wait_docker(node, deadline_s=60)

    def load_image(self, tag: str, nodes: Sequence[TestNode] | None = None) -> None:
        """``docker save TAG`` once, then ``docker load`` of that archive into each node's own Docker
        engine at the same time (the 2.5 GB vLLM image: one save instead of one per node)."""
        targets = list(nodes or self.nodes)
        for node in targets:
            if not node.docker_host:
                raise RuntimeError(f"{node.name} has no dockerd of its own (NetnsNodes(dockerd=True))")
        archive = self.base / "image.tar"
        try:
            saved = subprocess.run(["docker", "save", "-o", str(archive), tag], capture_output=True)
            if saved.returncode != 0:
                raise RuntimeError(f"docker save {tag}: {saved.stderr.decode(errors='replace')}")
            loads = []
            for node in targets:
                env = {**os.environ, "DOCKER_HOST": str(node.docker_host)}
                with archive.open("rb") as f:
                    loads.append(
                        (
                            node,
                            subprocess.Popen(
                                ["docker", "load", "-q"], stdin=f, env=env, stderr=subprocess.PIPE
                            ),
                        )
                    )
            for node, load in loads:
                _, stderr = load.communicate()
                if load.returncode != 0:
                    raise RuntimeError(f"loading {tag} into {node.name}: {stderr.decode(errors='replace')}")
        finally:
            archive.unlink(missing_ok=True)

    # -- internals -----------------------------------------------------------------------------
    def _client_key(self) -> None:
        if not self.key_path.exists():
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "lair-test", "-f", str(self.key_path))
        auth = self.base / "authorized_keys"
        shutil.copyfile(self.key_path.with_suffix(".pub"), auth)
        auth.chmod(0o600)

    def _forward_rule(self, action: str) -> list[str]:
        # Docker sets the FORWARD policy to DROP and br_netfilter sends bridged frames through it:
        # without this rule node<->node traffic times out (host<->node still works).
        return ["iptables", action, "FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT"]

    def _bridge_up(self) -> None:
        if _run("ip", "link", "show", self.bridge, check=False).returncode != 0:
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            _run("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
        if _run(*self._forward_rule("-C"), check=False).returncode != 0:
            rule = self._forward_rule("-I")
            _run(*rule[:3], "1", *rule[3:])

    def _node_up(self, i: int) -> TestNode:
        name, address = f"{self.prefix}{i}", f"{self.subnet}.{10 + i}"
        d = self.base / name
        d.mkdir(parents=True, exist_ok=True)
        _run("ip", "link", "del", f"v{name}", check=False)  # leftover of an earlier run
        _run("ip", "netns", "add", name)
        _run("ip", "link", "add", f"v{name}", "type", "veth", "peer", "name", "eth0", "netns", name)
        _run("ip", "link", "set", f"v{name}", "master", self.bridge, "up")
        _run("ip", "-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
        _run("ip", "-n", name, "link", "set", "eth0", "up")
        _run("ip", "-n", name, "link", "set", "lo", "up")
        node = TestNode(name, address, d, f"unix://{d}/docker.sock" if self.dockerd else None)
        if self.dockerd:
            self._start_dockerd(node)
        self._start_sshd(node)
        return node

    def _start_dockerd(self, node: TestNode) -> None:
        # nsenter --net (not `ip netns exec`, which remounts /sys and hides the cgroup mounts)
        log = (node.dir / "dockerd.log").open("wb")
        proc = subprocess.Popen(
            ["nsenter", f"--net={node.netns}", "dockerd", "--host", str(node.docker_host),
             "--data-root", f"/var/lib/{node.name}-docker", "--exec-root", f"/run/{node.name}-docker",
             "--pidfile", str(node.dir / "dockerd.pid"), "--bridge", "none",
             "--iptables=false", "--ip-masq=false"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        self._daemons.append(proc)
        log.close()

    def _start_sshd(self, node: TestNode) -> None:
        key = node.dir / "ssh_host_ed25519_key"
        if not key.exists():
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
        node.bin_dir.mkdir(exist_ok=True)
        path = self.session_paths.get(int(node.name.removeprefix(self.prefix)), SESSION_PATH)
        setenv = f"SetEnv PATH={node.bin_dir}:{path}" + (
            f" DOCKER_HOST={node.docker_host}" if node.docker_host else ""
        )
        cfg = SSHD_CONFIG.format(address=node.address, dir=node.dir, base=self.base, setenv=setenv)
        (node.dir / "sshd_config").write_text(cfg)
        inner = f"hostname {node.name} && exec {SSHD} -f {node.dir}/sshd_config -E {node.dir}/sshd.log"
        _run("nsenter", f"--net={node.netns}", "unshare", "--uts", "sh", "-c", inner)

    def _write_client_files(self) -> None:
        hosts, config = [], []
        for n in self.nodes:
            pub = (n.dir / "ssh_host_ed25519_key.pub").read_text().split()
            hosts.append(f"{n.address} {pub[0]} {pub[1]}\n")
            config.append(
                f"Host {n.name}\n  HostName {n.address}\n  User root\n  IdentityFile {self.key_path}\n"
                f"  UserKnownHostsFile {self.known_hosts_path}\n  StrictHostKeyChecking yes\n"
                "  LogLevel ERROR\n  ConnectTimeout 5\n"
            )
        self.known_hosts_path.write_text("".join(hosts))
        self.ssh_config_path.write_text("".join(config))

    def _node_down(self, name: str) -> None:
        if _run("ip", "netns", "pids", name, check=False).returncode != 0:
            _run("ip", "link", "del", f"v{name}", check=False)
            return
        _kill_netns_processes(name)
        _run("ip", "link", "del", f"v{name}", check=False)  # removes both ends at once
        _run("ip", "netns", "del", name, check=False)

    def _unmount_docker_dirs(self) -> None:
        roots = tuple(f"{top}/{self.prefix}" for top in ("/var/lib", "/run"))
        _wait_gone(lambda: any(_dockerd_running(r) for r in roots), deadline_s=15)
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        for m in sorted((m for m in mounts if m.startswith(roots)), reverse=True):
            _run("umount", "-l", m, check=False)
        for i in range(1, self.count + 1):
            for top in ("/var/lib", "/run"):
                _remove_later(Path(f"{top}/{self.prefix}{i}-docker"))


def _remove_later(path: Path) -> None:
    """Move ``path`` out of the way at once and delete it in a detached ``rm -rf``: a node's docker
    data holds the images loaded into it (gigabytes in tens of thousands of files)."""
    if not path.exists():
        return
    trash = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.trash")
    try:
        path.rename(trash)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
        return
    subprocess.run(  # the shell leaves rm running on its own and exits: nothing to reap here
        ["sh", "-c", 'rm -rf -- "$1" &', "rm", str(trash)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        close_fds=True,
        start_new_session=True,
        check=False,
    )


def _kill_pidfile(pidfile: Path) -> None:
    try:
        os.kill(int(pidfile.read_text().split()[0]), 15)
    except (OSError, ValueError, IndexError):
        pass


def _netns_pids(name: str) -> list[int]:
    out = _run("ip", "netns", "pids", name, check=False).stdout
    return [int(p) for p in out.split()]


def _kill_netns_processes(name: str) -> None:
    """SIGTERM everything in the namespace, then SIGKILL what is left after a grace period."""
    for sig, grace in ((15, 10.0), (9, 5.0)):
        for pid in _netns_pids(name):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if _wait_gone(lambda: bool(_netns_pids(name)), deadline_s=grace):
            return


def _dockerd_running(root: str) -> bool:
    for p in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if root.encode() in p.read_bytes() and b"dockerd" in p.read_bytes():
                return True
        except OSError:
            continue
    return False


def _wait_gone(busy: Any, deadline_s: float) -> bool:
    """Poll ``busy()`` until it is false or the deadline passes; True when it became false."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if not busy():
            return True
        time.sleep(0.05)
    return not busy()


def _wait_tcp(address: str, port: int, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while True:
        try:
            with socket.create_connection((address, port), timeout=1):
                return
        except OSError:
            if time.monotonic() > end:
                raise RuntimeError(f"sshd on {address}:{port} did not answer in {deadline_s:g} s") from None
            time.sleep(0.05)


def _wait_docker(node: TestNode, deadline_s: float) -> None:
    env = {**os.environ, "DOCKER_HOST": str(node.docker_host)}
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if _run("docker", "version", check=False, env=env, timeout=10).returncode == 0:
            return
        time.sleep(0.2)
    log = (node.dir / "dockerd.log").read_text(errors="replace")[-2000:]
    raise RuntimeError(f"dockerd of {node.name} did not start:\n{log}")


def main(argv: Sequence[str] | None = None) -> int:
    """``up N [--cluster NAME] [--dockerd] [--prefix P]`` (prints the state JSON) or ``down --prefix P``."""
    ap = argparse.ArgumentParser(prog="python -m lair.testing.nodes")
    ap.add_argument("action", choices=("up", "down"))
    ap.add_argument("count", nargs="?", type=int, default=2)
    ap.add_argument("--prefix", help="netns name prefix (required for down)")
    ap.add_argument("--bridge")
    ap.add_argument("--subnet", help="first three octets of the /24, e.g. 10.231.57")
    ap.add_argument("--dockerd", action="store_true", help="one Docker engine per node")
    ap.add_argument("--cluster", help="write [clusters.NAME] into lair's clusters file")
    args = ap.parse_args(argv)
    if args.action == "down":
        if not args.prefix:
            ap.error("down needs --prefix (printed by up)")
        state = json.loads((Path("/var/tmp") / f"lair-nodes-{args.prefix}" / "state.json").read_text())
        NetnsNodes(
            len(state["nodes"]), prefix=args.prefix, bridge=state["bridge"], subnet=state["subnet"]
        ).down()
        return 0
    nodes = NetnsNodes(
        args.count, prefix=args.prefix, bridge=args.bridge, subnet=args.subnet, dockerd=args.dockerd
    )
    nodes.up()
    if args.cluster:
        nodes.write_cluster(args.cluster)
    print(json.dumps(nodes.describe(), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
