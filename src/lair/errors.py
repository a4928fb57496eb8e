"""lair's exception tree. The library raises these and never prints or exits; the CLI catches
:class:`LairError` in one place.

    LairError                      code
    ├── RecipeError                recipe.*        one or more located problems in a recipe file
    ├── PlaceholderError           recipe.placeholder  unresolved placeholder where a recipe is about to run
    ├── ConfigError                config          user config (rigs, clusters) is missing or invalid
    ├── TrustError                 trust           an untrusted recipe asks for something not accepted
    ├── CapabilityError            capability      a host cannot satisfy what a recipe needs
    ├── AllocationError            allocation      not enough free nodes / ranks
    ├── RunnerError                runner          a command failed on a node (host, argv, rc, stderr tail)
    ├── LaunchError                launch          a launch failed (after a clean rollback)
    ├── BenchError                 bench           a benchmark could not run or measure
    │   ├── NoisyError             bench.noisy     a run's cells are noisy: not submitted (exit 9)
    │   └── InconclusiveError      bench.inconclusive  a run's own repeats spread wider than the
    │                                              row's band: no verdict, not submitted (exit 10)
    ├── EvalError                  eval            a quality evaluation could not run (data set, sandbox)
    ├── FitError                   fit             model facts or hardware figures are missing
    │   └── HubError               fit.hub         the Hugging Face Hub could not give a model's facts
    │       ├── HubAuthError       fit.hub.auth    401/403: a gated or private repo (names HF_TOKEN)
    │       ├── HubOfflineError    fit.hub.offline offline mode and the facts are not in the cache
    │       └── HubBudgetError     fit.hub.budget  a config or header is past its size budget
    ├── InteropError               interop         a peer's recipe or result file cannot be read or mapped
    └── RegistryError              registry.*      a registry request failed (carries an HTTP status)
        ├── Invalid                invalid         422: a field, parameter or body is wrong (``location``)
        ├── Unauthorized           unauthorized    401: anonymous, or bad credentials
        ├── Forbidden              forbidden       403: signed in but not allowed
        ├── NotFound               not_found       404
        ├── Conflict               conflict        409: taken, already done, a duplicate
        ├── TooLarge               too_large       413: past a size budget
        ├── RateLimited            rate_limited    429
        ├── Internal               internal        500: a server-side step failed (a backup tool)
        ├── BadGateway             provider        502: a sign-in provider answered wrongly
        └── Unavailable            unavailable     503: try again after ``retry_after`` seconds

The registry raises the subclasses and never names a status; its web layer maps each class to its
status in one handler. A subclass takes ``code=`` where a finer stable code is part of the API
(``secret``, ``duplicate``, ``csrf``...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "AllocationError",
    "BadGateway",
    "BenchError",
    "CapabilityError",
    "ConfigError",
    "Conflict",
    "EvalError",
    "FitError",
    "Forbidden",
    "HubAuthError",
    "HubBudgetError",
    "HubError",
    "HubOfflineError",
    "InconclusiveError",
    "Internal",
    "InteropError",
    "Invalid",
    "Issue",
    "LairError",
    "LaunchError",
    "NoisyError",
    "NotFound",
    "PlaceholderError",
    "RateLimited",
    "RecipeError",
    "RegistryError",
    "RunnerError",
    "TooLarge",
    "TrustError",
    "Unauthorized",
    "Unavailable",
    "Unreachable",
    "error_for",
]


@dataclass(frozen=True)
class Issue:
    """One located problem (an error or a lint warning) in a recipe file."""

    file: str
    line: int
    col: int
    path: str
    message: str
    hint: str = ""
    severity: str = "error"
    code: str = ""

    def render(self) -> str:
        head = (
            f"{self.file}:{self.line}:{self.col}: {self.path}: {self.message}"
            if self.path
            else (f"{self.file}:{self.line}:{self.col}: {self.message}")
        )
        return head + (f"\n\nhint: {self.hint}" if self.hint else "")

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "col": self.col,
            "path": self.path,
            "message": self.message,
            "hint": self.hint,
            "severity": self.severity,
            "code": self.code,
        }


class LairError(Exception):
    """Base of every error lair raises on purpose."""

    code = "lair"
    exit_code = 1

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def render(self) -> str:
        return self.message + (f"\n\nhint: {self.hint}" if self.hint else "")

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "hint": self.hint}


class RecipeError(LairError):
    """A recipe file has one or more problems; all of them are in ``issues``."""

    code = "recipe"

    def __init__(self, issues: list[Issue]) -> None:
        self.issues = issues
        first = issues[0] if issues else None
        super().__init__(first.message if first else "invalid recipe", hint=first.hint if first else "")

    def render(self) -> str:
        return "\n\n".join(i.render() for i in self.issues)

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "errors": [i.as_dict() for i in self.issues]}


class PlaceholderError(LairError):
    code = "recipe.placeholder"

    def __init__(self, names: list[str], *, where: str = "", hint: str = "") -> None:
        self.names = names
        msg = (
            "unresolved placeholder"
            + ("s" if len(names) > 1 else "")
            + ": "
            + ", ".join("{" + n + "}" for n in names)
        )
        if where:
            msg += f" in {where}"
        super().__init__(msg, hint=hint or "give values with `lair rig set RIG NAME=VALUE` and --rig RIG")


class ConfigError(LairError):
    code = "config"


class TrustError(LairError):
    """An untrusted recipe asks for what its user has not accepted: ``risks`` (one line each) and,
    for a recipe that changed since it was accepted, ``diff`` (``- old`` / ``+ new`` lines)."""

    code = "trust"

    def __init__(
        self,
        message: str,
        *,
        hint: str = "",
        risks: list[str] | None = None,
        diff: list[str] | None = None,
        fingerprint: str = "",
    ) -> None:
        super().__init__(message, hint=hint)
        self.risks = list(risks or [])
        self.diff = list(diff or [])
        self.fingerprint = fingerprint
        """the sha256 of exactly what was shown (an acceptance at the prompt binds to it)"""

    def as_dict(self) -> dict[str, Any]:
        return {**super().as_dict(), "risks": self.risks, "diff": self.diff}


class CapabilityError(LairError):
    code = "capability"


class AllocationError(LairError):
    code = "allocation"


class RunnerError(LairError):
    """A command failed on a node: carries host, command, exit code and the tail of stderr."""

    code = "runner"

    def __init__(
        self,
        message: str,
        *,
        host: str,
        argv: list[str] | None = None,
        returncode: int | None = None,
        stderr_tail: str = "",
        hint: str = "",
    ) -> None:
        self.host = host
        self.argv = list(argv or [])
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        detail = f"{host}: {message}"
        if self.argv:
            detail += f"\n  command: {' '.join(self.argv)}"
        if returncode is not None:
            detail += f"\n  exit code: {returncode}"
        if stderr_tail:
            detail += "\n  stderr (tail):\n    " + "\n    ".join(stderr_tail.rstrip().splitlines()[-20:])
        super().__init__(detail, hint=hint)

    def as_dict(self) -> dict[str, Any]:
        d = super().as_dict()
        d.update(host=self.host, argv=self.argv, returncode=self.returncode, stderr_tail=self.stderr_tail)
        return d


class LaunchError(LairError):
    code = "launch"


class BenchError(LairError):
    code = "bench"


class NoisyError(BenchError):
    """Something else used the machine while cells ran (or their repeats disagree): the numbers are
    kept in the report, never submitted as a replication attempt (``lair reproduce``, ``rebench``)."""

    code = "bench.noisy"
    exit_code = 9


class InconclusiveError(BenchError):
    """A replication's own repeats spread wider than the row's noise band: it can say neither
    "reproduced" nor "not reproduced", and is not submitted."""

    code = "bench.inconclusive"
    exit_code = 10


class EvalError(LairError):
    code = "eval"


class FitError(LairError):
    code = "fit"


class HubError(FitError):
    """The Hub could not give a model's facts; the message starts with where (``ORG/NAME@REV:FILE``)."""

    code = "fit.hub"


