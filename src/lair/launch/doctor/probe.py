"""Read one node's facts with one shell script over its runner (and the clock with one more).

The script prints one ``key<TAB>fields...`` line per fact; :func:`parse` turns them into
:class:`NodeFacts`. It only reads: ``uname``, ``/etc/os-release``, ``df``, ``docker|podman info``,
``/etc/cdi``, ``nvidia-smi --query-gpu``, ``ip -j link|addr``
(iproute2's JSON; ``ip -o`` text where ``-j`` is unknown), ``ip route get HEAD`` and ``ss`` for the
ports (the launcher's own port script, so a busy port is named the same way).

The clock: ``date +%s.%N`` on the node between two readings of this machine's clock; the skew is the
node's time minus the midpoint, good to half the round trip.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lair.launch.doctor.findings import BusyPort, Disk, Gpu, Interface, NodeFacts, Route, RuntimeInfo
from lair.launch.preflight import PORT_SCRIPT

if TYPE_CHECKING:
    from lair.runners import Runner

__all__ = ["ProbeSpec", "parse", "parse_ip_addrs", "parse_ip_links", "probe_node", "read_clock", "script"]

PROBE_TIMEOUT_S = 60.0
_GPU_QUERY = "index,name,memory.total,memory.free,driver_version,persistence_mode"

_BASE = r"""printf 'hostname\t%s\n' "$(hostname 2>/dev/null || cat /proc/sys/kernel/hostname)"
printf 'kernel\t%s\n' "$(uname -sr)"
( . /etc/os-release 2>/dev/null; printf 'os\t%s\n' "${PRETTY_NAME:-unknown}" )
printf 'cpus\t%s\n' "$(nproc 2>/dev/null || echo '')"
awk '/^MemTotal:/ {printf "mem\t%d\n", $2 * 1024}' /proc/meminfo 2>/dev/null
df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 {printf "shm\t%d\n", $2 * 1024}'
"""
_DISK = r"""for d in {paths}; do
  p=$d; while [ ! -e "$p" ] && [ "$p" != / ]; do p=$(dirname "$p"); done
  df -Pk "$p" 2>/dev/null | awk -v d="$d" 'NR == 2 {printf "disk\t%s\t%d\t%s\n", d, $4 * 1024, $6}'
done
"""
_FILES = r"""for d in {paths}; do
  if [ -e "$d" ]; then printf 'file\t%s\t1\n' "$d"; else printf 'file\t%s\t0\n' "$d"; fi
done
"""
_RUNTIMES = r"""for b in {runtimes}; do
  if ! command -v "$b" >/dev/null 2>&1; then printf 'runtime\t%s\tmissing\n' "$b"; continue; fi
  f='{{.ServerVersion}}|{{range $k, $v := .Runtimes}}{{$k}},{{end}}|{{.DockerRootDir}}'
  if [ "$b" = podman ]; then f='{{.Version.Version}}|{{.Host.OCIRuntime.Name}}|{{.Store.GraphRoot}}'; fi
  out=$(timeout 20 "$b" info --format "$f" 2>&1); rc=$?  # its --format hides the error: version says it
  [ $rc -eq 0 ] || out=$(timeout 20 "$b" version --format '{{.Client.Version}}' 2>&1 | tail -n 2)
  printf 'runtime\t%s\t%s\t%s\n' "$b" "$rc" "$(printf '%s' "$out" | tr '\t\n' ' \036' | cut -c1-600)"
  [ $rc -eq 0 ] && r=${out##*|} && [ -d "$r" ] \
    && df -Pk "$r" | awk -v d="$r" 'NR == 2 {printf "disk\t%s\t%d\t%s\n", d, $4 * 1024, $6}'

done
"""
_GPU = r"""for f in /etc/cdi/* /var/run/cdi/*; do [ -f "$f" ] && printf 'cdi\t%s\n' "$f"; done
command -v nvidia-ctk >/dev/null 2>&1 && printf 'ctk\tyes\n'
if command -v nvidia-smi >/dev/null 2>&1; then
  out=$(timeout 20 nvidia-smi --query-gpu={query} --format=csv,noheader,nounits 2>&1); rc=$?
  if [ $rc -eq 0 ]; then printf '%s\n' "$out" | sed 's/^/gpu\t/'
  else printf 'smi\t%s\n' "$(printf '%s' "$out" | tr '\t\n' '  ' | cut -c1-300)"; fi
fi
"""
_NET = r"""if l=$(ip -j link show 2>/dev/null) && a=$(ip -j -4 addr show 2>/dev/null); then
  printf 'links\t%s\n' "$(printf '%s' "$l" | tr -d '\n')"
  printf 'addrs\t%s\n' "$(printf '%s' "$a" | tr -d '\n')"
else  # an iproute2 before 4.13 (or busybox) says "Option -j is unknown": its one-line text form
ip -o link show 2>/dev/null | awk -F': ' '{{ split($2, n, "@"); m = $0;
  sub(/.* mtu /, "", m); sub(/ .*/, "", m);
  up = ($0 ~ /[<,]UP[,>]/) ? 1 : 0; printf "link\t%s\t%s\t%d\n", n[1], m, up }}'
