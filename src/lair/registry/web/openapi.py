"""The OpenAPI 3.1 document of the API (``/api/v1/openapi.json``): reads, and writes with their
``security`` (a bearer token, or a session cookie with its CSRF token).

Response schemas are written for what the routes return; the recipe model's own JSON Schema (from
lair's pydantic model) is embedded under ``components.schemas`` so ``recipe`` is checked field by field.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from lair.registry.service.archive import MAX_ARCHIVE_BYTES
from lair.registry.service.search import MAX_LIMIT, SORTS

__all__ = ["openapi_document"]

NUM = {"type": ["number", "null"]}
INT = {"type": ["integer", "null"]}
STR = {"type": ["string", "null"]}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": required if required is not None else list(props),
    }


def _error_schema() -> dict[str, Any]:
    err = _obj({"code": {"type": "string"}, "message": {"type": "string"}, "status": {"type": "integer"}})
    err["properties"] |= {"hint": {"type": "string"}, "errors": {"type": "array"}}
    err["properties"]["reasons"] = {"type": "array", "items": {"type": "string"}}  # a refused report
    return _obj({"ok": {"const": False}, "error": err})


def _measurement() -> dict[str, Any]:
    return _obj(
        {
            "id": {"type": "integer"},
            "revision": {"type": "integer"},
            "context": {"type": "integer"},
            "concurrency": {"type": "integer"},
            "prefill_tok_s": NUM,
            "decode_tok_s": NUM,
            "decode_tok_s_per_stream": NUM,
            "ttft_ms": NUM,
            "provenance": {"enum": ["reported", "reported-by-report", "verified", "replicated"]},
            "note": {"type": "string", "description": "a reported-by-report row: why it is not verified"},
            "submitted_by": STR,
            "created_at": {"type": "string"},
            "retracted": {"type": "boolean"},
            "retracted_reason": STR,
            "report_id": STR,
            "rig": STR,
            "tier": {"enum": ["reported", "reported-by-report", "verified", "replicated"]},
            "rigs": INT,
            "accounts": INT,
            "spread": NUM,
            "filer_new": {
                "type": ["boolean", "null"],
                "description": "whether the account was new when it filed the row (null: not known)",
            },
            "new_accounts": {
                **INT,
                "description": "accounts of the row's group that were new when they filed",
            },
            "new_account_replication": {
                "type": "boolean",
                "description": "replicated only with the help of accounts that were new when they filed",
            },
            "links": {"type": "object", "additionalProperties": {"type": "string"}},
            "row_id": {"type": "string", "description": "the row's stable id, SLUG@REVISION#ID"},
            "replication": {
                "type": "object",
                "description": "status of the counted attempts (pending, replicated, not-reproduced, mixed), "
                "counts and attempts[] (each with counted, not_counted and the account's standing)",
            },
            "certificate": {
                "type": ["object", "null"],
                "description": "how the cell was measured: cache, client, order, warm-up, GPU, software",
            },
            "certificate_missing": {"type": ["string", "null"], "description": "why there is none"},
            "energy": {"type": ["object", "null"], "description": "J per output and prompt token, W, source"},
            "cost": {"type": "object", "description": "price_kwh, usd_per_mtok_energy, why_none"},
        }
    )


def _quality() -> dict[str, Any]:
    tiers = {"enum": ["reported", "reported-by-report", "verified", "replicated"]}
    return _obj(
        {
            "id": {"type": "integer"},
            "revision": {"type": "integer"},
            "suite": {"type": "string"},
            "metric": {"type": "string"},
            "score": {"type": "number"},
            "unit": {"type": "string"},
            "n": INT,
            "stderr": NUM,
            "repeats": INT,
            "repeat_spread": {"anyOf": [{"type": "null"}, _obj({"min": NUM, "max": NUM})]},
            "flips": INT,
            "provenance": tiers,
            "note": {"type": "string"},
            "submitted_by": STR,
            "created_at": {"type": "string"},
            "retracted": {"type": "boolean"},
            "retracted_reason": STR,
            "report_id": STR,
            "rig": STR,
            "tier": tiers,
            "rigs": INT,
            "spread": NUM,
            "links": {"type": "object", "additionalProperties": {"type": "string"}},
        }
    )


def _report() -> dict[str, Any]:
    return _obj(
        {
            "ok": {"const": True},
            "id": {"type": "string"},
            "slug": {"type": "string"},
            "revision": {"type": "integer"},
            "rig_fingerprint": {"type": "string"},
            "fingerprint": {"type": "object"},
            "files": {"type": "array", "items": {"type": "string"}},
            "run_name": {"type": "string"},
            "created_at": {"type": "string"},
        }
    )


def _submitted() -> dict[str, Any]:
    """The 201 of ``POST /api/v1/reports``: the stored report, its verified speed and quality rows."""
    row = _obj(
        {
            "context": {"type": "integer"},
            "concurrency": {"type": "integer"},
            "prompt_tokens": INT,
            "ttft_ms": NUM,
            "prefill_tok_s": NUM,
            "decode_tok_s": NUM,
            "decode_tok_s_per_stream": NUM,
            "roofline": {"type": "object", "description": "% of the roofline, or why it is missing"},
            "provenance": {"enum": ["verified", "reported-by-report"]},
            "note": {"type": "string", "description": "why a reported-by-report row is not verified"},
            "energy": {
                "type": ["object", "null"],
                "description": "the certificate's energy: J per token, tokens per kWh, watts, $/Mtok",
            },
            "certificate": {"type": ["object", "null"], "description": "what the recipe page shows of it"},
        }
    )
    quality = _obj(
        {
            "suite": {"type": "string"},
            "metric": {"type": "string"},
            "score": {"type": "number"},
            "unit": {"type": "string"},
            "n": {"type": "integer"},
            "stderr": NUM,
            "repeats": {"type": "integer"},
            "spread_min": {"type": "number"},
            "spread_max": {"type": "number"},
            "flips": INT,
            "provenance": {"enum": ["verified", "reported-by-report"]},
            "note": {"type": "string"},
        }
    )
    return _obj(
        {
            "ok": {"const": True},
            "id": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
            "slug": {"type": "string"},
            "revision": {"type": "integer", "minimum": 1},
            "rows": {"type": "array", "items": row},
            "quality": {"type": "array", "items": quality},
            "url": {"type": "string"},
            "report_url": {"type": "string"},
            "replication": {"type": "array", "description": "with ?replicates: each linked row's verdict"},
        },
        ["ok", "id", "slug", "revision", "rows", "quality", "url", "report_url"],
    )


def _recipe_doc() -> dict[str, Any]:
    rev = _obj(
        {
            "number": {"type": "integer"},
            "sha256": {"type": "string"},
            "notes": {"type": "string"},
            "author": {"type": "string"},
            "created_at": {"type": "string"},
        }
    )
    floor = {
        "type": "object",
        "required": ["driver", "cuda", "text", "reason", "source", "source_url", "source_date"],
    }
    return _obj(
        {
            "ok": {"const": True},
            "slug": {"type": "string"},
            "title": {"type": "string"},
            "revision": {"type": "integer"},
            "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
            "owner": {"type": "string"},
            "upstream": STR,
            "upstream_revision": INT,
            "votes": {"type": "integer"},
            "created_at": {"type": "string"},
            "updated_at": {"type": "string"},
            "recipe": _ref("Recipe"),
            "measurements": {"type": "array", "items": _ref("Measurement")},
            "price_kwh": {"type": "number", "description": "the $ per kWh of the rows' cost"},
            "quality": {"type": "array", "items": _ref("QualityRow")},
            "driver_floor": floor,
            "revisions": {"type": "array", "items": rev},
            "links": {"type": "object"},
        }
    )


def _list_doc() -> dict[str, Any]:
    item = _obj(
        {
            "slug": {"type": "string"},
            "title": {"type": "string"},
            "summary": {"type": "string"},
            "engine": {"type": "string"},
            "gpu_model": STR,
            "gpu_count": INT,
            "vram_gb": NUM,
            "model": STR,
            "max_context": INT,
            "license": STR,
            "tags": {"type": "array", "items": {"type": "string"}},
            "votes": {"type": "integer"},
            "revision": {"type": "integer"},
            "updated_at": {"type": "string"},
            "best_decode_tok_s": NUM,
            "best_verified_decode_tok_s": NUM,
            "verified": {"type": "boolean"},
            "url": {"type": "string"},
            "api_url": {"type": "string"},
        }
    )
    return _obj(
        {
            "ok": {"const": True},
            "items": {"type": "array", "items": item},
            "count": {"type": "integer"},
            "next_cursor": STR,
        }
    )


def _q(name: str, schema: dict[str, Any], desc: str, **kw: Any) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": desc, **kw}


def _list_params() -> list[dict[str, Any]]:
    return [
        _q(
            "q",
            {"type": "string", "maxLength": 200},
            "full-text query over title, summary, model, tags, notes",
        ),
        _q("gpu", {"type": "string", "maxLength": 100}, "GPU model, e.g. RTX PRO 6000"),
        _q("gpus", {"type": "integer", "minimum": 1, "maximum": 4096}, "GPU count"),
        _q("min_vram", {"type": "number", "minimum": 0, "maximum": 1000000}, "minimum VRAM per GPU (GB)"),
        _q("engine", {"type": "string", "maxLength": 64}, "serving engine"),
        _q("model", {"type": "string", "maxLength": 300}, "model id"),
        _q(
            "tag",
            {"type": "array", "items": {"type": "string", "maxLength": 100}, "maxItems": 10},
            "tags (all must match)",
            style="form",
            explode=True,
        ),
        _q(
            "min_context", {"type": "integer", "minimum": 1, "maximum": 10**9}, "minimum max context (tokens)"
        ),
        _q(
            "verified",
            {"type": "boolean"},
            "verified only: recipes with verified numbers, and sort=decode ranks by verified rows only",
        ),
        _q("sort", {"enum": list(SORTS)}, "sort order (descending); decode: see verified"),
        _q(
            "context",
            {"type": "integer", "minimum": 1, "maximum": 10**9},
            "context of the decode speed to sort by",
        ),
        _q("limit", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}, "page size"),
        _q("cursor", {"type": "string", "maxLength": 500}, "next_cursor of the previous page"),
    ]


def _responses(ok: dict[str, Any], media: str = "application/json") -> dict[str, Any]:
    err = {"content": {"application/json": {"schema": _ref("Error")}}}
    return {
        "200": {"description": "ok", "content": {media: {"schema": ok}}},
        "404": {"description": "not found", **err},
        "422": {"description": "invalid parameters", **err},
        "default": {"description": "error", **err},
    }


def _path(slug: bool = True, rev: bool = False) -> list[dict[str, Any]]:
    out = []
    if slug:
        out.append(
            {
                "name": "slug",
                "in": "path",
                "required": True,
                "schema": {"type": "string", "pattern": "^[a-z0-9-]{1,200}$"},
                "example": "tiny-cpu",
            }
        )
    if rev:
        rev_schema = {"type": "integer", "minimum": 1}
        out.append({"name": "n", "in": "path", "required": True, "schema": rev_schema, "example": 1})
    return out


def _paths() -> dict[str, Any]:
    doc, text = _ref("RecipeDocument"), {"type": "string"}
    return {
        "/api/v1/recipes": {
            "get": {
                "operationId": "listRecipes",
                "parameters": _list_params(),
                "responses": _responses(_ref("RecipeList")),
            }
        },
        "/api/v1/recipes/{slug}.json": {
            "get": {"operationId": "getRecipe", "parameters": _path(), "responses": _responses(doc)}
        },
        "/api/v1/recipes/{slug}.toml": {
            "get": {
                "operationId": "getRecipeToml",
                "parameters": _path(),
                "responses": _responses(text, "application/toml"),
            }
        },
        "/api/v1/recipes/{slug}.yaml": {
            "get": {
                "operationId": "getRecipeYaml",
                "parameters": _path(),
                "responses": _responses(_ref("Recipe"), "application/yaml"),
            }
        },
        "/api/v1/recipes/{slug}/revisions/{n}.json": {
            "get": {"operationId": "getRevision", "parameters": _path(rev=True), "responses": _responses(doc)}
        },
        "/api/v1/gpus": {
            "get": {
                "operationId": "listGpus",
                "responses": _responses({"type": "object", "required": ["ok", "gpus"]}),
            }
        },
    }


def _report_paths() -> dict[str, Any]:
    """A stored report (its JSON, with or without ``.json``) and its raw files, as the page links them."""
    rid = {
        "name": "id",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
    }
    kept = r"^(results\.json|requests\.jsonl|fingerprint\.json|report\.md|eval_samples\.jsonl"
    kept += r"|[\w.-]+\.recipe\.toml)$"
    name = {"name": "name", "in": "path", "required": True, "schema": {"type": "string", "pattern": kept}}
    log = {
        "name": "log",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": r"^[\w.-]+\.log$"},
    }
    text = {"schema": {"type": "string"}}
    raw = {"application/json": {"schema": _ref("RawJson")}, "text/markdown": text, "text/plain": text}
    # outside /api/v1 an error is a page, or the JSON envelope when the path ends in .json
    page = {
        "content": {
            "text/html": {"schema": {"type": "string"}},
            "application/json": {"schema": _ref("Error")},
        }
    }
    files = {"200": {"description": "the raw file as uploaded", "content": raw}}
    files |= {
        "404": {"description": "no such report or file", **page},
        "default": {"description": "error", **page},
    }
    doc = _responses(_ref("Report"))
    return {
        "/api/v1/reports/{id}.json": {
            "get": {"operationId": "getReport", "parameters": [rid], "responses": doc}
        },
        "/api/v1/reports/{id}": {
            "get": {"operationId": "getReportById", "parameters": [rid], "responses": doc}
        },
        "/reports/{id}/files/{name}": {
            "get": {"operationId": "getReportFile", "parameters": [rid, name], "responses": files}
        },
        "/reports/{id}/files/logs/{log}": {
            "get": {"operationId": "getReportLog", "parameters": [rid, log], "responses": files}
        },
    }


def _write_responses(created: dict[str, Any], status: str = "201") -> dict[str, Any]:
    err = {"content": {"application/json": {"schema": _ref("Error")}}}
    out = {status: {"description": "done", "content": {"application/json": {"schema": created}}}}
    for code, what in (
        ("401", "anonymous"),
        ("403", "not allowed"),
        ("404", "not found"),
        ("409", "conflict"),
        ("413", "too large"),
        ("422", "invalid"),
        ("429", "rate-limited"),
    ):
        out[code] = {"description": what, **err}
    return out


def _body(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema = {"type": "object", "properties": props, "required": required}
    return {"required": True, "content": {"application/json": {"schema": schema}}}


# A write needs an API token, or a browser session (the cookie) with its CSRF token (the header).
WRITE_SECURITY: list[dict[str, list[str]]] = [{"bearer": []}, {"session": [], "csrf": []}]
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


def _write(op: dict[str, Any]) -> dict[str, Any]:
    return op | {
        "security": WRITE_SECURITY,
        "description": "401 without credentials, 403 when not allowed (or a cross-site or CSRF-less "
        "cookie request).",
    }


def _submit_path() -> dict[str, Any]:
    """``POST /api/v1/reports``: a run report folder as one ``.tar.gz`` body (``lair submit``)."""
    body = {
        "required": True,
        "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
        "description": f"the report folder, tar -czf (at most {MAX_ARCHIVE_BYTES:,} bytes)",
    }
    responses = _write_responses(_ref("SubmittedReport"))
    del responses["404"]  # the revision a report names not being there is a 422 with that reason
    for code, what in (("409", "a duplicate of a stored report"), ("422", "refused, with its reasons")):
        responses[code]["description"] = what
    replicates = _q(
        "replicates",
        {"type": "string", "pattern": r"^[a-z0-9]+(-[a-z0-9]+)*@[1-9][0-9]*#([1-9][0-9]*|report-[0-9a-f]+)$"},
        "the row id (SLUG@REV#ROW, or #report-ID) this report is a replication attempt of",
        example="tiny-cpu@1#1",
    )
    op = {
        "operationId": "submitReport",
        "parameters": [replicates],
        "requestBody": body,
        "responses": responses,
    }
    return {"/api/v1/reports": {"post": _write(op)}}


def _hide_paths() -> dict[str, Any]:
    """An admin hides (PUT) or shows again (DELETE) a recipe or a user."""
    user = [{"name": "name", "in": "path", "required": True,
             "schema": {"type": "string", "pattern": "^[a-z0-9-]{1,40}$"}, "example": "tester"}]  # fmt: skip
    out: dict[str, Any] = {}
    for path, params, key, noun in (
        ("/api/v1/recipes/{slug}/hidden", _path(), "slug", "Recipe"),
        ("/api/v1/users/{name}/hidden", user, "name", "User"),
    ):
        done = _obj({"ok": {"const": True}, key: {"type": "string"}, "hidden": {"type": "boolean"}})
        ops = {"put": "hide", "delete": "show"}
        out[path] = {
            m: _write(
                {"operationId": v + noun, "parameters": params, "responses": _write_responses(done, "200")}
            )
            for m, v in ops.items()
        }
    return out


def _write_paths() -> dict[str, Any]:
    """The authenticated writes (``security``: a bearer token, or a session cookie with its CSRF
    token); the test supplies a token and schemathesis' auth checks probe without one."""
    toml = {"toml": {"type": "string"}, "notes": {"type": "string"}}
    pub = _obj({"ok": {"const": True}, "slug": {"type": "string"}, "revision": {"type": "integer"}})
    votes = _obj({"ok": {"const": True}, "votes": {"type": "integer", "minimum": 0}})
    mid = [
        {
            "name": "id",
            "in": "path",
            "required": True,
            "schema": {"type": "integer", "minimum": 1, "maximum": 2**62 - 1},
            "example": 1,
        }
    ]
    return {
        "/api/v1/recipes/{slug}/revisions": {
            "post": _write(
                {
                    "operationId": "createRevision",
                    "parameters": _path(),
                    "requestBody": _body(toml, ["toml"]),
                    "responses": _write_responses(pub),
                }
            )
        },
        "/api/v1/recipes/{slug}/fork": {
            "post": _write(
                {
                    "operationId": "forkRecipe",
                    "parameters": _path(),
                    "responses": _write_responses(pub),
                }
            )
        },
        "/api/v1/recipes/{slug}/vote": {
            "put": _write(
                {
                    "operationId": "vote",
                    "parameters": _path(),
                    "responses": _write_responses(votes, "200"),
                }
            ),
            "delete": _write(
                {
                    "operationId": "unvote",
                    "parameters": _path(),
                    "responses": _write_responses(votes, "200"),
                }
            ),
        },
        "/api/v1/recipes/{slug}/diff": {
            "get": {
                "operationId": "diffRevisions",
                "parameters": [
                    *_path(),
                    {
                        "name": "from",
                        "in": "query",
                        "required": True,
                        "schema": {"type": "integer", "minimum": 1, "maximum": 10**9},
                    },
                    {
                        "name": "to",
                        "in": "query",
                        "required": True,
                        "schema": {"type": "integer", "minimum": 1, "maximum": 10**9},
                    },
                ],
                "responses": _responses(
                    _obj(
                        {
                            "ok": {"const": True},
                            "from": {"type": "integer"},
                            "to": {"type": "integer"},
                            "diff": {"type": "string"},
                        }
                    )
                ),
            }
        },
        "/api/v1/measurements/{id}/retract": _retract_op("retractMeasurement", mid),
        "/api/v1/quality/{id}/retract": _retract_op("retractQualityRow", mid),
    }


