"""Small helpers shared by the command modules (rendering JSON, stderr logging)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

__all__ = ["dump_json", "err", "use_color"]


def dump_json(data: Any) -> None:
    """Data goes to stdout, as one JSON document."""
    print(json.dumps(data, indent=2, default=str, ensure_ascii=False))


def err(msg: str) -> None:
    """Logs and progress go to stderr."""
    print(msg, file=sys.stderr, flush=True)


def use_color() -> bool:
    return sys.stderr.isatty() and not os.environ.get("NO_COLOR")
