"""The launch lifecycle: allocate, run a plan stage by stage on every node, serve, stop, leave nothing.

    launch(Request(...), detach=False, progress=print) -> LaunchResult
    stop_run(run_id) / stop_all()          verified stop, from any shell
    run_status([run_id]) -> [dict]         runs from the journal (+ live process check)
    follow_logs(run_id, node=, follow=, lines=, emit=)
    prepare(Request, lease=False) -> Prepared   what ``lair plan`` shows (nothing leased)

Modules: :mod:`~lair.launch.resolve` (nodes, run ids, trust sources), :mod:`~lair.launch.node` (one
node's steps), :mod:`~lair.launch.run` (the lifecycle), :mod:`~lair.launch.readiness`,
:mod:`~lair.launch.journal`, :mod:`~lair.launch.control` (status/logs/stop), :mod:`~lair.launch.trust_store`,
:mod:`~lair.launch.fault_injection` (``LAIR_PAUSE_BEFORE_STAGE``: hold start-up before a stage, for tests).
"""

from __future__ import annotations

from lair.launch.control import follow_logs, run_status, runs, stop_all, stop_run
from lair.launch.journal import Journal, NodeRecord, RunRecord
from lair.launch.resolve import Prepared, Request, prepare
from lair.launch.run import LaunchResult, launch

__all__ = [
    "Journal",
    "LaunchResult",
    "NodeRecord",
    "Prepared",
    "Request",
    "RunRecord",
    "follow_logs",
    "launch",
    "prepare",
    "run_status",
    "runs",
    "stop_all",
    "stop_run",
]