def _retract_op(op_id: str, mid: list[dict[str, Any]]) -> dict[str, Any]:
    body = _body({"reason": {"type": "string", "minLength": 1, "pattern": "\\S"}}, ["reason"])
    done = _obj({"ok": {"const": True}, "retracted": {"type": "integer"}})
    op = {
        "operationId": op_id,
        "parameters": mid,
        "requestBody": body,
        "responses": _write_responses(done, "200"),
    }
    return {"post": _write(op)}


@cache
def _schemas() -> dict[str, Any]:
    from lair.recipe import Recipe

    recipe: dict[str, Any] = Recipe.model_json_schema(
        ref_template="#/components/schemas/{model}", mode="serialization"
    )
    defs: dict[str, Any] = recipe.pop("$defs", {})
    return defs | {
        "Recipe": recipe,
        "Error": _error_schema(),
        "Measurement": _measurement(),
        "QualityRow": _quality(),
        "Report": _report(),
        "SubmittedReport": _submitted(),
        "RawJson": {"type": ["object", "array"], "description": "results.json or fingerprint.json"},
        "RecipeDocument": _recipe_doc(),
        "RecipeList": _list_doc(),
    }


def openapi_document(base: str) -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "lair recipe registry", "version": "1"},
        "servers": [{"url": base}],
        "paths": _paths()
        | _report_paths()
        | _write_paths()
        | _hide_paths()
        | _submit_path()
        | _token_path()
        | _me_path()
        | {"/api/v1/recipes": _paths()["/api/v1/recipes"] | _publish_op()},
        "components": {"schemas": _schemas(), "securitySchemes": SECURITY_SCHEMES},
    }