ip -o -4 addr show 2>/dev/null | awk '{{ printf "addr\t%s\t%s\n", $2, $4 }}'
fi
r=$(ip route get {head} 2>&1); printf 'route\t%s\t%s\n' "$?" "$(printf '%s' "$r" | head -n 1)"
"""


@dataclass(frozen=True)
class ProbeSpec:
    """What to read: the head's address (route), disk paths, container runtimes, ports, GPUs."""

    head: str | None = None
    disk_paths: Sequence[str] = ()
    runtimes: Sequence[str] = ("docker", "podman")
    ports: Sequence[int] = ()
    gpus: bool = True
    clock: bool = True
    extra: dict[str, str] = field(default_factory=dict)
    files: Sequence[str] = ()
    """paths the recipe needs on the node (mount sources, a native entrypoint): whether each exists"""


def script(spec: ProbeSpec) -> str:
    parts = [_BASE]
    if spec.disk_paths:
        parts.append(_DISK.replace("{paths}", " ".join(_path_word(p) for p in spec.disk_paths)))
    if spec.files:
        parts.append(_FILES.replace("{paths}", " ".join(_path_word(p) for p in spec.files)))
    if spec.runtimes:
        parts.append(_RUNTIMES.replace("{runtimes}", " ".join(spec.runtimes)))
    if spec.gpus:
        parts.append(_GPU.replace("{query}", _GPU_QUERY))
    if spec.head:
        parts.append(_NET.format(head=shlex.quote(spec.head)))
    if spec.ports:
        ports = " ".join(str(int(p)) for p in spec.ports)
        parts.append("( " + PORT_SCRIPT.replace("{ports}", ports) + " ) 2>/dev/null || true\n")
    return "".join(parts)


def _path_word(path: str) -> str:
    """A path as a shell word; ``~/x`` is the node's own home (``"$HOME"/x``)."""
    return '"$HOME"/' + shlex.quote(path[2:]) if path.startswith("~/") else shlex.quote(path)


async def read_clock(runner: Runner) -> tuple[float, float]:
    """(skew, uncertainty) in seconds: the node's ``date`` minus the midpoint of this machine's
    clock around the call, and half that call's round trip."""
    t0 = time.time()
    res = await runner.run("date +%s.%N", timeout=20)
    t1 = time.time()
    node = float(res.stdout.strip().split()[-1])
    return node - (t0 + t1) / 2, (t1 - t0) / 2


async def probe_node(runner: Runner, name: str, address: str, rank: int, spec: ProbeSpec) -> NodeFacts:
    """The node's facts; a node that cannot be reached is a NodeFacts with ``reachable=False``."""
    try:
        res = await runner.run(script(spec), check=False, timeout=PROBE_TIMEOUT_S)
        skew = await read_clock(runner) if spec.clock else (None, None)
    except Exception as exc:  # connection refused, auth, host key, timeout: the finding says which
        return NodeFacts(name=name, address=address, rank=rank, reachable=False, error=str(exc))
    facts = parse(res.stdout, name=name, address=address, rank=rank, head=spec.head)
    return facts.model_copy(
        update={"clock_skew_s": skew[0], "clock_uncertainty_s": skew[1], "raw": res.stdout + res.stderr}
    )


def parse(text: str, *, name: str, address: str, rank: int, head: str | None = None) -> NodeFacts:
    """NodeFacts from the probe script's output."""
    f: dict[str, object] = {"name": name, "address": address, "rank": rank, "reachable": True}
    disks: list[Disk] = []
    runtimes: list[RuntimeInfo] = []
    gpus: list[Gpu] = []
    links: dict[str, Interface] = {}
    cdi: list[str] = []
    busy: list[BusyPort] = []
    files: dict[str, bool] = {}
    for line in text.split("\n"):  # not splitlines: \x1e (the script's own line break) would split
        key, _, rest = line.partition("\t")
        cols = rest.split("\t")
        if key in ("hostname", "os", "kernel") and rest:
            f[key] = rest.strip()
        elif key == "cpus" and rest.strip().isdigit():
            f["cpus"] = int(rest)
        elif key == "mem" and rest.strip().isdigit():
            f["memory_bytes"] = int(rest)
        elif key == "shm" and rest.strip().isdigit():
            f["shm_bytes"] = int(rest)
        elif key == "disk" and len(cols) == 3 and cols[1].isdigit():
            disks.append(Disk(path=cols[0], free_bytes=int(cols[1]), mount=cols[2]))
        elif key == "file" and len(cols) == 2:
            files[cols[0]] = cols[1] == "1"
        elif key == "runtime" and len(cols) >= 2:
            runtimes.append(_runtime(cols))
        elif key == "cdi":
            cdi.append(rest)
        elif key == "ctk":
            f["nvidia_ctk"] = True
        elif key == "gpu":
            gpus.extend(_gpu(rest))
        elif key == "smi":
            f["nvidia_smi"] = rest
        elif key == "link" and len(cols) == 3 and cols[1].isdigit():
            links[cols[0]] = Interface(name=cols[0], mtu=int(cols[1]), up=cols[2] == "1")
        elif key == "addr" and len(cols) == 2 and cols[0] in links:
            links[cols[0]].addresses.append(cols[1])
        elif key == "links":
            links.update((i.name, i) for i in parse_ip_links(rest))
        elif key == "addrs":
            for ifname, cidr in parse_ip_addrs(rest):
                if ifname in links:
                    links[ifname].addresses.append(cidr)
        elif key == "route" and head:
            f["route"] = _route(head, cols)
        elif key == "busy":
            b = cols + [""] * 4
            busy.append(BusyPort(port=int(b[0]), pid=b[1], pgid=b[2], command=b[3].strip()))
    f.update(disks=disks, runtimes=runtimes, gpus=gpus, interfaces=list(links.values()), cdi_specs=cdi)
    f["busy_ports"] = busy
    f["files"] = files
    return NodeFacts.model_validate(f)


