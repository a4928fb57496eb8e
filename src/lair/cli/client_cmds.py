"""``lair login|search|pull|push|submit``: the registry's client (lair.client) on the command line.

Exit codes: 0 done; 1 other errors; 3 refused by the registry (invalid, too large); 4 duplicate;
5 not allowed (sign-in or permission); 6 registry unreachable.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from lair.cli._common import dump_json, err

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["register", "submit_report"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "login",
        help="check an API token with the registry, then store it and the URL (0600, in the config dir)",
    )
    p.add_argument("url", nargs="?", metavar="URL", help="registry URL (default: the stored one)")
    p.add_argument(
        "--token",
        metavar="T",
        help="API token (else read from stdin when piped, else asked for; LAIR_TOKEN overrides)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=cmd_login)
    s = sub.add_parser("search", help="search the registry's recipes")
    s.add_argument("query", nargs="?", default="", metavar="QUERY")
    s.add_argument("--gpu", metavar="MODEL", help="GPU model, e.g. H200")
    s.add_argument("--gpus", type=int, metavar="N", help="GPU count")
    s.add_argument("--engine", metavar="NAME")
    s.add_argument("--verified", action="store_true", help="only recipes with verified numbers")
    s.add_argument("--json", action="store_true", help="print one JSON document")
    s.set_defaults(handler=cmd_search)
    u = sub.add_parser("pull", help="download a recipe revision (marked untrusted: launch asks first)")
    u.add_argument("ref", metavar="SLUG[@REV]")
    u.add_argument("-o", "--output", metavar="FILE", help="where to write it (default ./SLUG.toml)")
    u.add_argument("--json", action="store_true", help="print one JSON document")
    u.set_defaults(handler=cmd_pull)
    h = sub.add_parser(
        "push",
        help="publish a recipe, or a new revision of yours (diff first; the first push writes meta.slug)",
    )
    h.add_argument("file", metavar="FILE")
    h.add_argument("--notes", default="", help="revision notes")
    h.add_argument("-y", "--yes", action="store_true", help="do not ask")
    h.add_argument(
        "--model",
        metavar="DIR",
        help="model folder, GGUF file or HF cache entry whose facts go into [meta.model_facts] "
        "(default: where lair fit looks: the recipe's model path, the HF cache, the fit/ folder beside it)",
    )
    h.add_argument("--json", action="store_true", help="print one JSON document")
    h.set_defaults(handler=cmd_push)
    m = sub.add_parser("submit", help="upload a run report folder; the registry verifies it")
    m.add_argument("report", metavar="REPORT_DIR")
    m.add_argument("--json", action="store_true", help="print one JSON document")
    m.set_defaults(handler=cmd_submit)


def _client() -> Any:
    from lair.client import Client

    return Client()


def _read_token(args: argparse.Namespace, url: str) -> str | None:
    """The token: ``--token``, else piped on stdin (``echo T | lair login URL``), else asked for."""
    token = args.token
    if token is None and not sys.stdin.isatty():
        token = sys.stdin.read()
    elif token is None:
        import getpass

        token = getpass.getpass(f"API token for {url} (create one at {url}/account; empty for none): ")
    return token.strip() or None


def _checked_login(client: Any) -> dict[str, Any] | None:
    """Who the token acts as, asked of the registry (``GET /api/v1/me``); a refused token is an error."""
    from lair.errors import Unauthorized

    client.health()  # the registry answers before anything is stored
    if not client.creds.token:
        return None
    try:
        return dict(client.me())
    except Unauthorized as exc:
        url = client.creds.url
        raise Unauthorized(
            f"{url} refused the token: {exc.message}; nothing was saved", code=exc.code,
            hint=f"create a token at {url}/account (scope publish to push) and run `lair login {url}` again",
        ) from None  # fmt: skip


def cmd_login(args: argparse.Namespace) -> int:
    from lair.client import Client, Credentials

    creds = Credentials.load()
    creds.url = (args.url or creds.url).rstrip("/")
    creds.token = _read_token(args, creds.url)
    who = _checked_login(Client(creds))
    path = creds.save()
    if args.json:
        user, scopes = (who["name"], list(who["scopes"])) if who else (None, [])
        dump_json({"ok": True, "url": creds.url, "user": user, "scopes": scopes, "token": bool(who),
                   "file": str(path)})  # fmt: skip
    else:
        _say_logged_in(creds.url, who, path)
    return 0


def _say_logged_in(url: str, who: dict[str, Any] | None, path: Path) -> None:
    if who is None:
        err(f"logged in to {url} without a token (read only); saved in {path}")
        return
    scopes = ", ".join(who["scopes"]) + (", admin" if who.get("admin") else "")
    err(f"logged in to {url} as {who['name']} (scopes: {scopes}); saved in {path}")
    if "publish" not in who["scopes"]:
        err(f"warning: this token cannot push or submit; create one with scope publish at {url}/account")


def cmd_search(args: argparse.Namespace) -> int:
    res = _client().search(
        args.query, gpu=args.gpu, gpus=args.gpus, engine=args.engine, verified=args.verified
    )
    if args.json:
        dump_json(res)
        return 0
    for i in res.get("items", []):
        gpu = f"{i.get('gpu_count') or 1}x {i['gpu_model']}" if i.get("gpu_model") else "-"
        speed = f"{i['best_decode_tok_s']:,.1f} tok/s" if i.get("best_decode_tok_s") else "-"
        tag = "; verified" if i.get("verified") else ""
        print(f"{i['slug']}  {i.get('title', '')}  [{i.get('engine')}; {gpu}; {speed}{tag}]")
    if not res.get("items"):
        err("no recipes found")
    return 0


def _split_ref(ref: str) -> tuple[str, int | None]:
    slug, at, rev = ref.partition("@")
    if at and not rev.isdigit():
        from lair.errors import Invalid

        raise Invalid(f"bad revision in {ref!r}", hint="SLUG or SLUG@N, e.g. tiny-cpu@1")
    return slug, int(rev) if at else None


def cmd_pull(args: argparse.Namespace) -> int:
    from pathlib import Path

    from lair.launch.pulled import pull_revision

    slug, rev = _split_ref(args.ref)
    out = Path(args.output or f"{slug}.toml")
    doc, sha = pull_revision(_client(), slug, rev, out)
    if args.json:
        dump_json({"ok": True, "slug": slug, "revision": doc["revision"], "sha256": sha, "file": str(out)})
    else:
        print(out)
        err(f"pulled {slug} revision {doc['revision']} (sha256 {sha[:12]})")
        err("marked untrusted: `lair launch` shows what it asks for and waits for your acceptance")
    return 0


def _confirm(question: str) -> bool:
    """The user's answer on the terminal; with no terminal to ask on, a ConfigError saying to pass -y."""
    if not sys.stdin.isatty():
        from lair.errors import ConfigError

        raise ConfigError(
            f"{question.rstrip('?')}: not published, there is no terminal to ask on",
            hint="pass -y to publish without asking",
        )
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _push_target(client: Any, recipe: Any, file: str) -> tuple[str, bool]:
    """The recipe a push goes to: the file's ``meta.slug`` (else the slug the registry gives its title)
    and whether that recipe exists and is the pusher's (a new revision) or not yet (a new recipe)."""
    from lair.errors import Conflict, NotFound
    from lair.registry.service.facets import slugify

    slug = str(recipe.meta.slug or slugify(recipe.meta.title or recipe.display_name))
    try:
        owner = client.recipe(slug)["owner"]
    except NotFound:
        return slug, False
    me, url = client.me()["name"], client.creds.url
    if owner != me:
        raise Conflict(
            f"{url} has a recipe {slug!r} by {owner}; you are {me}",
            hint=f"fork it at {url}/recipes/{slug}, or give {file} a slug of its own: "
            f"lair set {file} meta.slug=NEW-SLUG",
        )  # fmt: skip
    if not recipe.meta.slug:
        err(f"{file} has no meta.slug; its title names your recipe {slug}: a new revision of it")
    return slug, True


