"""Launch commands: plan, launch, status, logs, stop."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from lair.cli._bench_options import add_bench_options, bench_options, print_bench, warn_noisy
from lair.cli._common import dump_json, err
from lair.cli.eval_cmds import add_eval_options, suites_arg

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["register"]


def _nodes_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="recipe file (or an http(s) URL: untrusted)")
    p.add_argument("--cluster", metavar="C", help="cluster to take nodes from (default: the recipe's)")
    p.add_argument("--nodes", metavar="H,H", help="exactly these hosts (overrides the cluster)")
    p.add_argument("--rig", metavar="R", help="rig: placeholder values and host capabilities")
    p.add_argument(
        "--drop-unsupported", action="store_true", help="leave out flags the hosts refuse (and say so)"
    )
    p.add_argument(
        "--accept", action="store_true", help="accept what an untrusted recipe asks for (image, hooks...)"
    )
    p.add_argument(
        "--set",
        dest="values",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a placeholder value (over the rig's; repeatable; never a secret)",
    )
    p.add_argument(
        "--pull",
        choices=["missing", "always", "never"],
        default="missing",
        help="pull the image before start: if missing (default), always, or never (fail if missing)",
    )
    p.add_argument("--pull-timeout", type=float, default=3600.0, metavar="S", help="seconds a pull may take")


def _kube_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--target",
        choices=("nodes", "kubernetes"),
        default="nodes",
        help="nodes: the steps per node (default); kubernetes: manifests (see docs/clusters.md)",
    )
    k = p.add_argument_group("kubernetes (--target kubernetes)")
    k.add_argument("-o", "--output", metavar="DIR", help="write one YAML file per object (default: stdout)")
    k.add_argument("--name", metavar="NAME", help="object name (default: the recipe's slug)")
    k.add_argument(
        "--workload",
        choices=("statefulset", "leaderworkerset"),
        default="statefulset",
        help="StatefulSets + headless Service (default), or a LeaderWorkerSet",
    )
    k.add_argument(
        "--mounts", choices=("hostpath", "pvc"), default="hostpath", help="volume of each extra mount"
    )
    k.add_argument(
        "--pvc",
        action="append",
        default=[],
        metavar="PATH=CLAIM",
        help="this mount (container path) from a PVC",
    )
    k.add_argument("--secret", metavar="NAME", help="Secret with the secret env values (default NAME-env)")
    k.add_argument(
        "--gpus-per-node", type=int, metavar="N", help="nvidia.com/gpu per pod (default: the recipe's)"
    )
    k.add_argument(
        "--interface",
        metavar="IFACE",
        help="gloo/NCCL interface in the pods (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME); default: unset",
    )


STATUS_LAST = 10
"""Ended runs ``lair status`` shows by default (``--all``: every one)."""


def register(sub: Any) -> None:
    p = sub.add_parser("plan", help="print exactly what launch will run on each node (nothing leased)")
    _nodes_arg(p)
    p.add_argument(
        "--json", action="store_true", help='print {"run", "nodes": [{name, address, rank, steps}]}'
    )
    _kube_args(p)
    p.set_defaults(handler=cmd_plan)

    p = sub.add_parser("launch", help="launch a recipe on its nodes; Ctrl-C stops it cleanly")
    _nodes_arg(p)
    p.add_argument("--detach", "-d", action="store_true", help="return once ready; stop with `lair stop`")
    p.add_argument("--json", action="store_true", help="print the run (id, endpoint, state) as JSON")
    p.add_argument(
        "--no-doctor",
        dest="doctor",
        action="store_false",
        help="skip the doctor's fast checks (SSH, runtime, route, MTU, interfaces, ports, placement, "
        "driver) that run before the nodes are leased",
    )
    p.add_argument(
        "--bench",
        action="store_true",
        help="once ready, benchmark it (lair bench, with the --bench-* options below), then stop",
    )
    add_bench_options(
        p.add_argument_group("bench (--bench; the prices for $/Mtok come from --rig)"), prefix="bench"
    )
    p.add_argument(
        "--submit", action="store_true", help="with --bench: upload the report to the registry (lair submit)"
    )
    p.add_argument(
        "--eval",
        dest="eval_suites",
        type=suites_arg,
        action="extend",
        metavar="SUITE",
        help="once ready (after --bench), evaluate quality (lair eval: gsm8k, humaneval, needle, a task); "
        "then stop",
    )
    add_eval_options(p.add_argument_group("evaluation (--eval)"), prefix="eval-")
    p.set_defaults(handler=cmd_launch)

    p = sub.add_parser(
        "status",
        help="runs from the journal, with a live check of their processes: the active runs and the "
        f"last {STATUS_LAST} ended ones",
    )
    p.add_argument("run", nargs="?", metavar="RUN")
    p.add_argument("--all", action="store_true", help="every run in the journal, however old")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_status)

    p = sub.add_parser("logs", help="a run's engine logs (saved tail once it stopped)")
    p.add_argument("run", metavar="RUN")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    p.add_argument("--node", metavar="N", help="rank or node name (default: every node, prefixed)")
    p.add_argument("-n", "--lines", type=int, default=100, metavar="N")
    p.add_argument("--json", action="store_true", help='print {"run", "lines": [...]} (not with -f)')
    p.set_defaults(handler=cmd_logs)

    p = sub.add_parser("stop", help="stop a run (or --all) and verify nothing is left")
    p.add_argument("run", nargs="?", metavar="RUN")
    p.add_argument("--all", action="store_true", help="every active run")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_stop)


def _set_values(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            from lair.errors import ConfigError

            raise ConfigError(f"--set {item!r}: expected NAME=VALUE")
        out[name.strip()] = value
    return out


def _request(args: argparse.Namespace) -> Any:
    from lair.launch import Request

    hosts = [h.strip() for h in (args.nodes or "").split(",") if h.strip()]
    return Request(
        recipe=args.file,
        cluster=args.cluster,
        hosts=hosts,
        rig=args.rig,
        drop_unsupported=args.drop_unsupported,
        accept=args.accept,
        values=_set_values(args.values),
        pull=args.pull,
        pull_timeout_s=args.pull_timeout,
        doctor=getattr(args, "doctor", True),
    )


def _show_acceptance(prep: Any) -> None:
    a = prep.acceptance
    if a is None:
        return
    asked = [f"{k}: {v}" for k, vs in a.requests.items() for v in vs]
    err(f"untrusted recipe from {a.source}, accepted {a.accepted_at}:")
    for line in asked or ["(nothing risky)"]:
        err(f"  {line}")


def _kube_options(args: argparse.Namespace) -> Any:
    from lair.errors import ConfigError
    from lair.plan.manifests import KubeOptions

    claims = {}
    for spec in args.pvc:
        path, sep, claim = spec.partition("=")
        if not sep or not path.startswith("/") or not claim:
            raise ConfigError(f"--pvc {spec!r}: expected CONTAINER_PATH=CLAIM")
        claims[path.rstrip("/") or "/"] = claim
    return KubeOptions(
        name=args.name or "",
        workload=args.workload,
        mounts=args.mounts,
        claims=claims,
        secret=args.secret or "",
        gpus_per_node=args.gpus_per_node,
        interface=args.interface,
    )


def _plan_kubernetes(args: argparse.Namespace) -> int:
    from lair.launch.kubernetes import kubernetes_manifests
    from lair.plan.manifests import to_yaml

    prep, m = kubernetes_manifests(_request(args), _kube_options(args))
    _show_acceptance(prep)
    if args.output:
        from pathlib import Path

        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        for i, doc in enumerate(m.documents):
            f = out / f"{i:02d}-{doc['kind'].lower()}-{doc['metadata']['name']}.yaml"
            f.write_text(to_yaml([doc]), encoding="utf-8")
            err(f"wrote {f}")
    elif args.json:
        dump_json(m.documents)
    else:
        sys.stdout.write(to_yaml(m.documents))
    for note in m.notes:
        err(f"warning: left out {note}")
    if m.secret_keys:
        keys = " ".join(f"--from-literal={k}=..." for k in m.secret_keys)
        err(f"secret env comes from the Secret {m.secret}: kubectl create secret generic {m.secret} {keys}")
    return 0


def _with_prompt(args: argparse.Namespace, call: Any) -> Any:
    """``call(request)`` through the consent gate (:func:`lair.cli._consent.with_consent`)."""
    from dataclasses import replace

    from lair.cli._consent import with_consent

    req = _request(args)
    command = "launch" if args.handler is cmd_launch else "plan"
    return with_consent(
        lambda accept: call(replace(req, accept=accept)),
        accept=req.accept,
        command=command,
        flag="--accept",
        prompt=not args.json,
    )


def cmd_plan(args: argparse.Namespace) -> int:
    from lair.launch import prepare
    from lair.plan import render_text

    if args.target == "kubernetes":
        return _plan_kubernetes(args)
    from lair.launch.slurm import slurm_cluster, slurm_plan

    cluster = slurm_cluster(_request(args))
    if cluster is not None:
        prep, script = _with_prompt(args, lambda req: slurm_plan(req, cluster))
        if not args.json:
            err(f"Slurm cluster {cluster.name}: the nodes are placeholders until the job runs; main job:")
            err(script)
    else:
        prep = _with_prompt(args, lambda req: prepare(req, lease=False))
    _show_acceptance(prep)
    p = prep.plan
    if args.json:
        dump_json(p.model_dump(mode="json"))
    else:
        sys.stdout.write(render_text(p))
    for d in p.run.dropped:
        err(f"warning: left out {d}")
    return 0


def options_of(args: argparse.Namespace, api_key: str | None) -> Any:
    """The BenchOptions of ``--bench``: the shared ``--bench-*`` options, the run's own key and the
    ``--rig``'s prices."""
    return bench_options(args, "bench", api_key=api_key, rig=args.rig)