class HubAuthError(HubError):
    code = "fit.hub.auth"


class HubOfflineError(HubError):
    code = "fit.hub.offline"


class HubBudgetError(HubError):
    code = "fit.hub.budget"


class InteropError(LairError):
    """A peer's file (a sparkrun or vLLM recipe, a benchmark's result file) cannot be imported: ``file``
    and ``path`` (the dotted field, or ``""`` for the whole file) locate the problem."""

    code = "interop"

    def __init__(self, file: str, path: str, message: str, *, hint: str = "") -> None:
        self.file = file
        self.path = path
        super().__init__(f"{file}: {path}: {message}" if path else f"{file}: {message}", hint=hint)

    def as_dict(self) -> dict[str, Any]:
        return {**super().as_dict(), "file": self.file, "path": self.path}


class RegistryError(LairError):
    """A registry request failed: ``status`` is the HTTP status, ``code`` a stable name such as
    ``not_found``, ``invalid``, ``conflict``; ``errors`` holds located recipe problems when there are any,
    ``reasons`` every reason a run report was refused."""

    code = "registry"
    status = 500

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        hint: str = "",
        errors: list[Issue] | None = None,
        reasons: list[str] | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.code = code
        self.errors = list(errors or [])
        self.reasons = list(reasons or [])

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        """For the CLI client: 3 refused (413/422), 4 duplicate (409), 5 not allowed (401/403),
        6 registry unreachable (status 0), else 1."""
        return {0: 6, 401: 5, 403: 5, 409: 4, 413: 3, 422: 3}.get(self.status, 1)

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"code": self.code, "message": self.message, "status": self.status}
        if self.hint:
            d["hint"] = self.hint
        if self.errors:
            d["errors"] = [i.as_dict() for i in self.errors]
        if self.reasons:
            d["reasons"] = self.reasons
        return d