def _comparable(recipe: Any, old: str | None) -> str:
    """The file as the registry would store it; a slug written back after the first push is no change
    against a revision that had none."""
    import tomllib

    from lair.recipe import export_text

    if old is not None and recipe.meta.slug and "slug" not in tomllib.loads(old).get("meta", {}):
        recipe = recipe.model_copy(update={"meta": recipe.meta.model_copy(update={"slug": None})})
    return export_text(recipe, "toml")


def _write_slug(file: str, slug: str) -> bool:
    """``meta.slug`` into a TOML file after its first push (as ``lair set``: comments and layout kept)."""
    import json

    from lair.recipe import edit_toml, format_of

    if format_of(file) != "toml":
        err(f"warning: add slug {slug!r} to {file}'s meta so that the next push revises this recipe")
        return False
    result = edit_toml(file, {"meta.slug": json.dumps(slug)})  # a quoted TOML string, never a number
    if result.ok:
        err(f"wrote meta.slug = {slug!r} into {file}: the next push is a new revision of it")
    return result.ok


def _changed(client: Any, recipe: Any, slug: str, file: str) -> bool:
    """Show the diff of ``file`` against the latest revision of ``slug``; whether there is one."""
    import difflib

    old: str = client.recipe_toml(slug)
    new = _comparable(recipe, old)
    sys.stderr.writelines(
        difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"{slug} (latest)", file)
    )
    return old != new


