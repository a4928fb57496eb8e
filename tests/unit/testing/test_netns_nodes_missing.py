"""The SSH test nodes on a machine without some tool they need: entering them fails with the message
that says what to run (``scripts/host-setup.sh``), not with the clean-up's own error about the tool it
could not find either (the ``iptables`` rule it removes on the way out). As root, as the whole suite
runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lair.testing.nodes import SSHD, NetnsNodes


def test_a_missing_iptables_is_named_with_the_set_up_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in (SSHD, "ip", "nsenter", "unshare"):  # all but iptables
        found = shutil.which(tool)
        assert found, f"{tool} is part of this machine's set-up"
        (bin_dir / Path(tool).name).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert shutil.which("iptables") is None
    nodes = NetnsNodes(1, base_dir=tmp_path / "nodes")
    with pytest.raises(RuntimeError, match=r"need \['iptables'\]: run scripts/host-setup.sh"), nodes:
        pass
    assert not (tmp_path / "nodes").exists()  # the clean-up ran to its end
