"""The doctor probe's network facts from iproute2's JSON (``ip -j link show``, ``ip -j -4 addr show``):
the real answers of a Debian 12 machine (iproute2 6.1.0) and hand-written ones (a container's veth, a
VLAN, two addresses on one interface), read by hand; and the probe script itself over a stand-in
``ip`` that speaks JSON and over one that does not (``Option "-j" is unknown``): the same facts."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from lair.launch.doctor import checks as C
from lair.launch.doctor.findings import Interface, Route
from lair.launch.doctor.probe import ProbeSpec, parse, parse_ip_addrs, parse_ip_links, script

DATA = Path(__file__).resolve().parents[2] / "data" / "doctor"


def _read(name: str) -> str:
    return (DATA / name).read_text()


REAL = [  # read by hand from ip_j_*.json (and the same moment's ip_o_*.txt): the build machine, its
    # docker0, and three bridges with two veths each that a test of network namespaces had made
    Interface(name="lo", mtu=65536, up=True, addresses=["127.0.0.1/8"]),
    Interface(name="ifb0", mtu=1500, up=False),  # BROADCAST,NOARP: not up
    Interface(name="ifb1", mtu=1500, up=False),
    Interface(name="eth0", mtu=1400, up=True, addresses=["192.0.2.2/24"]),
    Interface(name="docker0", mtu=1500, up=True, addresses=["172.17.0.1/16"]),  # NO-CARRIER, but UP
    Interface(name="ln4gj00br", mtu=1500, up=True, addresses=["10.231.219.1/24"]),
    Interface(name="vln4gj00n1", mtu=1500, up=True),  # vln4gj00n1@if2 in the text form
    Interface(name="vln4gj00n2", mtu=1500, up=True),
    Interface(name="ln4gj02br", mtu=1500, up=True, addresses=["10.231.221.1/24"]),
    Interface(name="vln4gj02n1", mtu=1500, up=True),
    Interface(name="vln4gj02n2", mtu=1500, up=True),
    Interface(name="ln4gj03br", mtu=1500, up=True, addresses=["10.231.222.1/24"]),
    Interface(name="vln4gj03n1", mtu=1500, up=True),
    Interface(name="vln4gj03n2", mtu=1500, up=True),
]


def test_the_real_ip_j_link_show_of_a_debian_12_machine() -> None:
    links = parse_ip_links(_read("ip_j_link_show.json"))
    assert links == [i.model_copy(update={"addresses": []}) for i in REAL]


def test_the_real_ip_j_4_addr_show_of_a_debian_12_machine() -> None:
    assert parse_ip_addrs(_read("ip_j_4_addr_show.json")) == [
        ("lo", "127.0.0.1/8"),
        ("eth0", "192.0.2.2/24"),
        ("docker0", "172.17.0.1/16"),
        ("ln4gj00br", "10.231.219.1/24"),
        ("ln4gj02br", "10.231.221.1/24"),
        ("ln4gj03br", "10.231.222.1/24"),
    ]


def _json_lines(link: str, addr: str) -> str:
    return f"links\t{link.strip()}\naddrs\t{addr.strip()}\n"


def test_the_real_answers_through_the_probe_parser() -> None:
    text = _json_lines(_read("ip_j_link_show.json"), _read("ip_j_4_addr_show.json"))
    assert parse(text, name="here", address="192.0.2.2", rank=0).interfaces == REAL


SAMPLE = [
    Interface(name="lo", mtu=65536, up=True, addresses=["127.0.0.1/8"]),
    Interface(name="eth0", mtu=9000, up=True, addresses=["10.0.0.12/24", "10.0.1.12/16"]),
    Interface(name="eth0.100", mtu=8996, up=True, addresses=["192.168.100.12/24"]),
    Interface(name="ib0", mtu=2044, up=False),
]


def test_a_veth_a_vlan_two_addresses_and_an_empty_object() -> None:
    text = _json_lines(_read("sample_ip_j_link_show.json"), _read("sample_ip_j_4_addr_show.json"))
    assert parse(text, name="a", address="10.0.0.12", rank=1).interfaces == SAMPLE


def test_a_name_with_its_peer_is_cut_at_the_at_sign_and_junk_is_no_interface() -> None:
    link = (
        '[{"ifname":"eth0@if12","mtu":1500,"flags":["UP"]},{"ifname":"x","mtu":"1500"},'
        '{"mtu":1500},{"ifname":"y","mtu":true},7]'
    )
    addr = (
        '[{"ifname":"eth0@if12","addr_info":[{"family":"inet","local":"10.1.0.2","prefixlen":24},'
        '{"family":"inet6","local":"fe80::1","prefixlen":64},{"local":"10.1.0.3"}]}]'
    )
    assert parse_ip_links(link) == [Interface(name="eth0", mtu=1500, up=True)]
    assert parse_ip_addrs(addr) == [("eth0", "10.1.0.2/24")]
    assert parse_ip_links('Option "-j" is unknown, try "ip -help".') == []
    assert parse_ip_links('{"ifname":"eth0"}') == [] and parse_ip_addrs("") == []


def _fake_ip(folder: Path, prefix: str, *, json: bool) -> None:
    """An ``ip`` on PATH that answers the probe's calls from ``PREFIXip_*`` of the test data; without
    ``json`` it is an iproute2 before ``-j`` (4.12 and older): that option is unknown to it, exit 255."""
    pairs = [("link.json", "ip_j_link_show.json"), ("addr.json", "ip_j_4_addr_show.json")]
    pairs += [("link.txt", "ip_o_link_show.txt"), ("addr.txt", "ip_o_4_addr_show.txt")]
    for name, data in pairs:
        (folder / name).write_text(_read(prefix + data))
    d = str(folder)
    j = (
        f'  "-j link show") cat {d}/link.json ;;\n  "-j -4 addr show") cat {d}/addr.json ;;\n'
        if json
        else '  -j*) echo \'Option "-j" is unknown, try "ip -help".\' >&2; exit 255 ;;\n'
    )
    ip = folder / "ip"
    ip.write_text(
        '#!/bin/sh\ncase "$*" in\n'
        + j
        + f'  "-o link show") cat {d}/link.txt ;;\n  "-o -4 addr show") cat {d}/addr.txt ;;\n'
        + '  "route get 10.0.0.11") echo "10.0.0.11 dev eth0 src 10.0.0.12 uid 0" ;;\n'
        + '  *) echo "unexpected: ip $*" >&2; exit 1 ;;\nesac\n'
    )
    ip.chmod(ip.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize("json", [True, False], ids=["ip -j", "no -j: the text form"])
@pytest.mark.parametrize("prefix", ["", "sample_"], ids=["real", "hand-written"])
def test_the_probe_script_reads_the_same_interfaces_with_or_without_ip_j(
    tmp_path: Path, prefix: str, json: bool
) -> None:
    _fake_ip(tmp_path, prefix, json=json)
    spec = ProbeSpec(head="10.0.0.11", runtimes=(), gpus=False, clock=False)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    res = subprocess.run(["sh", "-c", script(spec)], capture_output=True, text=True, env=env, timeout=60)
    assert "unexpected" not in res.stderr, res.stderr
    assert ("links\t" in res.stdout) is json and ("link\teth0\t" in res.stdout) is not json
    f = parse(res.stdout, name="a", address="10.0.0.12", rank=1, head="10.0.0.11")
    assert f.interfaces == (SAMPLE if prefix else REAL)
    assert f.route == Route(to="10.0.0.11", dev="eth0", src="10.0.0.12")
    assert C.interface_findings(f, {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth"}) == []
    (gloo,) = C.interface_findings(f, {"GLOO_SOCKET_IFNAME": "eth"})
    assert gloo.fix == "set GLOO_SOCKET_IFNAME=eth0 (the interface toward the head) or leave it unset"
