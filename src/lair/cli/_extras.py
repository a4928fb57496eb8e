"""A module that failed to import, named as the ``lair[...]`` extra to install.

``lair serve`` needs the ``registry`` extra, ``lair eval`` the ``eval`` extra, the bundled CPU engine
the ``engines`` extra. Which extra brings which distribution is read from lair's own installed
metadata (the ``Requires-Dist: ...; extra == "..."`` lines that pyproject.toml's optional
dependencies become), so this module holds no copy of that list; only import names that differ from
their distribution's name need the table below.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lair.errors import ConfigError

__all__ = ["extras_providing", "missing_extra", "require_extras"]

# import name -> distribution name, where the two differ (the others match once normalized)
DISTRIBUTIONS = {
    "argon2": "argon2-cffi",
    "markdown_it": "markdown-it-py",
    "multipart": "python-multipart",
    "python_multipart": "python-multipart",
    "pynvml": "nvidia-ml-py",
    "yaml": "PyYAML",
}
_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)[^;]*;\s*extra\s*==\s*['\"]([^'\"]+)['\"]")


def _normal(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def extras_providing(module: str, requires: list[str] | None = None) -> list[str]:
    """The extras of lair that install the top-level ``module`` (``dev`` last: it includes the others).

    ``requires`` is lair's ``Requires-Dist`` list (default: read from the installed metadata)."""
    if requires is None:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import requires as read

        try:
            requires = read("lair") or []
        except PackageNotFoundError:
            return []
    dist = _normal(DISTRIBUTIONS.get(module, module))
    found = [m[2] for r in requires if (m := _REQUIREMENT.match(r)) and _normal(m[1]) == dist]
    return sorted(dict.fromkeys(found), key=lambda e: (e == "dev", e))


def missing_extra(exc: ModuleNotFoundError, command: str | None) -> ConfigError | None:
    """The error to show for ``exc`` when an extra of lair brings the missing module, else None."""
    from lair.errors import ConfigError

    module = (exc.name or "").split(".")[0]
    if module == "lair":  # a module of lair itself is missing: a broken install, not an extra
        return None
    extras = extras_providing(module) if module else []
    if not extras:
        return None
    what = f"lair {command}" if command else "this command"
    err = ConfigError(
        f"{what} needs the Python package {module!r}, which is not installed; lair's {extras[0]} extra "
        "brings it",
        hint=f"pip install 'lair[{extras[0]}]'",
    )
    err.code = "config.extra"
    return err


def _lair_requires() -> list[str]:
    from importlib.metadata import PackageNotFoundError, requires

    try:
        return requires("lair") or []
    except PackageNotFoundError:
        return []


def _installed(dist: str) -> bool:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution(dist)
    except PackageNotFoundError:
        return False
    return True


def require_extras(extras: tuple[str, ...], command: str) -> None:
    """Raise the ConfigError naming the ``pip install 'lair[...]'`` of those of ``extras`` that are
    not (wholly) installed, before ``command`` starts anything; nothing when all are."""
    from lair.errors import ConfigError

    requires = _lair_requires()
    missing: dict[str, list[str]] = {}
    for r in requires:
        m = _REQUIREMENT.match(r)
        if m and m[2] in extras and m[2] != "dev" and not _installed(m[1]):
            missing.setdefault(m[2], []).append(m[1])
    if not missing:
        return
    names = sorted(missing)
    every = [d for e in names for d in missing[e]]
    dists = ", ".join(every[:4]) + (f" and {len(every) - 4} more" if len(every) > 4 else "")
    err = ConfigError(
        f"lair {command} needs lair's {' and '.join(names)} extra{'s' if len(names) > 1 else ''}, "
        f"not installed here (missing: {dists})",
        hint=f"pip install 'lair[{','.join(sorted(extras))}]'",
    )
    err.code = "config.extra"
    raise err
