"""Cluster inventory commands: ``lair cluster add|list|show|remove`` and ``lair nodes``."""

from __future__ import annotations

import argparse
from typing import Any

from lair.cli._common import dump_json, err

__all__ = ["parse_node_spec", "register"]

NODE_KEYS = ("name", "address", "user", "port", "key", "rank", "gpus", "gpu_model", "local")
INT_KEYS = ("port", "rank", "gpus")


def register(sub: Any) -> None:
    p = sub.add_parser("cluster", help="named clusters of SSH nodes (the inventory)")
    cs = p.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)
    q = cs.add_parser("add", help="add a cluster to the inventory")
    q.add_argument("name", metavar="NAME")
    q.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="SPEC",
        help="name=n1,address=10.0.0.2,rank=0,gpus=1[,user=U,port=P,key=PATH,gpu_model=M,label.K=V]",
    )
    s = q.add_argument_group("slurm (--slurm: Slurm allocates the nodes; no --node)")
    s.add_argument("--slurm", action="store_true", help="a Slurm cluster: lair launch submits batch jobs")
    s.add_argument("--partition", metavar="P", help="sbatch --partition")
    s.add_argument("--account", metavar="A", help="sbatch --account")
    s.add_argument("--gres-per-node", metavar="gpu:N", help="sbatch --gres (default: the recipe's GPUs)")
    s.add_argument(
        "--container",
        choices=("docker", "apptainer", "enroot", "none"),
        help="how container recipes run on the nodes (default docker; enroot through pyxis)",
    )
    s.add_argument("--time", metavar="T", help="sbatch --time of each run's job")
    s.add_argument("--slurm-conf", metavar="PATH", help="SLURM_CONF for lair's Slurm commands")
    s.add_argument(
        "--job-dir", metavar="DIR", help="folder the nodes share with this machine (job scripts, logs)"
    )
    q.add_argument("--known-hosts", choices=("accept-new", "strict", "off"), help="host key policy")
    q.add_argument("--known-hosts-file", metavar="PATH")
    q.add_argument("--env-via", choices=("stdin", "file", "accept-env"), help="how env values reach commands")
    q.add_argument("--ssh-config", metavar="PATH", help="OpenSSH config file to read")
    q.add_argument("--replace", action="store_true", help="overwrite an existing cluster")
    q.add_argument("--json", action="store_true", help='print {"cluster", "kind", "nodes"}')
    q.set_defaults(handler=cmd_add)
    q = cs.add_parser("list", help="list clusters")
    q.add_argument("--json", action="store_true")
    q.set_defaults(handler=cmd_list)
    q = cs.add_parser("show", help="one cluster: SSH settings, capabilities, nodes")
    q.add_argument("name", metavar="NAME")
    q.add_argument("--json", action="store_true")
    q.set_defaults(handler=cmd_show)
    q = cs.add_parser("remove", help="remove a cluster from the inventory")
    q.add_argument("name", metavar="NAME")
    q.add_argument("--json", action="store_true", help='print {"cluster", "removed"}')
    q.set_defaults(handler=cmd_remove)

    p = sub.add_parser("nodes", help="nodes per cluster: which ranks are free or held, by which run")
    p.add_argument("--cluster", "-c", metavar="C", help="only this cluster")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_nodes)


def parse_node_spec(spec: str, index: int) -> dict[str, Any]:
    """``name=n1,address=10.0.0.2,rank=0`` -> node fields (rank defaults to the position)."""
    from lair.errors import ConfigError

    node: dict[str, Any] = {"rank": index}
    labels: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise ConfigError(f"--node {spec!r}: {part!r} is not KEY=VALUE")
        if key.startswith("label."):
            labels[key[6:]] = value
        elif key not in NODE_KEYS:
            raise ConfigError(f"--node {spec!r}: unknown key {key!r}", hint=f"keys: {', '.join(NODE_KEYS)}")
        elif key in INT_KEYS:
            node[key] = _int(spec, key, value)
        else:
            node[key] = value.lower() in ("1", "true", "yes") if key == "local" else value
    if "address" not in node:
        raise ConfigError(f"--node {spec!r}: address= is required")
    node.setdefault("name", node["address"].replace(":", "-"))
    return node | ({"labels": labels} if labels else {})


def _int(spec: str, key: str, value: str) -> int:
    from lair.errors import ConfigError

    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"--node {spec!r}: {key} must be an integer, not {value!r}") from None


