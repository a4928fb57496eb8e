"""``lair doctor``: check the nodes (and a recipe against them) before a launch fails on them."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lair.cli._common import dump_json, err, path_arg

__all__ = ["EXIT_FINDINGS", "register"]

EXIT_FINDINGS = 3
"""Exit code when a finding of severity error was made (1: doctor itself failed, 2: usage)."""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "doctor",
        help="check nodes (and a recipe against them): SSH, clock, disk, runtime, GPUs, network, ports",
        description="Each node in parallel: reachability and SSH login, clock skew, OS and kernel, free "
        "disk, the container runtime and its GPU support, GPUs and driver (against the image's floor), the "
        "route, subnet, MTU and interface each rank uses toward the head, ports; with a recipe, its "
        "placement, heads, fit and shared memory too. Exit 0: no errors (warnings allowed); "
        f"{EXIT_FINDINGS}: errors found; 1: doctor could not run.",
    )
    p.add_argument("file", nargs="?", metavar="RECIPE", help="recipe to check against the nodes (optional)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--cluster", metavar="C", help="the cluster's nodes (default: the recipe's)")
    where.add_argument("--nodes", metavar="H,H", help="exactly these hosts")
    p.add_argument("--rig", metavar="R", help="rig: the recipe's placeholder values")
    p.add_argument(
        "--set", dest="values", action="append", default=[], metavar="NAME=VALUE", help="a placeholder value"
    )
    p.add_argument("--accept", action="store_true", help="accept what an untrusted recipe asks for")
    p.add_argument("--json", action="store_true", help="print the report (nodes, findings) as JSON")
    p.add_argument(
        "--bundle", type=path_arg, metavar="FILE", help="also write a .tar.gz to attach to an issue"
    )
    a = p.add_argument_group("all-reduce probe (opt-in)")
    a.add_argument(
        "--allreduce", action="store_true", help="time an all-reduce between the nodes (torch, on the nodes)"
    )
    a.add_argument(
        "--allreduce-python", default="python3", metavar="PY", help="a Python with torch on the nodes"
    )
    a.add_argument("--allreduce-mib", type=int, default=64, metavar="MIB", help="tensor size (default 64)")
    a.add_argument(
        "--allreduce-timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="seconds it may take (default 120)",
    )
    p.set_defaults(handler=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    from lair.cli.launch_cmds import _set_values
    from lair.launch.doctor import DoctorRequest, doctor, write_bundle
    from lair.launch.doctor.bundle import render_report

    req = DoctorRequest(
        recipe=args.file,
        cluster=args.cluster,
        hosts=[h.strip() for h in (args.nodes or "").split(",") if h.strip()],
        rig=args.rig,
        values=_set_values(args.values),
        accept=args.accept,
        allreduce=args.allreduce,
        allreduce_python=args.allreduce_python,
        allreduce_mib=args.allreduce_mib,
        allreduce_timeout_s=args.allreduce_timeout,
    )
    from dataclasses import replace

    from lair.cli._consent import with_consent

    report, secrets = with_consent(
        lambda accept: doctor(replace(req, accept=accept)),
        accept=bool(req.accept),
        command="doctor",
        flag="--accept",
        prompt=not args.json,
    )
    if args.bundle:
        from pathlib import Path

        write_bundle(args.bundle, report, secrets, Path(args.file) if args.file else None)
        err(f"wrote {args.bundle}")
    if args.json:
        dump_json(report.model_dump(mode="json"))
    else:
        sys.stdout.write(render_report(report))  # its last line says "not ready" with each gap
    return 0 if report.ok else EXIT_FINDINGS
