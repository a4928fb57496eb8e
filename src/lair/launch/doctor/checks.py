"""Node and network checks: each turns facts into findings (severity, what, fix).

reach.ssh        the node answers and lets lair log in
clock.skew       its clock against this machine's (warning above 2 s, error above 30 s)
disk.free        room where models and caches go (warning under 20 GiB, error under 2 GiB)
runtime.missing  the recipe's container engine is not installed
runtime.down     ... installed but not answering
gpu.runtime      GPUs in a container with no NVIDIA runtime and no CDI spec
gpu.persistence  persistence mode off (a GPU node)
net.route        no route from a rank to the head
net.subnet       a rank's address is not on the head's subnet (routed: check the MTU and firewall)
net.mtu          the interface toward the head has another MTU than the head's
net.interface    GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME names no interface of the node
port.busy        the engine's or the rendezvous port is taken
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence

from lair.launch.doctor.findings import Finding, Interface, NodeFacts

__all__ = [
    "CLOCK_ERROR_S",
    "CLOCK_WARN_S",
    "clock_findings",
    "disk_findings",
    "gpu_runtime_findings",
    "interface_findings",
    "network_findings",
    "port_findings",
    "reach_findings",
    "runtime_findings",
]

CLOCK_WARN_S = 2.0
CLOCK_ERROR_S = 30.0
DISK_WARN = 20 * 2**30
DISK_ERROR = 2 * 2**30
IFNAME_ENV = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def _f(check: str, severity: str, node: str | None, what: str, fix: str) -> Finding:
    return Finding(check=check, severity=severity, node=node, what=what, fix=fix)


def reach_findings(n: NodeFacts) -> list[Finding]:
    if n.reachable:
        return []
    fix = (
        f"check that sshd answers on {n.address} and that the cluster's user and key log in "
        f"(`ssh {n.address} true`); `lair cluster show` lists them"
    )
    return [_f("reach.ssh", "error", n.name, f"cannot run a command on {n.address}: {n.error}", fix)]


def clock_findings(n: NodeFacts) -> list[Finding]:
    if n.clock_skew_s is None:
        return []
    off = abs(n.clock_skew_s) - (n.clock_uncertainty_s or 0.0)
    if off <= CLOCK_WARN_S:
        return []
    sev = "error" if off > CLOCK_ERROR_S else "warning"
    side = "ahead of" if n.clock_skew_s > 0 else "behind"
    what = (
        f"clock is {abs(n.clock_skew_s):.1f} s {side} this machine's (+-{n.clock_uncertainty_s or 0:.2f} s): "
        "logs, timeouts and TLS certificates disagree between nodes"
    )
    return [
        _f(
            "clock.skew",
            sev,
            n.name,
            what,
            "sync the clocks: enable NTP (`timedatectl set-ntp true`, chrony)",
        )
    ]


def disk_findings(n: NodeFacts) -> list[Finding]:
    out = []
    for d in n.disks:
        if d.free_bytes >= DISK_WARN:
            continue
        sev = "error" if d.free_bytes < DISK_ERROR else "warning"
        what = f"{d.free_bytes / 2**30:.1f} GiB free for {d.path} (on {d.mount})"
        out.append(
            _f("disk.free", sev, n.name, what, f"free space on {d.mount} or point the cache elsewhere")
        )
    return out


def runtime_findings(n: NodeFacts, runtime: str) -> list[Finding]:
    """The recipe's container engine (``docker``/``podman``) installed and answering."""
    from lair.launch.preflight import engine_down, start_hint

    info = n.runtime(runtime)
    if info is None or info.running:
        return []
    if not info.installed:
        what = f"{runtime} is not installed (the recipe runs in a {runtime} container)"
        pkg = "docker.io" if runtime == "docker" else "podman"
        fix = f"install {runtime} on the node (Debian/Ubuntu: `apt-get install {pkg}`)"
        return [_f("runtime.missing", "error", n.name, what, fix)]
    what = f"the {runtime} engine is not running: {engine_down(info.error or '') or info.error}"
    return [_f("runtime.down", "error", n.name, what, start_hint(runtime))]


def gpu_runtime_findings(n: NodeFacts, runtime: str | None, wants_gpus: bool) -> list[Finding]:
    out = []
    if runtime and wants_gpus and n.gpus:
        info = n.runtime(runtime)
        has_nvidia = info is not None and "nvidia" in info.runtimes
        if not has_nvidia and not n.cdi_specs:
            what = f"{len(n.gpus)} GPUs but {runtime} has no NVIDIA runtime and there is no CDI spec"
            fix = (
                "install the NVIDIA container toolkit and register it: `nvidia-ctk runtime configure "
                f"--runtime={runtime}` (or `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`)"
            )
            out.append(_f("gpu.runtime", "error", n.name, what, fix))
    off = [g.index for g in n.gpus if g.persistence.lower().startswith("disabled")]
    if off and wants_gpus:
        what = f"persistence mode is off on GPU {', '.join(map(str, off))}: each start pays the driver's init"
        out.append(
            _f(
                "gpu.persistence",
                "warning",
                n.name,
                what,
                "`sudo nvidia-smi -pm 1` (or run nvidia-persistenced)",
            )
        )
    return out