def _bench(args: argparse.Namespace, out: dict[str, Any]) -> Any:
    """The ``on_ready`` callback of ``--bench``: lair bench on the run's endpoint. Its options are
    built now, before anything starts (a rig without prices or a bad value stops the launch here)."""
    opts = options_of(args, None) if args.bench else None

    def run(res: Any) -> None:
        from lair.bench import run_bench

        out["secrets"] = res.secrets
        if opts is None:
            out["eval"] = _evaluate(args, res)
            return
        from lair.cli._engine_procs import engine_processes

        opts.api_key = res.api_key  # the run's own key (e.g. VLLM_API_KEY), never on a command line
        opts.engine = engine_processes(res.run_id)  # its CPU told apart from other processes'
        out["result"] = run_bench(res.endpoint.removesuffix("/v1"), opts)
        if args.eval_suites:
            out["eval"] = _evaluate(args, res)

    return run


def _evaluate(args: argparse.Namespace, res: Any) -> Any:
    """``--eval``: lair eval on the run's endpoint, with the run's own key."""
    from lair.cli.eval_cmds import eval_options
    from lair.eval import run_eval

    opts = eval_options(args, args.eval_suites, prefix="eval_")
    opts.api_key = res.api_key
    return run_eval(res.endpoint.removesuffix("/v1"), opts)


