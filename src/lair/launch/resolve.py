"""From a command line to a plan: the recipe, the rig, the nodes (leased or only looked at), trust.

``lair plan`` and ``lair launch`` share :func:`prepare`; only launch leases (``lease=True``).

Trust is decided here, once per command: a recipe's file says whether it is the user's own and where
it came from (:func:`load_source`), and an untrusted one plans only under an acceptance of exactly
what it asks for. ``Request.accept`` records that acceptance (the command's ``--accept``/``-y``:
the user saw the requests, or was shown them at the prompt). A command that runs recipes *derived*
from one it already gated (tune's candidates: the accepted recipe with the user's own knobs) passes
the base's :class:`Consent` instead: the derived file keeps the base's origin (a copy never becomes
the user's own), and the base's acceptance covers it for this process only — nothing is stored.
"""

from __future__ import annotations

import re
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lair.errors import AllocationError, ConfigError
from lair.recipe.images import same_repository

if TYPE_CHECKING:
    from lair.inventory import Node
    from lair.plan import Acceptance, Plan, Target
    from lair.recipe import Recipe
    from lair.rig import Capabilities, Rig

__all__ = ["Consent", "Prepared", "Request", "local_node", "new_run_id", "prepare", "rendered_recipe"]


@dataclass
class Request:
    """What the user asked for on the command line."""

    recipe: str
    cluster: str | None = None
    hosts: list[str] = field(default_factory=list)
    rig: str | None = None
    drop_unsupported: bool = False
    accept: bool | str = False
    """Accept what an untrusted recipe asks for (``--accept``/``-y``); a string: the fingerprint of what
    the user was shown at a prompt, and only that (a recipe that asks for anything else by the time it
    is planned again is refused, not accepted)."""
    run_id: str | None = None
    place: Callable[[Recipe, str], list[Node]] | None = None
    """Nodes from elsewhere (a scheduler's allocation, a renderer's pods), given (recipe, run id)."""
    values: dict[str, str] = field(default_factory=dict)
    """``--set NAME=VALUE``: placeholder values over the rig's (never secrets: they would be in argv)."""
    pull: str = "missing"
    """``--pull``: missing (pull an image the node lacks), always, never."""
    pull_timeout_s: float = 3600.0
    doctor: bool = True
    """run the doctor's fast checks on the planned nodes before anything is leased (``--no-doctor``)"""
    derived: Consent | None = None
    """The recipe is derived from one this command already gated (see the module docstring)."""
    image: str | None = None
    """An exact image reference that replaces the recipe's ``docker_image``: the same repository
    only, pinned by digest (``lair reproduce``'s pin of their run's image); part of what is accepted."""


@dataclass(frozen=True)
class Consent:
    """The trust one command established for its recipe: whether it is the user's own, where it came
    from, and the acceptance it was planned under (None for a trusted recipe)."""

    trusted: bool
    source: str
    acceptance: Acceptance | None = None


@dataclass
class Prepared:
    plan: Plan
    recipe: Recipe
    nodes: list[Node]
    leased: bool
    acceptance: Acceptance | None = None
    consent: Consent | None = None
    """The trust this preparation established (for recipes derived from it: :class:`Consent`)."""


def new_run_id(recipe: Recipe, path: str, now: float | None = None) -> str:
    """``<slug>-<YYMMDD>-<HHMMSS>-<6 hex>``: readable, sortable, unique across days (the journal
    refuses an id that exists), a valid container name."""
    base = recipe.meta.slug or Path(path).parent.name or Path(path).stem or "run"
    slug = re.sub(r"[^a-z0-9]+", "-", base.lower()).strip("-")[:24] or "run"
    stamp = time.strftime("%y%m%d-%H%M%S", time.localtime(now))
    return f"{slug}-{stamp}-{secrets.token_hex(3)}"


def local_node() -> Node:
    """This machine, for one-node recipes with no cluster."""
    from lair.inventory import Node

    return Node(name="local", address="127.0.0.1", rank=0, local=True)


def _cluster_name(recipe: Recipe, rig: Rig | None, req: Request) -> str | None:
    return req.cluster or recipe.cluster or (rig.cluster if rig else None)


