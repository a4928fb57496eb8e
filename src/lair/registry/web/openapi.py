"""The OpenAPI 3.1 document of the API (``/api/v1/openapi.json``), generated: the operations of
:mod:`~lair.registry.web.api_table` with the JSON Schemas pydantic gives for the models of
:mod:`~lair.registry.web.api_schemas` (lair's recipe model among them, so ``recipe`` is checked
field by field), and each typed error an operation may raise under its class's status."""

from __future__ import annotations

from functools import cache
from typing import Any, TypeGuard

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from lair.errors import RegistryError
from lair.registry.web.api_schemas import Error
from lair.registry.web.api_table import OPERATIONS, SECURITY_SCHEMES, WRITE, Op

__all__ = ["openapi_document"]

REF = "#/components/schemas/{model}"
WRITE_NOTE = "401 without credentials, 403 when not allowed (or a cross-site or CSRF-less cookie request)."


def openapi_document(base: str) -> dict[str, Any]:
    paths, schemas = _generated()
    return {
        "openapi": "3.1.0",
        "info": {"title": "lair recipe registry", "version": "1"},
        "servers": [{"url": base}],
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": SECURITY_SCHEMES},
    }


@cache
def _generated() -> tuple[dict[str, Any], dict[str, Any]]:
    models: set[tuple[type[BaseModel], JsonSchemaMode]] = {(Error, "serialization")}
    models |= {(m, "serialization") for op in OPERATIONS for m in (op.answer,) if _is_model(m)}
    models |= {(m, "validation") for op in OPERATIONS for m in (op.body,) if _is_model(m)}
    keys = sorted(models, key=lambda k: k[0].__name__)
    refs, top = models_json_schema(keys, ref_template=REF)
    ref = {m: refs[(m, mode)] for m, mode in keys}
    paths: dict[str, Any] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path or op.route, {})[op.method.lower()] = _operation(op, ref)
    return paths, top.get("$defs", {})


def _is_model(x: object) -> TypeGuard[type[BaseModel]]:
    return isinstance(x, type) and issubclass(x, BaseModel)


def _schema(x: type[BaseModel] | dict[str, Any] | None, ref: dict[type[BaseModel], Any]) -> dict[str, Any]:
    if x is None:
        return {"type": "object"}
    return dict(ref[x]) if isinstance(x, type) else x


def _operation(op: Op, ref: dict[type[BaseModel], Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"operationId": op.id, "summary": op.summary, "x-route": op.route}
    params = _parameters(op.in_path, "path") + _parameters(op.query, "query")
    if params:
        out["parameters"] = params
    if op.body is not None:
        out["requestBody"] = {"required": True, "content": {op.body_media: {"schema": _schema(op.body, ref)}}}
    media = op.media if isinstance(op.media, dict) else {op.media: _schema(op.answer, ref)}
    out["responses"] = {str(op.status): {"description": op.summary, "content": _content(media)}}
    out["responses"] |= {str(e.status): _error(e, op, ref) for e in op.errors}
    if op.default:
        out["responses"]["default"] = {"description": "error", "content": _error_content(op, ref)}
    if op.security is not None:
        out["security"] = list(op.security)
    if op.security == WRITE:
        out["description"] = WRITE_NOTE
    return out


def _content(media: dict[str, Any]) -> dict[str, Any]:
    return {kind: {"schema": schema} for kind, schema in media.items()}


def _error(kind: type[RegistryError], op: Op, ref: dict[type[BaseModel], Any]) -> dict[str, Any]:
    return {"description": (kind.__doc__ or kind.code).split("\n")[0], "content": _error_content(op, ref)}


def _error_content(op: Op, ref: dict[type[BaseModel], Any]) -> dict[str, Any]:
    page = {"text/html": {"schema": {"type": "string"}}} if op.page_errors else {}
    return page | {"application/json": {"schema": dict(ref[Error])}}


def _parameters(model: type[BaseModel] | None, where: str) -> list[dict[str, Any]]:
    """One parameter per field of ``model``: its schema without the null a query string cannot say,
    its description, and its first example as the parameter's example."""
    if model is None:
        return []
    schema: dict[str, Any] = model.model_json_schema(ref_template=REF)
    required = set(schema.get("required", ()))
    out = []
    for name, prop in schema["properties"].items():
        p = {k: v for k, v in _not_null(prop).items() if k not in ("title", "default")}
        param = {"name": name, "in": where, "required": where == "path" or name in required}
        if "description" in p:
            param["description"] = p.pop("description")
        if "examples" in p:
            param["example"] = p.pop("examples")[0]
        out.append(param | {"schema": p})
    return out


def _not_null(prop: dict[str, Any]) -> dict[str, Any]:
    kinds: list[dict[str, Any]] = [k for k in prop.get("anyOf", ()) if k != {"type": "null"}]
    if len(kinds) != 1:
        return prop
    rest: dict[str, Any] = {k: v for k, v in prop.items() if k != "anyOf"}
    return rest | kinds[0]