def _ip_json(text: str) -> list[dict[str, Any]]:
    """The objects of one ``ip -j`` answer; none where it is not a JSON list (a broken iproute2)."""
    try:
        data = json.loads(text)
    except ValueError:
        return []
    return [o for o in data if isinstance(o, dict)] if isinstance(data, list) else []


def parse_ip_links(text: str) -> list[Interface]:
    """The interfaces of ``ip -j link show``: name, MTU, and whether it is administratively up (the
    ``UP`` flag, as ``<...,UP,...>`` in the text form). Names are cut at ``@`` as the text form's
    ``eth0@if12`` is (``ip -j`` itself puts the peer in ``link``/``link_index``)."""
    out: list[Interface] = []
    for o in _ip_json(text):
        name, mtu, flags = o.get("ifname"), o.get("mtu"), o.get("flags")
        if not isinstance(name, str) or not name or not isinstance(mtu, int) or isinstance(mtu, bool):
            continue
        up = isinstance(flags, list) and "UP" in flags
        out.append(Interface(name=name.split("@")[0], mtu=mtu, up=up))
    return out


def parse_ip_addrs(text: str) -> list[tuple[str, str]]:
    """(interface, ``ADDRESS/PREFIX``) for each IPv4 address of ``ip -j -4 addr show``, in its order;
    the empty ``{}`` some iproute2 versions print for an interface without one are skipped."""
    out: list[tuple[str, str]] = []
    for o in _ip_json(text):
        name, infos = o.get("ifname"), o.get("addr_info")
        if not isinstance(name, str) or not isinstance(infos, list):
            continue
        for a in infos:
            if not isinstance(a, dict) or a.get("family", "inet") != "inet":
                continue
            local, plen = a.get("local"), a.get("prefixlen")
            if isinstance(local, str) and isinstance(plen, int) and not isinstance(plen, bool):
                out.append((name.split("@")[0], f"{local}/{plen}"))
    return out


def _runtime(cols: list[str]) -> RuntimeInfo:
    name = cols[0]
    if cols[1] == "missing":
        return RuntimeInfo(name=name, installed=False)
    out = (cols[2] if len(cols) > 2 else "").replace("\x1e", "\n").strip()  # the script's line breaks
    if cols[1] != "0" or out.count("|") != 2 or "\n" in out:
        return RuntimeInfo(name=name, installed=True, error=out.strip() or f"exit {cols[1]}")
    version, oci, root = out.split("|")
    names = [r for r in oci.split(",") if r]
    return RuntimeInfo(
        name=name, installed=True, running=True, version=version, runtimes=names, root_dir=root
    )


def _gpu(row: str) -> list[Gpu]:
    c = [x.strip() for x in row.split(",")]
    if len(c) != 6 or not c[0].isdigit():
        return []
    total, free = (int(float(x)) if x.replace(".", "", 1).isdigit() else 0 for x in (c[2], c[3]))
    return [
        Gpu(
            index=int(c[0]),
            name=c[1],
            memory_total_mib=total,
            memory_free_mib=free,
            driver=c[4],
            persistence=c[5],
        )
    ]


def _route(head: str, cols: list[str]) -> Route:
    if len(cols) < 2 or cols[0] != "0":
        return Route(to=head, error=(cols[1] if len(cols) > 1 else "").strip() or "no route")
    words = cols[1].split()

    def after(word: str) -> str | None:
        return words[words.index(word) + 1] if word in words[:-1] else None

    return Route(to=head, dev=after("dev"), src=after("src"), via=after("via"))