def _look(recipe: Recipe, cluster: str) -> list[Node]:
    """The first ``required_nodes`` free ranks of ``cluster``, without leasing them."""
    from lair.inventory import status

    free = [s.node for s in status(cluster) if s.lease is None]
    if len(free) < recipe.required_nodes:
        raise AllocationError(
            f"cluster {cluster!r} has {len(free)} free nodes, {recipe.required_nodes} needed",
            hint="see `lair nodes`; stop a run with `lair stop RUN`",
        )
    return free[: recipe.required_nodes]


def _nodes(recipe: Recipe, rig: Rig | None, req: Request, run_id: str, lease: bool) -> list[Node]:
    """The run's machines, leased (``lease``: every run, the local machine too) or only looked at."""
    from lair.inventory import acquire, acquire_nodes, adhoc_node, load_inventory

    n = recipe.required_nodes
    if req.place is not None:
        return req.place(recipe, run_id)
    ports = [recipe.port]
    if req.hosts:
        if len(req.hosts) < n:
            raise AllocationError(f"the recipe needs {n} nodes, --nodes gives {len(req.hosts)}")
        hosts = req.hosts[:n]
        if lease:
            return acquire(None, run_id=run_id, hosts=hosts, ports=ports)
        inv = load_inventory()
        return [inv.find(h) or adhoc_node(h, i) for i, h in enumerate(hosts)]
    cluster = _cluster_name(recipe, rig, req)
    if cluster:
        return acquire(cluster, n, run_id=run_id, ports=ports) if lease else _look(recipe, cluster)
    if n == 1:
        return acquire_nodes([local_node()], run_id=run_id, ports=ports) if lease else [local_node()]
    raise AllocationError(
        f"the recipe needs {n} nodes and names no cluster",
        hint="give --cluster NAME (see `lair cluster list`) or --nodes HOST,HOST",
    )


def _capabilities(rig: Rig | None, nodes: list[Node]) -> Capabilities | None:
    if rig is not None and "capabilities" in rig.model_fields_set:
        return rig.capabilities
    clusters = {n.cluster for n in nodes if n.cluster}
    if len(clusters) == 1:
        from lair.inventory import load_inventory

        return load_inventory().get(clusters.pop()).capabilities
    return None


def _python(target: Target) -> str:
    return sys.executable if target.local else "python3"


def _targets(nodes: list[Node], lease: bool) -> list[Target]:
    from lair.plan import Target
    from lair.runners import is_local

    return [
        Target(
            name=n.name,
            address=n.address,
            rank=i,
            local=is_local(n),
            would_take=not lease,
            engine_address=n.engine_address,
            interface=n.interface,
            gpus=n.gpu_devices,
        )
        for i, n in enumerate(nodes)
    ]


def load_source(ref: str) -> tuple[Path, bool, str]:
    """A recipe file, whether it is trusted, and where it came from: the user's own local files are
    trusted; a URL is fetched and is not, nor is a local file with a provenance marker."""
    from lair.launch.trust_store import fetch, provenance

    if not re.match(r"^https?://", ref):
        p = Path(ref)
        if not p.exists():
            raise ConfigError(f"no such recipe file: {ref}")
        origin = provenance(p)
        return p, origin is None, origin or str(p.resolve())
    return fetch(ref), False, ref


def _values(recipe: Recipe, rig: Rig | None, req: Request) -> dict[str, str]:
    """Placeholder values: the rig's, then ``--set`` (secrets may not come from the command line)."""
    for name in req.values:
        decl = recipe.placeholders.get(name)
        if decl is not None and decl.type == "secret":
            raise ConfigError(
                f"--set {name}: a secret may not be given on the command line (it would show in ps)",
                hint=f"export {name}=... in the environment, or put it in the rig",
            )
    return {**(rig.string_values() if rig else {}), **req.values}


def rendered_recipe(prep: Prepared, req: Request) -> Recipe:
    """The prepared recipe with its placeholder values (rig, ``--set``, secrets from the env), as it runs
    (for targets that render the recipe's own fields: Slurm's scripts, Kubernetes' manifests)."""
    from lair.recipe import render_recipe
    from lair.rig import load_rig

    values = _values(prep.recipe, load_rig(req.rig) if req.rig else None, req)
    return render_recipe(prep.recipe, values, where=req.recipe)


