"""Start-up benchmark: ``lair`` against its peer ``sparkrun`` on the same machine, in the same run.

Four commands are timed as real subprocesses, interleaved round by round (the order rotates each
round so that no command always runs right after another):

- ``lair --help``                                        vs ``sparkrun --help``
- ``lair check examples/dsv41-flash-exl3-2x/recipe.toml`` vs ``sparkrun recipe validate <same recipe>``

The sparkrun recipe is ``benchmarks/data/dsv41-flash-exl3-2x.yaml``, a translation of the lair
example into sparkrun's recipe format (v2 YAML). sparkrun 0.4.2 needs Python >= 3.12: it is installed
from PyPI into its own Python 3.12 venv under ``~/.cache/lair-bench/sparkrun-venv`` (created on first
use, reused after; never into lair's own venv). When it cannot be installed the benchmark says so,
still times lair against its absolute limits, and records why in the JSON.

Targets, on this machine: ``lair --help`` at most 150 ms and ``lair check`` at most 350 ms (wall
medians), and ``lair --help`` at least 8x faster than ``sparkrun --help``. The validate pair's speed-up
is reported, not targeted: ``sparkrun recipe validate`` spends most of its time trying to clone its
recipe registries from GitHub, which says little about start-up.

Fairness: every command gets the same environment. ``PYTHONDONTWRITEBYTECODE`` is removed and
``PYTHONPYCACHEPREFIX`` points into ``.bench/`` so that both tools run from cached bytecode, as they
would from an installed wheel (the warm-up runs fill the cache). Each tool gets its own empty home
under ``.bench/`` (``HOME`` for sparkrun, ``LAIR_HOME`` for lair) so user state does not leak in.

Network: lair must not touch the network at start-up. Each lair command is run once under
``strace -f -e trace=network`` (when strace exists) and once with every proxy variable pointing at a
closed local port; the first must show no ``connect()`` outside ``AF_UNIX``, the second must still
exit 0. sparkrun is traced the same way, for information only.

Usage: ``python benchmarks/startup.py [--runs 15] [--warmup 2] [--assert-target]``. Prints a table
and writes it with every sample to ``benchmarks/results/startup.md`` and ``startup.json``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["Command", "Stats", "main"]

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / ".bench"
SPARKRUN_VENV = Path.home() / ".cache" / "lair-bench" / "sparkrun-venv"
SPARKRUN_VERSION = "0.4.2"
LAIR_RECIPE = "examples/dsv41-flash-exl3-2x/recipe.toml"
SPARKRUN_RECIPE = ROOT / "benchmarks" / "data" / "dsv41-flash-exl3-2x.yaml"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "startup.json"
TARGET_RATIO = 8.0
LIMIT_MS = {"help": 150.0, "validate": 350.0}  # lair's own medians, whatever sparkrun does
RATIO_TASKS = ("help",)  # the speed-up targeted; the others are reported
CLOSED_PORT_PROXY = "http://127.0.0.1:9"  # discard port: nothing listens there
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@dataclass
class Command:
    """One timed command: ``tool`` is ``lair`` or ``sparkrun``, ``task`` pairs it with its peer."""

    tool: str
    task: str
    argv: list[str]
    env: dict[str, str]
    samples_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)  # user + system time of the process, per run

    @property
    def label(self) -> str:
        """The command line as a user would type it (paths shortened)."""
        return " ".join([self.tool, *self.argv[1:]])


@dataclass
class Stats:
    """Summary of one command's samples, in milliseconds."""

    median: float
    p90: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, samples: list[float]) -> Stats:
        """Median, p90 (nearest rank), min and max of ``samples``."""
        ordered = sorted(samples)
        rank = max(0, min(len(ordered) - 1, round(0.9 * len(ordered) + 0.5) - 1))
        return cls(statistics.median(ordered), ordered[rank], ordered[0], ordered[-1], len(ordered))


# --- Python 3.12 and the sparkrun venv -------------------------------------------------------------


