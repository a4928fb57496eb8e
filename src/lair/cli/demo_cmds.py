"""``lair demo``: the whole loop on this machine in one command.

1. a registry on a fresh SQLite file (``lair serve``, seeded with the bundled examples);
2. the bundled tiny-cpu recipe launched and benchmarked on llama.cpp (``lair launch --bench``);
3. its report submitted (``--submit``): the registry recomputes and checks it, then stores it;
4. the site stays up, the tiny recipe's page showing its row beside the seeded examples (a CPU-only
   rig: reported-by-report, recomputed from the raw timings with no roofline to check it against),
   until Ctrl-C, which stops the server and its workers (nothing is left running).

Every step is a real ``lair`` process; the demo folder (database, blobs, report) is removed at the
end unless ``--keep`` is given.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="launch + bench the tiny recipe, submit the report to a local registry, serve the site",
        description="Serve a local registry (SQLite), launch and benchmark the bundled tiny-cpu recipe, "
        "submit its report (checked by the registry) and keep the site up until Ctrl-C.",
    )
    p.add_argument("--port", type=int, default=8780, help="registry port (default 8780)")
    p.add_argument("--keep", action="store_true", help="keep the demo folder (database, report) at the end")
    p.add_argument("--exit-after-submit", action="store_true", help="stop once the report is stored")
    p.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from lair.cli._demo import cmd_demo as run

    return run(args)
