from __future__ import annotations

from collections.abc import Callable

import pytest

from lair.inventory import load_inventory
from lair.runners import LocalRunner, Runner, runner_for
from lair.testing.nodes import NetnsNodes

MakeRunner = Callable[[], Runner]


@pytest.fixture(params=["local", "ssh"])
def make_runner(request: pytest.FixtureRequest) -> MakeRunner:
    """Builds a runner of each kind (in the event loop of the test): the contract holds for both."""
    if request.param == "local":
        return LocalRunner
    nodes: NetnsNodes = request.getfixturevalue("ssh_nodes")
    node = load_inventory().get(str(nodes.cluster_name)).nodes[0]
    return lambda: runner_for(node)