def _iface(n: NodeFacts) -> Interface | None:
    return n.interface(n.route.dev) if n.route and n.route.dev else None


def network_findings(nodes: Sequence[NodeFacts], head_addr: str) -> list[Finding]:
    """Route, subnet and MTU from every other rank toward the head."""
    head = next((n for n in nodes if n.rank == 0), None)
    if head is None or len(nodes) < 2 or not head.reachable:
        return []
    h_if = _with_address(head, head_addr)
    out = []
    for n in nodes:
        if not n.reachable or n.route is None:
            continue
        if n.route.error or not n.route.dev:
            to = "the head" if n is not head else "the next rank"
            what = f"no route to {to} {n.route.to}: {n.route.error or 'ip route get said nothing'}"
            fix = (
                f"add a route to {n.route.to} (`ip route add {n.route.to} dev IFACE`) "
                "or fix the cluster's engine_address"
            )
            out.append(_f("net.route", "error", n.name, what, fix))
            continue
        if n is head:
            continue
        out += _subnet(n, h_if, head_addr) + _mtu(n, head, h_if)
    return out


def _with_address(n: NodeFacts, addr: str) -> Interface | None:
    return next((i for i in n.interfaces if any(a.split("/")[0] == addr for a in i.addresses)), None)


def _subnet(n: NodeFacts, h_if: Interface | None, head_addr: str) -> list[Finding]:
    mine = _iface(n)
    if mine is None or h_if is None or n.route is None:
        return []
    nets = {ipaddress.ip_interface(a).network for a in h_if.addresses}
    if n.route.via is None and any(ipaddress.ip_address(head_addr) in net for net in nets):
        return []
    what = (
        f"reaches the head {head_addr} through {n.route.via or 'another network'} on {mine.name}, "
        f"not on the head's subnet ({', '.join(h_if.addresses)})"
    )
    fix = (
        "give the ranks addresses on one subnet (engine_address in the cluster), "
        "or check the MTU and firewall of the routed path"
    )
    return [_f("net.subnet", "warning", n.name, what, fix)]


def _mtu(n: NodeFacts, head: NodeFacts, h_if: Interface | None) -> list[Finding]:
    mine = _iface(n)
    if mine is None or h_if is None or mine.mtu == h_if.mtu:
        return []
    what = (
        f"MTU {mine.mtu} on {mine.name} (toward the head) but {h_if.mtu} on the head's {h_if.name}: "
        "large collective messages stall or drop"
    )
    fix = f"set one MTU on both ends: `ip link set {mine.name} mtu {h_if.mtu}` (and in the switch)"
    return [_f("net.mtu", "error", n.name, what, fix)]


def interface_findings(n: NodeFacts, env: Mapping[str, str]) -> list[Finding]:
    """Interface names the run's env gives gloo/NCCL must exist on the node (NCCL: a prefix
    match unless ``=NAME``; ``^...`` excludes and is not checked)."""
    if not n.reachable or not n.interfaces:
        return []
    names = [i.name for i in n.interfaces]
    toward = _iface(n)
    out = []
    for var in IFNAME_ENV:
        value = env.get(var)
        if not value or value.startswith(("^", "detect:")):
            continue
        for want in (w.strip() for w in value.split(",") if w.strip()):
            if not _iface_matches(var, want, names):
                use = toward.name if toward else "the interface toward the head"
                has = ", ".join(names)
                what = f"{var}={value}: the node has no interface {want.lstrip('=')!r} (it has {has})"
                out.append(
                    _f(
                        "net.interface",
                        "error",
                        n.name,
                        what,
                        f"set {var}={use} (the interface toward the head) or leave it unset",
                    )
                )
    return out


def _iface_matches(var: str, want: str, names: Sequence[str]) -> bool:
    if var == "NCCL_SOCKET_IFNAME" and not want.startswith("="):
        return any(n.startswith(want) for n in names)
    return want.lstrip("=") in names


def port_findings(n: NodeFacts, ports: Sequence[int]) -> list[Finding]:
    from lair.launch.preflight import busy_line

    out = []
    for b in n.busy_ports:
        what = busy_line(n.name, n.address, str(b.port), b.pid, b.pgid, b.command)
        kind = "the engine's port" if b.port == (ports[0] if ports else None) else "a rendezvous port"
        fix = f"stop what holds {kind} {b.port} (a lair run: `lair stop RUN`) or give the recipe another port"
        out.append(_f("port.busy", "error", n.name, what, fix))
    return out