def cmd_add(args: argparse.Namespace) -> int:
    from lair.inventory import Cluster, add_cluster
    from lair.inventory.clusters import parse_inventory

    if bool(args.node) == bool(args.slurm):
        from lair.errors import ConfigError

        raise ConfigError("give --node SPEC (one per node) or --slurm", hint="see `lair cluster add --help`")
    fields: dict[str, Any] = {"nodes": [parse_node_spec(s, i) for i, s in enumerate(args.node)]}
    if args.slurm:
        fields["kind"] = "slurm"
        fields["slurm"] = _slurm_fields(args)
    for attr in ("known_hosts", "known_hosts_file", "ssh_config", "env_via"):
        if getattr(args, attr):
            fields[attr] = getattr(args, attr)
    cluster: Cluster = parse_inventory({"clusters": {args.name: fields}}, "--node").get(args.name)
    saved = add_cluster(args.name, cluster, replace=args.replace)
    what = "Slurm cluster" if saved.kind == "slurm" else f"{len(saved.nodes)} node(s)"
    if args.json:
        dump_json({"cluster": args.name, "kind": saved.kind, "nodes": [n.name for n in saved.nodes]})
    err(f"cluster {args.name!r}: {what} saved")
    return 0


def _slurm_fields(args: argparse.Namespace) -> dict[str, Any]:
    keys = {"partition": "partition", "account": "account", "gres_per_node": "gres_per_node"}
    keys |= {"container": "container", "time": "time_limit", "slurm_conf": "slurm_conf", "job_dir": "job_dir"}
    return {field: getattr(args, arg) for arg, field in keys.items() if getattr(args, arg)}


def cmd_list(args: argparse.Namespace) -> int:
    from lair.inventory import load_inventory

    inv = load_inventory()
    rows = [
        {"name": n, "nodes": len(c.nodes), "gpus": sum(x.gpus for x in c.nodes), "known_hosts": c.known_hosts}
        for n, c in sorted(inv.clusters.items())
    ]
    if args.json:
        dump_json(rows)
    elif not rows:
        err("no clusters yet: lair cluster add NAME --node name=n1,address=HOST,rank=0")
    else:
        for r in rows:
            print(f"{r['name']:<24} {r['nodes']} node(s)  {r['gpus']} GPU(s)")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from lair.inventory import load_inventory

    c = load_inventory().get(args.name)
    data = c.model_dump(mode="json") | {"name": args.name, "nodes": [_node_dict(n) for n in c.nodes]}
    if args.json:
        dump_json(data)
        return 0
    print(f"cluster {args.name}  (known_hosts: {c.known_hosts})")
    for n in c.nodes:
        gpu = f"{n.gpus} x {n.gpu_model or 'GPU'}" if n.gpus else "no GPU"
        print(f"  rank {n.rank:<3} {n.name:<16} {n.user}@{n.address}:{n.port}  {gpu}")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    from lair.inventory import remove_cluster

    remove_cluster(args.name)
    if args.json:
        dump_json({"cluster": args.name, "removed": True})
    err(f"cluster {args.name!r} removed")
    return 0


def cmd_nodes(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from lair.inventory import ADHOC, leases, load_inventory, reclaim, status

    inv = load_inventory()
    freed = reclaim()
    names = [inv.get(args.cluster).name] if args.cluster else sorted(inv.clusters)
    table = {name: [s.as_dict() for s in status(name, inventory=inv)] for name in names}
    adhoc = [] if args.cluster else [asdict(lease) for lease in leases(ADHOC).values()]
    if args.json:
        dump_json({"clusters": table, "adhoc": adhoc, "reclaimed": [lease.run_id for lease in freed]})
        return 0
    for lease in freed:
        err(f"reclaimed {lease.node} from dead run {lease.run_id}")
    for name, rows in table.items():
        print(f"{name}:")
        for r in rows:
            who = f"held by {r['lease']['run_id']}" if r["lease"] else "free"
            print(f"  rank {r['rank']:<3} {r['name']:<16} {r['address']:<16} {who}")
    if adhoc:
        print("ad-hoc (--nodes):")
        for a in adhoc:
            print(f"  {a['key']:<26} {'':<16} held by {a['run_id']}")
    return 0


def _node_dict(n: Any) -> dict[str, Any]:
    d: dict[str, Any] = n.model_dump(mode="json")
    return d
