"""``lair doctor``: is this rig ready for this recipe? Each node in parallel, then the recipe.

    doctor(DoctorRequest) -> (DoctorReport, secrets)   every check (+ the opt-in all-reduce probe)
    fast_findings(Prepared) -> [Finding]              the subset ``lair launch`` runs before leases
    write_bundle(path, report, secrets)               a tar to attach to an issue (secrets redacted)

Modules: :mod:`~lair.launch.doctor.probe` (one script per node: the facts),
:mod:`~lair.launch.doctor.checks` (node and network findings), :mod:`~lair.launch.doctor.recipe_checks`
(the recipe against the rig), :mod:`~lair.launch.doctor.allreduce` (the bandwidth probe),
:mod:`~lair.launch.doctor.bundle`. The check ids are in ``ALL_CHECKS``; docs/doctor.md lists what
each one reads and the fix it gives.
"""

from __future__ import annotations

from lair.launch.doctor.bundle import write_bundle
from lair.launch.doctor.findings import DoctorReport, Finding, NodeFacts
from lair.launch.doctor.service import ALL_CHECKS, FAST_CHECKS, DoctorRequest, doctor, fast_findings

__all__ = [
    "ALL_CHECKS",
    "FAST_CHECKS",
    "DoctorReport",
    "DoctorRequest",
    "Finding",
    "NodeFacts",
    "doctor",
    "fast_findings",
    "write_bundle",
]