def find_python312() -> str:
    """Path of a Python 3.12 interpreter: pyenv first, then ``python3.12`` on PATH."""
    candidates: list[str] = []
    if shutil.which("pyenv"):
        out = subprocess.run(["pyenv", "prefix", "3.12"], capture_output=True, text=True, check=False)
        candidates += [str(Path(p) / "bin" / "python3") for p in out.stdout.split(":") if p.strip()]
    pyenv_root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates += sorted(glob.glob(f"{pyenv_root}/versions/3.12*/bin/python3"), reverse=True)
    candidates += [p for p in (shutil.which("python3.12"),) if p]
    for cand in candidates:
        if _is_python312(cand.strip()):
            return cand.strip()
    raise RuntimeError(
        "no Python 3.12 found (sparkrun needs >= 3.12): `pyenv install 3.12` or put python3.12 on PATH"
    )


def _is_python312(path: str) -> bool:
    try:
        out = subprocess.run(
            [path, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
        )
    except OSError:
        return False
    return out.returncode == 0 and out.stdout.strip() == "(3, 12)"


def ensure_sparkrun(venv: Path) -> Path:
    """The ``sparkrun`` entry point of ``venv``, creating the venv and installing sparkrun if needed."""
    exe = venv / "bin" / "sparkrun"
    if exe.exists() and _installed_version(venv) == SPARKRUN_VERSION:
        return exe
    python = find_python312()
    print(f"creating {venv} with {python} and installing sparkrun=={SPARKRUN_VERSION}", file=sys.stderr)
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([python, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"sparkrun=={SPARKRUN_VERSION}"]
    res = subprocess.run(pip, capture_output=True, text=True)
    if res.returncode != 0 or _installed_version(venv) != SPARKRUN_VERSION:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"sparkrun {SPARKRUN_VERSION} did not install into {venv}: {tail[0]}")
    return exe


def try_sparkrun(venv: Path) -> tuple[Path | None, str]:
    """sparkrun's entry point and "", or None and why it could not be installed."""
    try:
        return ensure_sparkrun(venv), ""
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        return None, str(exc)


def _installed_version(venv: Path) -> str | None:
    python = venv / "bin" / "python"
    if not python.exists():
        return None
    code = "import importlib.metadata as m; print(m.version('sparkrun'))"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def find_lair() -> str:
    """The installed ``lair`` console script, as users run it."""
    for cand in (ROOT / ".venv" / "bin" / "lair", Path(sys.executable).parent / "lair"):
        if cand.exists():
            return str(cand)
    found = shutil.which("lair")
    if not found:
        raise SystemExit("error: no `lair` entry point found\n\nhint: pip install -e . in .venv")
    return found


# --- commands and environment ----------------------------------------------------------------------


def base_env() -> dict[str, str]:
    """The environment shared by every timed command: bytecode cached under ``.bench/pycache``."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(BENCH_DIR / "pycache")
    env["NO_COLOR"] = "1"
    return env


def build_commands(lair: str, sparkrun: Path | None) -> list[Command]:
    """The four timed commands, lair and sparkrun paired by task (lair's two alone without sparkrun)."""
    env = base_env()
    lair_env = {**env, "LAIR_HOME": str(BENCH_DIR / "lair-home")}
    spark_env = {**env, "HOME": str(BENCH_DIR / "sparkrun-home")}
    for home in (lair_env["LAIR_HOME"], spark_env["HOME"]):
        Path(home).mkdir(parents=True, exist_ok=True)
    recipe = os.path.relpath(SPARKRUN_RECIPE, ROOT)
    commands = [
        Command("lair", "help", [lair, "--help"], lair_env),
        Command("sparkrun", "help", [str(sparkrun), "--help"], spark_env),
        Command("lair", "validate", [lair, "check", LAIR_RECIPE], lair_env),
        Command("sparkrun", "validate", [str(sparkrun), "recipe", "validate", recipe], spark_env),
    ]
    return [c for c in commands if c.tool == "lair" or sparkrun is not None]


def run_once(
    cmd: Command, env: dict[str, str] | None = None
) -> tuple[float, subprocess.CompletedProcess[bytes]]:
    """Wall time in ms of one run of ``cmd`` (output captured, not printed)."""
    ms, _, proc = _timed(cmd, env)
    return ms, proc


def _timed(
    cmd: Command, env: dict[str, str] | None = None
) -> tuple[float, float, subprocess.CompletedProcess[bytes]]:
    """Wall and CPU (user + system, of the process and its children) ms of one run of ``cmd``. CPU
    time is what lair itself costs; on a busy machine wall time also counts the waits for a core."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter_ns()
    proc = subprocess.run(cmd.argv, cwd=ROOT, env=env or cmd.env, capture_output=True, check=False)
    wall = (time.perf_counter_ns() - t0) / 1e6
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall, cpu, proc


def warm_up(commands: list[Command], n: int) -> dict[str, dict[str, object]]:
    """Run each command ``n`` times untimed; fail if one exits non-zero. Returns the last outputs."""
    last: dict[str, dict[str, object]] = {}
    for _ in range(max(1, n)):
        for cmd in commands:
            _, proc = run_once(cmd)
            if proc.returncode != 0:
                tail = proc.stderr.decode(errors="replace")[-2000:]
                raise SystemExit(f"error: `{cmd.label}` exited {proc.returncode}\n{tail}")
            last[cmd.label] = {"returncode": proc.returncode, "stdout_tail": _tail(proc.stdout)}
    return last


def _tail(data: bytes, limit: int = 1500) -> str:
    return data.decode(errors="replace")[-limit:]


def measure(commands: list[Command], runs: int) -> None:
    """Time ``runs`` rounds; each round runs every command once, starting one further along."""
    for i in range(runs):
        order = commands[i % len(commands) :] + commands[: i % len(commands)]
        for cmd in order:
            ms, cpu, proc = _timed(cmd)
            if proc.returncode != 0:
                raise SystemExit(f"error: `{cmd.label}` exited {proc.returncode} in round {i}")
            cmd.samples_ms.append(ms)
            cmd.cpu_ms.append(cpu)


# --- network check ---------------------------------------------------------------------------------

CONNECT_RE = re.compile(r"\bconnect\(\d+, \{sa_family=(AF_\w+)(.*?)\}")


def network_probe(cmd: Command) -> dict[str, object]:
    """What ``cmd`` does to the network: traced ``connect()`` calls, and the exit code behind dead proxies."""
    proxy_env = {**cmd.env, **dict.fromkeys(PROXY_VARS, CLOSED_PORT_PROXY)}
    _, proc = run_once(cmd, proxy_env)
    report: dict[str, object] = {"command": cmd.label, "rc_with_dead_proxies": proc.returncode}
    report.update(_strace_connects(cmd))
    return report


def _strace_connects(cmd: Command) -> dict[str, object]:
    strace = shutil.which("strace")
    if not strace:
        return {"strace": "not available"}
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "trace"
        argv = [strace, "-f", "-qq", "-e", "trace=connect", "-o", str(log), *cmd.argv]
        subprocess.run(argv, cwd=ROOT, env=cmd.env, capture_output=True, check=False)
        hits = CONNECT_RE.findall(log.read_text(errors="replace"))
    inet = [f"{fam}{rest[:80]}" for fam, rest in hits if fam != "AF_UNIX"]
    return {
        "strace": "ok",
        "connect_unix": len(hits) - len(inet),
        "connect_inet": len(inet),
        "inet": inet[:10],
    }


def check_network(commands: list[Command]) -> tuple[list[dict[str, object]], list[str]]:
    """Probe every command; return the reports and the lair failures (lair must stay offline)."""
    reports = [network_probe(cmd) for cmd in commands]
    failures = []
    for cmd, rep in zip(commands, reports, strict=True):
        if cmd.tool != "lair":
            continue
        if rep["rc_with_dead_proxies"] != 0:
            failures.append(f"`{cmd.label}` failed with proxies pointing to a closed port")
        if rep.get("connect_inet"):
            failures.append(f"`{cmd.label}` opened network connections: {rep['inet']}")
    return reports, failures


HEAVY_MODULES = (
    "pydantic",
    "sqlalchemy",
    "authlib",
    "starlette",
    "tomlkit",
    "yaml",
    "asyncssh",
    "numpy",
    "httpx",
    "aiohttp",
    "xllamacpp",
    "gguf",
    "tokenizers",
    "platformdirs",
    "lair.errors",
    "lair.recipe",
)
HELP_PROBE = """
import contextlib, io, json, sys
from lair.cli import main
with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
    main(["--help"])
heavy = json.loads(sys.argv[1])
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy or m in heavy)))
"""


def heavy_imports_at_help(lair: str) -> list[str]:
    """Modules from ``HEAVY_MODULES`` that ``lair --help`` imports (each is start-up time users pay)."""
    python = str(Path(lair).parent / "python")
    argv = [python, "-c", HELP_PROBE, json.dumps(HEAVY_MODULES)]
    out = subprocess.run(argv, cwd=ROOT, env=base_env(), capture_output=True, text=True, check=True)
    found: list[str] = json.loads(out.stdout)
    return found


# --- report ----------------------------------------------------------------------------------------


def ratios(commands: list[Command]) -> dict[str, float]:
    """sparkrun median / lair median, per task (how many times faster lair is); empty without sparkrun."""
    med = {(c.tool, c.task): statistics.median(c.samples_ms) for c in commands}
    tasks = dict.fromkeys(c.task for c in commands)
    return {t: med[("sparkrun", t)] / med[("lair", t)] for t in tasks if ("sparkrun", t) in med}


def verdicts(commands: list[Command], speedups: dict[str, float]) -> dict[str, bool | None]:
    """Each target: lair's median within its limit, and its speed-up, per task (None: not measured)."""
    out: dict[str, bool | None] = {}
    for c in commands:
        if c.tool == "lair":
            out[f"{c.task}_within_{LIMIT_MS[c.task]:.0f}_ms"] = (
                statistics.median(c.samples_ms) <= LIMIT_MS[c.task]
            )
            ratio = speedups.get(c.task)
            if c.task in RATIO_TASKS:
                out[f"{c.task}_at_least_{TARGET_RATIO:.0f}x"] = (
                    None if ratio is None else ratio >= TARGET_RATIO
                )
    return out