def _check_suites(args: argparse.Namespace) -> None:
    """Every ``--eval`` suite resolved and its data set found offline, before anything starts."""
    from lair.eval.suites import resolve_suite

    data = dict(args.eval_data)
    for name in args.eval_suites:
        resolve_suite(name, data.get(name) or data.get(""))


def _bench_report(
    args: argparse.Namespace, run_id: str, result: Any, secrets: list[str], evaluation: Any = None
) -> Path:
    """A run report folder beside the recipe (``reports/``), with each node's engine log."""
    from lair.launch import Journal
    from lair.report import write_run_report

    j = Journal(run_id)
    rec = j.load()
    plan = j.plan_data()
    values = {}
    if args.rig:
        from lair.rig import load_rig

        values = load_rig(args.rig).string_values()
    values.update(_set_values(getattr(args, "values", [])))  # --set, over the rig's, as the launch had
    logs = {n.name: j.saved_log(n.rank) or "" for n in rec.nodes}
    if result is None:
        from lair.cli.eval_cmds import empty_bench

        result = empty_bench(evaluation)
    image = plan["run"].get("image")
    return write_run_report(
        rec.recipe, rec.name, result, logs, values, image=image, secrets=secrets, evaluation=evaluation
    )


def _submit(report: Path) -> dict[str, Any]:
    """``--submit``: upload the report; a refusal raises (the report stays on disk)."""
    from lair.cli.client_cmds import say_stored, submit_report

    err(f"submitting {report.name} to the registry")
    out = submit_report(report)
    say_stored(out)
    return out