def _with_facts(args: argparse.Namespace, recipe: Any, text: str) -> tuple[Any, str, bool]:
    """The recipe (and its text) with ``[meta.model_facts]`` and ``[meta.fit_layout]`` from what
    ``lair fit`` reads for it, when it has no facts yet; whether they were added."""
    from pathlib import Path

    from lair.fit.recipe_facts import facts_table, fit_layout_table, local_facts, with_fit_tables
    from lair.recipe import format_of, load_text

    if recipe.meta.model_facts is not None:
        return recipe, text, False
    got = local_facts(recipe, Path(args.file).resolve().parent, args.model)
    if got is None:
        err("note: no model facts found (no model folder, HF cache entry or fit/config.json); "
            "the registry sizes the model only if it knows it: pass --model DIR")  # fmt: skip
        return recipe, text, False
    facts, layout, source = got
    try:
        tables = facts_table(facts), {} if recipe.meta.fit_layout else fit_layout_table(layout)
    except ValueError as exc:
        err(f"warning: the model facts read from {source} are not published: {exc}")
        return recipe, text, False
    if format_of(args.file) != "toml":
        err(f"warning: add [meta.model_facts] to {args.file} by hand (lair fit --json shows them)")
        return recipe, text, False
    new = with_fit_tables(text, *tables)
    err(f"model facts from {source} go into [meta.model_facts]")
    return load_text(new, args.file), new, True


def cmd_push(args: argparse.Namespace) -> int:
    from pathlib import Path

    from lair.recipe import load_recipe

    text = Path(args.file).read_text(encoding="utf-8")
    recipe, client = load_recipe(args.file), _client()
    recipe, text, facts_added = _with_facts(args, recipe, text)
    slug, revise = _push_target(client, recipe, args.file)
    if revise and not _changed(client, recipe, slug, args.file):
        err(f"no change against the latest revision of {slug}")
        return 0
    what = f"a new revision of {slug}" if revise else f"a new recipe, {slug}"
    if not args.yes and not _confirm(f"publish {what}?"):
        err("not published")
        return 1
    res = dict(client.push(text, args.notes, slug if revise else None))
    if facts_added:  # the file is the revision, so that its runs' reports name it
        Path(args.file).write_text(text, encoding="utf-8")
        err(f"wrote [meta.model_facts] into {args.file}")
    wrote = not recipe.meta.slug and _write_slug(args.file, str(res["slug"]))
    dump_json(res | {"slug_written": wrote, "model_facts_written": facts_added}) if args.json else err(
        f"published {res['slug']} revision {res['revision']}"
    )
    return 0


def submit_report(folder: str | Path, client: Any = None, replicates: str | None = None) -> dict[str, Any]:
    """Pack and upload one report folder (``replicates``: as a replication attempt of that row id);
    the server's answer (raises RegistryError when refused)."""
    from lair.client import pack_report, submitted

    client = client or _client()
    res = dict(client.submit(pack_report(folder), replicates))
    if res.get("id"):
        submitted.record(client.creds.url, str(res["id"]))
    return res


def stored_line(res: dict[str, Any]) -> str:
    """What a stored report holds, by the tiers the registry gave its rows (lair.vocabulary): never
    "verified" for a row the registry did not verify."""
    from lair.vocabulary import rows_phrase

    speed = rows_phrase([str(r.get("provenance")) for r in res.get("rows") or []], "speed row")
    quality = [str(q.get("provenance")) for q in res.get("quality") or []]
    extra = f"; {rows_phrase(quality, 'quality row')}" if quality else ""
    return f"stored: report {res['id']} for {res['slug']} revision {res['revision']} ({speed}{extra})"


def _say_stored(res: dict[str, Any]) -> None:
    err(stored_line(res))
    err(f"  {_client().creds.url}/recipes/{res['slug']}")


def cmd_submit(args: argparse.Namespace) -> int:
    res = submit_report(args.report)
    if args.json:
        dump_json(res)
    else:
        print(res["id"])
        _say_stored(res)
    return 0


__all__ += ["say_stored"]
say_stored = _say_stored