def render_table(commands: list[Command], speedups: dict[str, float], sparkrun_missing: str = "") -> str:
    """The printed table: one row per command, the limit and the ratio on each lair row."""
    width = max(len(c.label) for c in commands)
    head = (
        f"{'command':<{width}}  {'median':>8}  {'p90':>8}  {'min':>8}  {'cpu':>8}  {'limit':>6}  "
        f"{'lair speed-up':>13}"
    )
    lines = [head, "-" * len(head)]
    for c in commands:
        s = Stats.of(c.samples_ms)
        lair = c.tool == "lair"
        ratio = (f"{speedups[c.task]:.1f}x" if c.task in speedups else "n/a") if lair else ""
        limit = f"{LIMIT_MS[c.task]:.0f}" if lair else ""
        cpu = statistics.median(c.cpu_ms) if c.cpu_ms else float("nan")
        lines.append(
            f"{c.label:<{width}}  {s.median:>8.1f}  {s.p90:>8.1f}  {s.min:>8.1f}  {cpu:>8.1f}  {limit:>6}  "
            f"{ratio:>13}"
        )
    lines.append(
        f"(wall ms per run, and the median CPU ms; limit = lair's wall median at most; speed-up = sparkrun "
        f"median / lair median, target >= {TARGET_RATIO:.0f}x for {', '.join(RATIO_TASKS)})"
    )
    if sparkrun_missing:
        lines.append(f"sparkrun not measured: {sparkrun_missing}")
    return "\n".join(lines)