def _trust(recipe: Recipe, values: dict[str, str], source: str, req: Request) -> tuple[Any, Any]:
    """(acceptance, previous acceptance of the same source) of an untrusted recipe."""
    from lair.launch.trust_store import acceptance_for, previous_acceptance
    from lair.plan.trust import trust_view

    view = trust_view(recipe, values)  # what is accepted is the recipe as it will run
    if isinstance(req.accept, str):
        _still_as_shown(view, req.accept)
    if req.derived is not None:
        return _derived_acceptance(view, source, req.derived), previous_acceptance(source)
    return acceptance_for(view, source, accept=bool(req.accept)), previous_acceptance(source)


def _still_as_shown(view: Recipe, shown: str) -> None:
    """Refuse to accept a recipe that changed between the prompt and the answer."""
    from lair.errors import TrustError
    from lair.plan import fingerprint

    if fingerprint(view) != shown:
        raise TrustError(
            "the recipe changed while its requests were shown: nothing was accepted",
            hint="run the command again and read what it asks for now",
        )


def _derived_acceptance(view: Recipe, source: str, base: Consent) -> Acceptance | None:
    """The base's acceptance carried over to a recipe derived from it, in memory only (never
    stored: the acceptance on disk stays of the content that was shown); None without one."""
    from lair.plan import Acceptance, fingerprint, requests

    a = base.acceptance
    if a is None or a.source != source:
        return None
    return Acceptance(
        fingerprint=fingerprint(view), source=source, requests=requests(view), accepted_at=a.accepted_at
    )


def _source(req: Request) -> tuple[Path, bool, str]:
    """The recipe's file, trust and origin; a derived recipe keeps its base's trust and origin."""
    if req.derived is None:
        return load_source(req.recipe)
    path = Path(req.recipe)
    if not path.is_file():
        raise ConfigError(f"no such recipe file: {req.recipe}")
    return path, req.derived.trusted, req.derived.source


def _pinned(recipe: Recipe, image: str | None) -> Recipe:
    """``recipe`` with ``image`` as its image, refused unless it names the same repository."""
    if image is None:
        return recipe
    if (
        recipe.runtime == "native"
        or not recipe.docker_image
        or not same_repository(recipe.docker_image, image)
    ):
        raise ConfigError(
            f"image {image!r} is not of the recipe's image repository ({recipe.docker_image!r})",
            hint="a pinned image must be the recipe's own image by digest",
        )
    return recipe.model_copy(update={"docker_image": image})


def prepare(req: Request, *, lease: bool) -> Prepared:
    """Load, allocate (lease or look) and plan. On any error nothing stays leased."""
    from lair.engines.rules import RULES
    from lair.inventory import release
    from lair.plan import plan
    from lair.recipe import load_recipe
    from lair.rig import load_rig

    path, trusted, source = _source(req)
    recipe = _pinned(load_recipe(path, RULES), req.image)
    rig = load_rig(req.rig) if req.rig else None
    values = _values(recipe, rig, req)
    run_id = req.run_id or new_run_id(recipe, str(path))
    acceptance, previous = (None, None) if trusted else _trust(recipe, values, source, req)
    nodes = _nodes(recipe, rig, req, run_id, lease)
    try:
        p = plan(
            recipe,
            _targets(nodes, lease),
            run_id=run_id,
            rig=rig,
            values=values,
            capabilities=_capabilities(rig, nodes),
            drop_unsupported=req.drop_unsupported,
            trusted=trusted,
            acceptance=acceptance,
            previous=previous,
            source=source,
            recipe_path=str(path),
            python=_python,
            pull=req.pull,  # type: ignore[arg-type]
            pull_timeout_s=req.pull_timeout_s,
        )
    except BaseException:
        if lease:
            release(run_id)
        raise
    return Prepared(p, recipe, nodes, lease, acceptance, Consent(trusted, source, acceptance))
