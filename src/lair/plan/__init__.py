"""The plan of a run: data, built without touching any node; ``lair plan`` prints it, launch runs it.

plan(recipe, nodes, run_id=..., rig=..., capabilities=...) -> Plan
render_text(plan) -> str          what ``lair plan`` prints
check_capabilities / apply_capabilities   host capability profiles (CapabilityError)
runtime_ulimits                    the --ulimit flags podman needs on a capped host
check_trust / Acceptance           untrusted recipes (TrustError)
mounts                             per-file mount staging (manifests, Hugging Face hub repos)
"""

from __future__ import annotations

from lair.plan.build import DEFAULT_MASTER_PORT, REDACTED, node_env, plan
from lair.plan.capabilities import (
    PODMAN_DEFAULT_ULIMIT,
    Unsupported,
    apply_capabilities,
    check_capabilities,
    runtime_ulimits,
)
from lair.plan.plan_text import render_text
from lair.plan.steps import STAGE_ORDER, NodePlan, Plan, RunInfo, Stage, Step, Target
from lair.plan.trust import Acceptance, check_trust, fingerprint, requests, risky_requests

__all__ = [
    "DEFAULT_MASTER_PORT",
    "PODMAN_DEFAULT_ULIMIT",
    "REDACTED",
    "STAGE_ORDER",
    "Acceptance",
    "NodePlan",
    "Plan",
    "RunInfo",
    "Stage",
    "Step",
    "Target",
    "Unsupported",
    "apply_capabilities",
    "check_capabilities",
    "check_trust",
    "fingerprint",
    "node_env",
    "plan",
    "render_text",
    "requests",
    "risky_requests",
    "runtime_ulimits",
]
