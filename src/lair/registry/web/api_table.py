"""The API's operations, one row per documented (method, path), kept beside the route table of
:mod:`~lair.registry.web.app`: the route it runs on (``route``, as the app registers it), its
parameters, body, answer and the typed errors it may raise. :mod:`~lair.registry.web.openapi` turns
the rows into the document; a test checks that the rows and the app's ``/api/`` routes are the same
set."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from lair.errors import (
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    RateLimited,
    RegistryError,
    TooLarge,
    Unauthorized,
)
from lair.errors import Unavailable as Down
from lair.registry.service.archive import MAX_ARCHIVE_BYTES
from lair.registry.web import api_schemas as s

__all__ = ["OPERATIONS", "SECURITY_SCHEMES", "Op"]

Security = tuple[dict[str, list[str]], ...]

WRITE: Security = ({"bearer": []}, {"session": [], "csrf": []})
"""A write needs an API token, or a browser session (the cookie) with its CSRF token (the header)."""
SIGNED_IN: Security = ({"bearer": []}, {"session": []})
PUBLIC: Security = ()
READ_ERRORS: tuple[type[RegistryError], ...] = (NotFound, Invalid)
WRITE_ERRORS = (Unauthorized, Forbidden, NotFound, Conflict, TooLarge, Invalid, RateLimited)
SECURITY_SCHEMES = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "an API token (lair registry user add NAME): read only reads, writes need publish",
    },
    "session": {
        "type": "apiKey",
        "in": "cookie",
        "name": "lair_session",
        "description": "a browser session (sign in); writes need the csrf header too",
    },
    "csrf": {
        "type": "apiKey",
        "in": "header",
        "name": "X-CSRF-Token",
        "description": "the session's CSRF token (returned by sign-in and sign-up)",
    },
}
TEXT: dict[str, Any] = {"type": "string"}
RAW_FILE = {"application/json": s.RawJson, "text/markdown": TEXT, "text/plain": TEXT}
ARCHIVE = {
    "type": "string",
    "format": "binary",
    "description": f"the report folder, tar -czf (at most {MAX_ARCHIVE_BYTES:,} bytes)",
}


@dataclass(frozen=True)
class Op:
    """One operation. ``answer``: a model, a raw schema, or None for any JSON object; ``media``: its
    content type (or several, as a dict of schemas); ``errors``: what it may refuse with, each
    documented under its class's status; ``security``: None for a public read (``PUBLIC``: a
    public write, stated); ``default``: whether other statuses are documented as errors too."""

    method: str
    route: str
    id: str
    summary: str
    answer: type[BaseModel] | dict[str, Any] | None = None
    path: str = ""  # the documented path where the route serves it under a suffix: {slug}.json
    in_path: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    body: type[BaseModel] | dict[str, Any] | None = None
    body_media: str = "application/json"
    status: int = 200
    media: str | dict[str, Any] = "application/json"
    errors: tuple[type[RegistryError], ...] = READ_ERRORS
    security: Security | None = None
    default: bool = True
    page_errors: bool = False  # outside /api/v1 an error is a page, or the envelope under .json


def _write(method: str, route: str, id: str, summary: str, answer: type[BaseModel], **kw: Any) -> Op:
    kw.setdefault("security", WRITE)
    kw.setdefault("errors", WRITE_ERRORS)
    return Op(method, route, id, summary, answer, default=False, **kw)


RECIPE, API_REPORT, SLUG = "/api/v1/recipes/{name}", "/api/v1/reports/{name}", "/api/v1/recipes/{slug}"
REVISION, FILES = SLUG + "/revisions/{name}", "/reports/{rid}/files/{path:path}"
AS_FILE: dict[str, Any] = {"media": RAW_FILE, "errors": (NotFound,), "page_errors": True}
UPLOAD = (Unauthorized, Forbidden, Conflict, TooLarge, Invalid, RateLimited)  # a missing revision: 422
ME: dict[str, Any] = {"security": SIGNED_IN, "default": False}
# fmt: off
OPERATIONS: tuple[Op, ...] = (
    Op("GET", "/api/v1/recipes", "listRecipes", "search and filter recipes", s.RecipeList, query=s.ListQuery),
    _write("POST", "/api/v1/recipes", "publishRecipe", "publish a new recipe (revision 1)", s.Published,
           body=s.RecipeBody, status=201),
    Op("GET", RECIPE, "getRecipe", "a recipe at its latest revision", s.RecipeDocument,
       "/api/v1/recipes/{slug}.json", s.SlugPath),
    Op("GET", RECIPE, "getRecipeToml", "its recipe.toml", TEXT, "/api/v1/recipes/{slug}.toml", s.SlugPath,
       media="application/toml"),
    Op("GET", RECIPE, "getRecipeYaml", "its recipe as YAML", s.Recipe, "/api/v1/recipes/{slug}.yaml",
       s.SlugPath, media="application/yaml"),
    Op("GET", REVISION, "getRevision", "one revision", s.RecipeDocument, SLUG + "/revisions/{n}.json",
       s.RevisionPath),
    _write("POST", SLUG + "/revisions", "createRevision", "add a revision", s.Published, in_path=s.SlugPath,
           body=s.RecipeBody, status=201),
    _write("POST", SLUG + "/fork", "forkRecipe", "fork a recipe", s.Published, in_path=s.SlugPath,
           status=201),
    _write("PUT", SLUG + "/vote", "vote", "vote for a recipe", s.Votes, in_path=s.SlugPath),
    _write("DELETE", SLUG + "/vote", "unvote", "take a vote back", s.Votes, in_path=s.SlugPath),
    Op("GET", SLUG + "/diff", "diffRevisions", "the diff of two revisions", s.Diff, in_path=s.SlugPath,
       query=s.DiffQuery),
    Op("GET", SLUG + "/placeholders", "getPlaceholders", "the recipe with placeholder values",
       in_path=s.SlugPath),
    Op("GET", SLUG + "/fit", "getFit", "whether it fits a GPU", in_path=s.SlugPath, query=s.FitQuery),
    Op("GET", SLUG + "/cost", "getCost", "the rows' energy cost", in_path=s.SlugPath, query=s.CostQuery),
    _write("PUT", SLUG + "/hidden", "hideRecipe", "hide a recipe (admins)", s.HiddenRecipe,
           in_path=s.SlugPath),
    _write("DELETE", SLUG + "/hidden", "showRecipe", "show a recipe again (admins)", s.HiddenRecipe,
           in_path=s.SlugPath),
    _write("PUT", "/api/v1/users/{name}/hidden", "hideUser", "hide a user (admins)", s.HiddenUser,
           in_path=s.UserPath),
    _write("DELETE", "/api/v1/users/{name}/hidden", "showUser", "show a user again (admins)", s.HiddenUser,
           in_path=s.UserPath),
    _write("POST", "/api/v1/measurements/{id}/retract", "retractMeasurement", "retract a speed row",
           s.Retracted, in_path=s.RowPath, body=s.RetractBody),
    _write("POST", "/api/v1/quality/{id}/retract", "retractQualityRow", "retract a quality row", s.Retracted,
           in_path=s.RowPath, body=s.RetractBody),
    _write("POST", "/api/v1/users", "signUp", "create an account and its session", s.SignedIn, status=201,
           body=s.Credentials, security=PUBLIC, errors=(Conflict, TooLarge, Invalid, RateLimited)),
    _write("POST", "/api/v1/session", "signIn", "sign in: a new session", s.SignedIn, body=s.Credentials,
           security=PUBLIC, errors=(Unauthorized, TooLarge, Invalid, RateLimited)),
    _write("DELETE", "/api/v1/session", "signOut", "end this session (if any)", s.Done, security=PUBLIC,
           errors=(Unauthorized, Forbidden)),
    Op("GET", "/api/v1/me", "getMe", "the signed-in account", s.Me, errors=(Unauthorized,), **ME),
    Op("GET", "/api/v1/tokens", "listTokens", "your API tokens (never their values)", s.Tokens,
       errors=(Unauthorized, Forbidden), **ME),
    _write("POST", "/api/v1/tokens", "createToken", "a new API token", s.TokenMade, body=s.TokenBody,
           status=201),
    _write("DELETE", "/api/v1/tokens/{id}", "revokeToken", "revoke one of your tokens", s.Revoked,
           in_path=s.TokenPath),
    _write("POST", "/api/v1/reports", "submitReport", "upload a run report (lair submit)", s.SubmittedReport,
           query=s.ReplicatesQuery, body=ARCHIVE, body_media="application/gzip", status=201, errors=UPLOAD),
    Op("GET", API_REPORT, "getReport", "a stored report", s.Report, "/api/v1/reports/{id}.json",
       s.ReportPath),
    Op("GET", API_REPORT, "getReportById", "a stored report", s.Report, "/api/v1/reports/{id}", s.ReportPath),
    Op("GET", FILES, "getReportFile", "a report's raw file as uploaded", None, "/reports/{id}/files/{name}",
       s.ReportFilePath, **AS_FILE),
    Op("GET", FILES, "getReportLog", "a report's log as uploaded", None, "/reports/{id}/files/logs/{log}",
       s.ReportLogPath, **AS_FILE),
    Op("GET", "/api/v1/gpus", "listGpus", "the GPU catalog", s.Gpus),
    Op("GET", "/api/v1/efficiencies", "listEfficiencies", "verified rows as fractions of their roofline",
       s.Efficiencies, errors=()),
    Op("GET", "/api/v1/health", "getHealth", "whether the database answers", s.Health, errors=(Down,)),
    Op("GET", "/api/v1/openapi.json", "getOpenApi", "this document", errors=()),
)
# fmt: on