def environment_info(lair: str, sparkrun: Path | None) -> dict[str, object]:
    """Machine and tool versions recorded next to the numbers."""
    lair_py = Path(lair).parent / "python"
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_at_start": os.getloadavg(),
        "lair_python": _version_of(str(lair_py)),
        "sparkrun_python": _version_of(str(sparkrun.parent / "python")) if sparkrun else None,
        "sparkrun_version": SPARKRUN_VERSION if sparkrun else None,
        "sparkrun_venv": str(sparkrun.parent.parent) if sparkrun else None,
        "bytecode": "cached (PYTHONPYCACHEPREFIX=.bench/pycache, PYTHONDONTWRITEBYTECODE unset)",
    }


def _version_of(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True, text=True
    )
    return out.stdout.strip()


def write_json(path: Path, doc: dict[str, object]) -> None:
    """Write ``doc`` to ``path`` (parents created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")


def write_table(path: Path, table: str, doc: dict[str, object]) -> None:
    """The table as Markdown (a code block: its columns stay aligned), the verdicts and the machine."""
    checks = doc["checks"]
    assert isinstance(checks, dict)
    verdict = "\n".join(
        f"- {k}: {'yes' if v else 'no' if v is False else 'not measured'}" for k, v in checks.items()
    )
    env = doc["environment"]
    assert isinstance(env, dict)
    load = ", ".join(f"{x:.2f}" for x in env["loadavg_at_start"])
    text = (
        f"# Start-up: lair vs sparkrun\n\n{env['date']}, {env['machine']}, {env['cpus']} CPUs, "
        f"load {load} at start\n\n```\n{table}\n```\n\n{verdict}\n"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def build_doc(commands: list[Command], speedups: dict[str, float], **extra: object) -> dict[str, object]:
    """The JSON document: per-command samples and stats, speed-ups, target verdicts, extras."""
    checks = verdicts(commands, speedups)
    return {
        "commands": [
            {
                "tool": c.tool,
                "task": c.task,
                "command": c.label,
                "stats_ms": asdict(Stats.of(c.samples_ms)),
                "samples_ms": [round(x, 2) for x in c.samples_ms],
                "cpu_ms": [round(x, 2) for x in c.cpu_ms],
            }
            for c in commands
        ],
        "speedup": {k: round(v, 2) for k, v in speedups.items()},
        "target": {"speedup": TARGET_RATIO, "speedup_of": list(RATIO_TASKS), "limit_ms": LIMIT_MS},
        "checks": checks,
        "target_met": all(v is True for v in checks.values()),
        **extra,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description="Start-up time: lair vs sparkrun (--help, check/validate).")
    p.add_argument("--runs", type=int, default=15, help="timed rounds (default 15)")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON output path")
    p.add_argument("--lair", default=None, help="lair entry point (default: .venv/bin/lair)")
    p.add_argument("--no-network-check", action="store_true", help="skip the strace/dead-proxy probe")
    p.add_argument(
        "--sparkrun-venv", type=Path, default=SPARKRUN_VENV, help="sparkrun's own venv (Python 3.12)"
    )
    p.add_argument(
        "--assert-target",
        action="store_true",
        help="exit 1 unless both limits and the 8x --help speed-up are met",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Set up, warm up, measure, probe the network, print the table, write the JSON."""
    args = parse_args(argv)
    sparkrun, missing = try_sparkrun(args.sparkrun_venv)
    if sparkrun is None:
        print(f"warning: sparkrun is not measured: {missing}", file=sys.stderr)
    lair = args.lair or find_lair()
    commands = build_commands(lair, sparkrun)
    info = environment_info(lair, sparkrun)
    heavy = heavy_imports_at_help(lair)
    outputs = warm_up(commands, args.warmup)
    measure(commands, args.runs)
    speedups = ratios(commands)
    net, net_failures = ([], []) if args.no_network_check else check_network(commands)
    table = render_table(commands, speedups, missing)
    print(table)
    doc = build_doc(
        commands,
        speedups,
        environment=info,
        heavy_imports_at_help=heavy,
        network=net,
        network_failures=net_failures,
        warmup_outputs=outputs,
        runs=args.runs,
        warmup=args.warmup,
        sparkrun={"measured": sparkrun is not None, "why_not": missing or None},
    )
    write_json(args.out, doc)
    write_table(args.out.with_suffix(".md"), table, doc)
    if heavy:
        print(f"note: `lair --help` imports {', '.join(heavy)}", file=sys.stderr)
    for line in net_failures:
        print(f"error: {line}", file=sys.stderr)
    print(f"wrote {os.path.relpath(args.out, ROOT)} and its table (.md)", file=sys.stderr)
    missed = args.assert_target and not doc["target_met"]
    return 1 if net_failures or missed else 0


if __name__ == "__main__":
    sys.exit(main())