def _print_measured(result: Any, evaluation: Any) -> None:
    if result is not None:
        print_bench(result)
    if evaluation is not None:
        from lair.cli.eval_cmds import print_quality

        print_quality(evaluation)


def _finish_bench(args: argparse.Namespace, res: Any, bench: dict[str, Any]) -> int | None:
    """The report of ``--bench``/``--eval`` (and its upload with ``--submit``); an exit code, or None
    to go on."""
    result, evaluation = bench.get("result"), bench.get("eval")
    report = _bench_report(args, res.run_id, result, bench.get("secrets", []), evaluation)
    failure = result.failure() if result is not None else None  # failed requests: exit 1
    doc = {"run_id": res.run_id, "state": res.state, "bench": result.as_dict() if result else None}
    doc |= {
        "eval": evaluation.as_dict() if evaluation else None,
        "report": str(report),
        "ok": failure is None,
    }
    if not args.json:
        _print_measured(result, evaluation)
        err(f"report: {report}")
    if result is not None:
        warn_noisy(result)
    if failure is not None:
        if args.json:
            dump_json(doc)
        err(f"error: {failure.render()}")
        return int(failure.exit_code)
    stored = _submit(report) if args.submit else None  # refused: raises, the report stays
    if args.json:
        dump_json(doc | ({"submitted": stored} if stored else {}))
        return 0
    return None


def cmd_launch(args: argparse.Namespace) -> int:
    from lair.launch import launch

    measure = bool(args.bench or args.eval_suites)
    if measure and args.detach:
        err("error: --bench/--eval run in the foreground (they stop the run when done); drop --detach")
        return 2
    if args.submit and not args.bench:
        err("error: --submit uploads the --bench report; add --bench")
        return 2
    if args.eval_suites:
        _check_suites(args)
    bench: dict[str, Any] = {}
    on_ready = _bench(args, bench) if measure else None
    res = _with_prompt(args, lambda req: launch(req, detach=args.detach, progress=err, on_ready=on_ready))
    if measure and ("result" in bench or "eval" in bench):
        rc = _finish_bench(args, res, bench)
        if rc is not None:
            return rc
    if args.json:
        dump_json(
            {"run_id": res.run_id, "endpoint": res.endpoint, "state": res.state, "ready_s": res.ready_s}
        )
    elif args.detach:
        print(res.run_id)
        err(f"ready: {res.endpoint}  (stop with: lair stop {res.run_id})")
    else:
        err(f"run {res.run_id} stopped; nothing left on its nodes")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from lair.launch import run_status, runs

    data = run_status(args.run, last=None if args.all else STATUS_LAST)
    if args.json:
        dump_json(data)
        return 0
    if not data:
        err("no runs")
    hidden = 0 if args.run or args.all else len(runs()) - len(data)
    for r in data:
        alive = [n for n in r["nodes"] if n.get("alive")]
        up = f"  {len(alive)}/{len(r['nodes'])} up" if r["state"] in ("running", "starting") else ""
        unknown = [f"{n['name']} unknown ({n['check_error']})" for n in r["nodes"] if n.get("check_error")]
        up += "".join(f"; {u}" for u in unknown)
        print(f"{r['run_id']}  {r['state']}{up}  {r['endpoint']}  {r['name']}")
    if hidden > 0:
        err(f"{hidden} older ended runs not shown (lair status --all)")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from lair.launch import follow_logs

    if args.json and args.follow:
        from lair.errors import ConfigError

        raise ConfigError("--json prints one document; it cannot follow", hint="drop -f, or drop --json")
    collected: list[str] = []

    def emit(line: str) -> None:
        if args.json:
            collected.append(line)
        else:
            print(line, flush=True)

    follow_logs(args.run, node=args.node, follow=args.follow, lines=args.lines, emit=emit)
    if args.json:
        dump_json({"run": args.run, "lines": collected})
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from lair.launch import stop_all, stop_run

    if bool(args.run) == bool(args.all):
        err("error: give a RUN or --all")
        return 2
    records = stop_all(progress=err) if args.all else [stop_run(args.run, progress=err)]
    if args.json:
        dump_json([{"run_id": r.run_id, "state": r.state} for r in records])
    for r in records:
        err(f"{r.run_id}: {r.state}; checked: no container or process left")
    if args.all and not records:
        err("no active runs")
    return 0


__all__ += ["bench_report"]
bench_report = _bench_report