def _publish_op() -> dict[str, Any]:
    pub = _obj({"ok": {"const": True}, "slug": {"type": "string"}, "revision": {"type": "integer"}})
    body = _body({"toml": {"type": "string"}, "notes": {"type": "string"}}, ["toml"])
    op = {"operationId": "publishRecipe", "requestBody": body, "responses": _write_responses(pub)}
    return {"post": _write(op)}


def _me_path() -> dict[str, Any]:
    """``GET /api/v1/me``: the account a token or session acts as (``lair login`` checks a token with it)."""
    me = _obj({"name": {"type": "string"}, "admin": {"type": "boolean"},
               "scopes": {"type": "array", "items": {"enum": ["read", "publish"]}}})  # fmt: skip
    err = {"content": {"application/json": {"schema": _ref("Error")}}}
    responses = {
        "200": {"description": "the signed-in account", "content": {"application/json": {"schema": me}}}
    }
    responses["401"] = {"description": "anonymous, or a bad token", **err}
    op = {"operationId": "getMe", "responses": responses, "security": [{"bearer": []}, {"session": []}]}
    return {"/api/v1/me": {"get": op}}


def _token_path() -> dict[str, Any]:
    """``POST /api/v1/tokens``: a new API token, its value in this answer only."""
    scope, name = {"enum": ["read", "publish"]}, {"type": "string", "minLength": 1, "maxLength": 100}
    body = _body({"name": name, "scope": scope}, ["name", "scope"])
    made = _obj({"ok": {"const": True}, "token": {"type": "string"}, "id": {"type": "integer"},
                 "name": {"type": "string"}, "scope": scope})  # fmt: skip
    op = {"operationId": "createToken", "requestBody": body, "responses": _write_responses(made)}
    return {"/api/v1/tokens": {"post": _write(op)}}