class _HttpKind(RegistryError):
    """A registry error whose class fixes its HTTP ``status`` (and its default ``code``)."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "",
        hint: str = "",
        errors: list[Issue] | None = None,
        reasons: list[str] | None = None,
    ) -> None:
        super().__init__(
            type(self).status, code or type(self).code, message, hint=hint, errors=errors, reasons=reasons
        )


class Invalid(_HttpKind):
    """422: what was sent is wrong. ``location`` names the field or parameter (``name``, ``query
    parameter gpu``...) and leads the message as ``location: message``."""

    status, code = 422, "invalid"

    def __init__(self, message: str, *, location: str = "", **kw: Any) -> None:
        self.location = location
        super().__init__(f"{location}: {message}" if location else message, **kw)


class Unauthorized(_HttpKind):
    """401: no credentials, or credentials that name nobody."""

    status, code = 401, "unauthorized"


class Forbidden(_HttpKind):
    """403: the actor is known but may not do this."""

    status, code = 403, "forbidden"


class NotFound(_HttpKind):
    """404: no such recipe, revision, report, file, token, user..."""

    status, code = 404, "not_found"


class Conflict(_HttpKind):
    """409: the name is taken, the thing was done already, or is a duplicate."""

    status, code = 409, "conflict"


class TooLarge(_HttpKind):
    """413: past a size budget."""

    status, code = 413, "too_large"


class RateLimited(_HttpKind):
    """429: too many requests for now."""

    status, code = 429, "rate_limited"


class Unreachable(_HttpKind):
    """No answer at all (status 0): the registry is down, the address is wrong, or the network is."""

    status, code = 0, "unreachable"


class Internal(_HttpKind):
    """500: a server-side step failed (an operator's tool, a restore's check)."""

    status, code = 500, "internal"


class BadGateway(_HttpKind):
    """502: a sign-in provider answered something unusable."""

    status, code = 502, "provider"


class Unavailable(_HttpKind):
    """503: try again after ``retry_after`` seconds (the web layer sends them as ``Retry-After``);
    None where waiting will not help (a registry configured without its own address)."""

    status, code = 503, "unavailable"

    def __init__(self, message: str, *, retry_after: int | None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after

    def as_dict(self) -> dict[str, Any]:
        d = super().as_dict()
        return d if self.retry_after is None else d | {"retry_after": self.retry_after}


def error_for(
    status: int, code: str, message: str, *, hint: str = "", reasons: list[str] | None = None
) -> RegistryError:
    """The typed error of an HTTP answer (httpx's per-status exception classes): a caller tests
    ``isinstance(exc, NotFound)``, never the status number; a status no class names stays a plain
    :class:`RegistryError`."""
    for kind in _KINDS:
        if kind.status == status:
            if kind is Unavailable:
                return Unavailable(message, retry_after=None, code=code, hint=hint, reasons=reasons)
            return kind(message, code=code, hint=hint, reasons=reasons)
    return RegistryError(status, code, message, hint=hint, reasons=reasons)


_KINDS: tuple[type[_HttpKind], ...] = (
    Invalid, Unauthorized, Forbidden, NotFound, Conflict, TooLarge, RateLimited, Unreachable, Internal,
    BadGateway, Unavailable,
)  # fmt: skip
