"""Small helpers shared by the command modules (rendering JSON, stderr logging, path arguments).

Imported by every command module while the parser is built, so it imports nothing beyond ``os`` and
``sys`` at the top: ``json`` and ``logging`` load when a command first uses them.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import logging
    from pathlib import Path

__all__ = ["dump_json", "err", "path_arg", "setup_logging", "use_color"]

LOGGER = "lair"


def dump_json(data: Any) -> None:
    """Data goes to stdout, as one JSON document."""
    import json

    print(json.dumps(data, indent=2, default=str, ensure_ascii=False))


def path_arg(text: str) -> Path:
    """An argparse ``type`` for paths (``pathlib`` loads when the argument is parsed, not at start-up)."""
    from pathlib import Path

    return Path(text)


def _stderr_handler() -> logging.Handler:
    """Writes each record's message, as it is, to the *current* ``sys.stderr`` (tests swap it)."""
    import logging

    class _Stderr(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            try:
                print(self.format(record), file=sys.stderr, flush=True)
            except Exception:  # a closed or broken stream: logging must never raise
                self.handleError(record)

    return _Stderr()


def setup_logging(verbose: bool = False, quiet: bool = False) -> None:
    """stdlib logging for ``lair`` to stderr: progress at INFO (the default), ``-v`` adds DEBUG (and
    tracebacks), ``-q`` keeps only warnings and errors."""
    import logging

    log = logging.getLogger(LOGGER)
    for h in list(log.handlers):
        log.removeHandler(h)
    handler = _stderr_handler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO)
    log.propagate = False


def err(msg: str) -> None:
    """Logs and progress go to stderr, through the ``lair`` logger: a message starting with
    ``error:`` or ``warning:`` at that level (shown even with ``-q``), anything else at INFO."""
    import logging

    level = (
        logging.ERROR
        if msg.startswith("error:")
        else logging.WARNING
        if msg.startswith("warning:")
        else logging.INFO
    )
    log = logging.getLogger(LOGGER)
    if not log.handlers:  # used outside main() (a library caller): still to stderr
        setup_logging()
    log.log(level, msg)


def use_color() -> bool:
    return sys.stderr.isatty() and not os.environ.get("NO_COLOR")
