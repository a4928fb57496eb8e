"""``lair bench`` and ``lair launch --bench`` take the same bench options (``--order`` and
``--bench-order``...), read from the real argparse tables, and the same values parsed by each reach
the bench's options identically (the rig's prices included)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from lair.bench import BenchOptions
from lair.cli import bench_cmds, build_parser, launch_cmds, main

TINY = Path(__file__).resolve().parents[3] / "examples" / "tiny-cpu" / "recipe.toml"

BENCH_ONLY = {
    "-h", "--help", "--api-key-env", "--api-key-file", "--api-key", "--rig", "--out", "--recipe",
    "--set", "--run-name", "--json", "-v", "--verbose", "-q", "--quiet", "--engine-pid",
}  # fmt: skip
"""``lair bench``'s options of its own: the key, the report folder, the rig (``lair launch`` has its
own ``--rig``, whose prices its bench takes), the engine's PID (``lair launch`` knows its engine's
processes from the run's journal); ``-v``/``-q`` are every command's."""


def _options(command: str) -> dict[str, argparse.Action]:
    parser = build_parser([command])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {s: a for a in sub.choices[command]._actions for s in a.option_strings}


def _shape(a: argparse.Action) -> tuple[Any, ...]:
    return (type(a), a.type, a.default, a.choices, a.nargs, a.const, a.metavar, a.help)


def test_both_commands_have_the_same_bench_options() -> None:
    bench, launch = _options("bench"), _options("launch")
    shared = {name for name in bench if name not in BENCH_ONLY}
    prefixed = {name for name in launch if name.startswith("--bench-")}
    assert {"--order", "--seed", "--idle-gap", "--warmup", "--telemetry", "--telemetry-interval"} <= shared
    assert prefixed == {"--bench-" + name[2:] for name in shared}
    for name in shared:
        assert _shape(bench[name]) == _shape(launch["--bench-" + name[2:]]), name
    assert "--rig" in bench and "--rig" in launch


CHOSEN = [
    "--model", "m", "--contexts", "64,1_024", "--concurrency", "1,2", "--decode-tokens", "8",
    "--repeat", "2", "--needle", "--needle-context", "512", "--needle-depth", "0.25",
    "--tokenizer", "/t/tokenizer.json", "--no-force-output", "--timeout", "30",
    "--read-interval-ms", "0", "--keep-going", "--order", "fixed", "--seed", "7", "--warmup", "0",
    "--idle-gap", "0.5", "--telemetry", "none", "--telemetry-interval", "0.25",
]  # fmt: skip


def _parse(argv: list[str]) -> argparse.Namespace:
    return build_parser(argv).parse_args(argv)


def _pair(chosen: list[str], rig: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    launch_argv = [("--bench-" + w[2:]) if w.startswith("--") else w for w in chosen]
    bench = bench_cmds.options_of(_parse(["bench", "http://127.0.0.1:9", *chosen, *rig]), None)
    launch = launch_cmds.options_of(_parse(["launch", str(TINY), "--bench", *launch_argv, *rig]), None)
    return bench.as_dict(), launch.as_dict()


def test_the_parsed_values_reach_the_bench_options_identically() -> None:
    rc = main(["rig", "set", "home", "power_price_kwh=0.31", "hardware_cost=7200", "hardware_life_years=3"])
    assert rc == 0
    bench, launch = _pair(CHOSEN, ["--rig", "home"])
    assert bench == launch
    assert bench | {
        "model": "m", "contexts": [64, 1024], "concurrency": [1, 2], "decode_tokens": 8, "repeat": 2,
        "needle": True, "needle_context": 512, "needle_depth": 0.25, "tokenizer": "/t/tokenizer.json",
        "force_output": False, "request_timeout_s": 30.0, "read_interval_ms": 0.0, "keep_going": True,
        "order": "fixed", "seed": 7, "warmup_requests": 0, "idle_gap_s": 0.5, "telemetry": "none",
        "telemetry_interval_s": 0.25, "power_price_kwh": 0.31, "hardware_cost": 7200.0,
        "hardware_life_years": 3.0,
    } == bench  # fmt: skip


def test_the_defaults_are_the_bench_options_own() -> None:
    bench, launch = _pair([], [])
    assert bench == launch == BenchOptions().as_dict()


@pytest.mark.parametrize("flag,value", [("contexts", "0"), ("order", "random"), ("seed", "x")])
def test_a_bad_value_is_refused_by_both(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    for command, name in (
        (["bench", "http://127.0.0.1:9"], f"--{flag}"),
        (["launch", str(TINY)], f"--bench-{flag}"),
    ):
        with pytest.raises(SystemExit) as exc:
            _parse([*command, name, value])
        assert exc.value.code == 2
        assert f"argument {name}: " in capsys.readouterr().err
