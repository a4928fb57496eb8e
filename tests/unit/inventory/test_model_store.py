"""The clusters file: strict model, located errors, comment-keeping edits."""

from __future__ import annotations

from pathlib import Path

import pytest

from lair.errors import ConfigError
from lair.inventory import Cluster, Node, add_cluster, load_inventory, parse_inventory, remove_cluster

NODE_A = {"name": "a", "address": "x", "rank": 0}
TEXT = """\
# my lab
[clusters.lab]
known_hosts = "strict"
known_hosts_file = "~/kh"

[clusters.lab.capabilities]
privileged = false

[[clusters.lab.nodes]]
name = "b"
address = "10.0.0.3"
rank = 1

[[clusters.lab.nodes]]  # the head
name = "a"
address = "10.0.0.2"
rank = 0
gpus = 2
gpu_model = "RTX 4090"
labels = { rack = "r1" }
"""


def test_load_binds_cluster_settings_to_nodes(home: Path) -> None:
    (home / "clusters.toml").write_text(TEXT)
    lab = load_inventory().get("lab")
    assert [n.name for n in lab.nodes] == ["a", "b"]  # rank order
    a = lab.nodes[0]
    assert (a.cluster, a.user, a.port, a.gpus, a.labels) == ("lab", "root", 22, 2, {"rack": "r1"})
    assert a.ssh.known_hosts == "strict" and a.ssh.known_hosts_file == str(Path("~/kh").expanduser())
    assert lab.capabilities is not None and lab.capabilities.privileged is False
    assert load_inventory().find("10.0.0.3") == lab.nodes[1]


def test_missing_file_is_an_empty_inventory(home: Path) -> None:
    assert load_inventory().clusters == {}


@pytest.mark.parametrize(
    ("fields", "located"),
    [
        ({"nodes": [{"name": "a", "address": "x", "rank": 0, "gpu": 1}]}, "clusters.c.nodes.0.gpu"),
        ({"nodes": [{"name": "a", "address": "x", "rank": -1}]}, "clusters.c.nodes.0.rank"),
        ({"nodes": [{"name": "a", "address": "x", "rank": "0"}]}, "clusters.c.nodes.0.rank"),
        ({"known_hosts": "yes", "nodes": []}, "clusters.c.known_hosts"),
        (
            {"nodes": [{"name": "a", "address": "x", "rank": 0}, {"name": "b", "address": "y", "rank": 0}]},
            "rank 0",
        ),
        (
            {"nodes": [{"name": "a", "address": "x", "rank": 0}, {"name": "a", "address": "y", "rank": 1}]},
            "name",
        ),
    ],
)
def test_invalid_inventory_is_a_located_config_error(fields: dict[str, object], located: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_inventory({"clusters": {"c": fields}}, "clusters.toml")
    assert info.value.message.startswith("clusters.toml: ") and located in info.value.message


def test_unknown_cluster_suggests_a_near_name(home: Path) -> None:
    (home / "clusters.toml").write_text(TEXT)
    with pytest.raises(ConfigError) as info:
        load_inventory().get("labb")
    assert "did you mean 'lab'" in info.value.hint


def test_add_keeps_comments_and_replace_is_explicit(home: Path) -> None:
    (home / "clusters.toml").write_text(TEXT)
    new = Cluster(nodes=[Node(name="g1", address="10.1.0.2", rank=0, gpus=8, port=2222)])
    saved = add_cluster("gpu", new)
    assert saved.nodes[0].port == 2222 and saved.nodes[0].cluster == "gpu"
    text = (home / "clusters.toml").read_text()
    assert "# my lab" in text and "# the head" in text
    with pytest.raises(ConfigError, match="exists already"):
        add_cluster("gpu", new)
    add_cluster("gpu", Cluster(nodes=[]), replace=True)
    assert load_inventory().get("gpu").nodes == []
    remove_cluster("gpu")
    assert sorted(load_inventory().clusters) == ["lab"]
    with pytest.raises(ConfigError):
        remove_cluster("gpu")
