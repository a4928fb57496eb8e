"""``lair rig set NAME power_price_kwh=... hardware_cost=... hardware_life_years=...`` writes the rig's
``[cost]`` (the bench's $/Mtok), beside its placeholder values, through the real CLI."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path


def _lair(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"LAIR_HOME": str(home), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "lair", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def test_cost_keys_go_to_the_cost_table_and_the_rest_stay_values(tmp_path: Path) -> None:
    res = _lair(tmp_path, "rig", "set", "home", "power_price_kwh=0.31", "hardware_cost=7200",
                "hardware_life_years=3", "PACK=/models/x")  # fmt: skip
    assert res.returncode == 0, res.stderr
    (path,) = tmp_path.rglob("home.toml")
    doc = tomllib.loads(path.read_text())
    assert doc["cost"] == {"power_price_kwh": 0.31, "hardware_cost": 7200.0, "hardware_life_years": 3.0}
    assert doc["values"] == {"PACK": "/models/x"}
    shown = _lair(tmp_path, "rig", "show", "home", "--json")
    assert shown.returncode == 0, shown.stderr
    assert '"power_price_kwh": 0.31' in shown.stdout


def test_a_cost_that_is_no_number_or_out_of_range_is_refused(tmp_path: Path) -> None:
    bad = _lair(tmp_path, "rig", "set", "home", "power_price_kwh=cheap")
    assert bad.returncode != 0 and "cost.power_price_kwh: expected a number, got 'cheap'" in bad.stderr
    neg = _lair(tmp_path, "rig", "set", "home", "hardware_life_years=0")
    assert neg.returncode != 0 and "cost.hardware_life_years" in neg.stderr
