"""A small mutation run: hand mutants of the rules the tests should hold, each applied to a copy of the
package and run against the tests that should kill it.

    .venv/bin/python benchmarks/mutants.py              # every mutant
    .venv/bin/python benchmarks/mutants.py -k gpu -k s3 # those whose name has one of the words
    .venv/bin/python benchmarks/mutants.py --list

A mutant is (name, file under src/lair, old text, new text, tests). The run copies ``src/`` to a temp
folder once (the folders the package reads beside it linked), and for each mutant writes the edited
file into the copy (the original text back after it, in a ``finally``), runs its tests with the copy
first on ``PYTHONPATH`` (checked: ``lair`` must import from the copy), one pytest per mutant under the
shared lock (``flock /tmp/lair-heavy.lock``, released between mutants), and reports each as killed (a
test failed), survived (all passed), stale (its old text is not in the file once) or error (pytest
could not run them). The working tree is never edited. Not run in CI: a run is minutes of tests. The
score is in docs/testing.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = "/tmp/lair-heavy.lock"
SIBLINGS = ("examples", "deploy", "docs", "pyproject.toml")


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]


REC = "registry/service/recompute.py"
FAULTY = (
    "tests/unit/registry/test_faulty_certificates.py"
    "::test_a_faulty_gpu_certificate_is_refused_with_its_reason"
)


def _cert(name: str, old: str, new: str, case: str) -> Mutant:
    return Mutant(f"certificate: {name}", REC, old, new, (f"{FAULTY}[{case}]",))


MUTANTS: tuple[Mutant, ...] = (
    _cert("no GPU samples accepted", 'if not g.get("samples"):', "if False:", "no GPU samples"),
    _cert("no energy figure accepted", 'if not cert.get("energy"):', "if False:", "no energy figure"),
    _cert(
        "driver and CUDA not asked for",
        'missing = [k for k in ("driver", "cuda") if gpus and not sw.get(k)]',
        "missing: list[str] = []",
        "no driver or CUDA",
    ),
    _cert(
        "telemetry none accepted on a GPU rig",
        'if gpus and run.get("telemetry") == "none":',
        "if False:",
        "telemetry none",
    ),
    _cert(
        "cells_in_order not compared",
        "    if ran != sorted(",
        "    if False and ran != sorted(",
        "cells_in_order names another cell",
    ),
    _cert(
        "client-bound taken from the uploader's flag",
        'if not (bound or client.get("bound")):',
        'if not client.get("bound"):',
        "client bound by its figures, flagged not bound",
    ),
    _cert(
        "engine hit counter not compared with the metrics",
        "if counted is not None and not _close(counted, sum(hits)):",
        "if False:",
        "engine counter disagrees with the metrics",
    ),
    _cert(
        "responses' cached tokens not compared",
        'if cache.get("response_cached_tokens") != cell.get("cached_tokens"):',
        "if False:",
        "responses' cached tokens disagree with the cell",
    ),
    _cert(
        "a cache not proven cold accepted", 'if not cache.get("cold"):', "if False:", "cache not proven cold"
    ),
    _cert(
        "no run certificate accepted",
        '["certificate: the run\'s certificate is missing"]',
        "[]",
        "no run certificate",
    ),
    Mutant(
        "fingerprint.json not compared with results.json's",
        "registry/service/verify.py",
        'if fp is not None and fp != doc.get("fingerprint"):',
        "if False:",
        (
            "tests/unit/registry/test_faulty_certificates.py"
            "::test_a_fingerprint_json_other_than_the_one_in_results_json_is_refused",
        ),
    ),
    Mutant(
        "replication attempt: slug checked, revision not",
        "registry/service/attempts.py",
        "if (slug, revision) != (ref.slug, ref.revision):",
        "if slug != ref.slug:",
        (
            "tests/unit/registry/test_replication_upload.py"
            "::test_a_report_of_another_revision_of_the_same_recipe_is_422[sqlite]",
        ),
    ),
    Mutant(
        "write priority: the per-second window never resets",
        "registry/web/priority.py",
        "if now - self._window >= 1.0:",
        "if not self._window:",
        (
            "tests/unit/registry/test_write_priority.py::test_the_share_is_of_each_second_and_renews_with_the_next",
        ),
    ),
    Mutant(
        "doctor: disk.free never warns",
        "launch/doctor/checks.py",
        "if d.free_bytes >= DISK_WARN:",
        "if True:",
        (
            "tests/unit/launch/test_doctor.py::test_disk_free_warns_on_a_small_filesystem_and_errs_once_it_is_filled",
        ),
    ),
    Mutant(
        "doctor: disk.free errs only under half the floor",
        "launch/doctor/checks.py",
        'sev = "error" if d.free_bytes < DISK_ERROR else "warning"',
        'sev = "error" if d.free_bytes < DISK_ERROR // 2 else "warning"',
        (
            "tests/unit/launch/test_doctor.py::test_disk_free_warns_on_a_small_filesystem_and_errs_once_it_is_filled",
        ),
    ),
    Mutant(
        "rebench: the oldest report instead of the newest",
        "cli/reproduce_cmds.py",
        'newest = max(pool, key=lambda m: (_created(m), m["id"]))',
        'newest = min(pool, key=lambda m: (_created(m), m["id"]))',
        (
            "tests/unit/test_replication.py"
            "::test_rebench_skips_what_this_machine_measured_since_and_prefers_its_own_reports",
        ),
    ),
    Mutant(
        "S3: only the first page of 1,000 keys listed",
        "registry/service/blobs.py",
        'if not page.get("IsTruncated"):',
        "if True:",
        (
            "tests/unit/registry/test_s3_blobs.py::test_deleting_a_report_of_more_than_1000_objects_deletes_them_all",
        ),
    ),
)


def _pytest(copy: Path, tests: tuple[str, ...], timeout: float) -> int:
    env = os.environ | {"PYTHONPATH": str(copy / "src")}
    probe = [sys.executable, "-c", "import lair; print(lair.__file__)"]
    where = subprocess.run(probe, env=env, capture_output=True, text=True, check=True).stdout.strip()
    if not where.startswith(str(copy)):
        raise SystemExit(f"lair imports from {where}, not the copy: the mutants would not run")
    cmd = ["flock", LOCK, sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]
    try:
        res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1
    if res.returncode not in (0, 1) or os.environ.get("LAIR_MUTANTS_VERBOSE"):
        print(res.stdout[-3000:] + res.stderr[-2000:], file=sys.stderr)
    return res.returncode


def run(mutant: Mutant, copy: Path, timeout: float) -> str:
    path = copy / "src" / "lair" / mutant.file
    text = path.read_text()
    if text.count(mutant.old) != 1:
        return "stale"
    try:
        path.write_text(text.replace(mutant.old, mutant.new))
        rc = _pytest(copy, mutant.tests, timeout)
    finally:
        path.write_text(text)
    return {0: "survived", 1: "killed"}.get(rc, "error")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", action="append", default=[], help="only mutants whose name has this word")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--baseline", action="store_true", help="first run every mutant's tests unmutated")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant's tests")
    ap.add_argument("--json", type=Path, help="write the results here as well")
    args = ap.parse_args()
    chosen = [m for m in MUTANTS if not args.k or any(w.lower() in m.name.lower() for w in args.k)]
    if args.list:
        print("\n".join(m.name for m in chosen))
        return 0
    results: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="lair-mutants-") as tmp:
        copy = Path(tmp)
        shutil.copytree(ROOT / "src", copy / "src", ignore=shutil.ignore_patterns("__pycache__"))
        for name in SIBLINGS:  # what the package finds beside src/ (the bundled examples...)
            (copy / name).symlink_to(ROOT / name)
        if args.baseline:
            tests = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
            if (rc := _pytest(copy, tests, args.timeout * 4)) != 0:
                print(f"the tests fail unmutated (pytest exit {rc}): fix them first", file=sys.stderr)
                return 1
        for m in chosen:
            t0 = time.monotonic()
            results[m.name] = run(m, copy, args.timeout)
            print(f"{results[m.name]:9} {time.monotonic() - t0:6.1f} s  {m.name}", flush=True)
    killed = sum(r == "killed" for r in results.values())
    print(f"\n{killed} of {len(results)} killed", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
