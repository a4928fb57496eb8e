"""``lair login|search|pull|push|submit``: the registry's client (lair.client) on the command line.

Exit codes: 0 done; 1 other errors; 3 refused by the registry (invalid, too large); 4 duplicate;
5 not allowed (sign-in or permission); 6 registry unreachable.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from lair.cli._common import dump_json, err

__all__ = ["register", "submit_report"]


def register(sub: Any) -> None:
    p = sub.add_parser("login", help="store the registry URL and an API token (0600, in the config dir)")
    p.add_argument("url", nargs="?", metavar="URL", help="registry URL (default: the stored one)")
    p.add_argument("--token", metavar="T", help="API token (else pasted at a prompt; LAIR_TOKEN overrides)")
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
    h = sub.add_parser("push", help="publish a recipe, or a new revision of it (shows the diff first)")
    h.add_argument("file", metavar="FILE")
    h.add_argument("--notes", default="", help="revision notes")
    h.add_argument("-y", "--yes", action="store_true", help="do not ask")
    h.add_argument("--json", action="store_true", help="print one JSON document")
    h.set_defaults(handler=cmd_push)
    m = sub.add_parser("submit", help="upload a run report folder; the registry verifies it")
    m.add_argument("report", metavar="REPORT_DIR")
    m.add_argument("--json", action="store_true", help="print one JSON document")
    m.set_defaults(handler=cmd_submit)


def _client() -> Any:
    from lair.client import Client

    return Client()


def cmd_login(args: argparse.Namespace) -> int:
    from lair.client import Client, Credentials

    creds = Credentials.load()
    creds.url = (args.url or creds.url).rstrip("/")
    token = args.token
    if token is None and sys.stdin.isatty():
        import getpass

        token = getpass.getpass(
            f"API token for {creds.url} (create one at {creds.url}/account; empty for none): "
        )
    creds.token = (token or "").strip() or None
    Client(creds).health()  # the registry answers before anything is stored
    path = creds.save()
    if args.json:
        dump_json({"ok": True, "url": creds.url, "token": bool(creds.token), "file": str(path)})
    else:
        err(f"logged in to {creds.url}{' with a token' if creds.token else ' (no token)'}; saved in {path}")
    return 0


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
        from lair.errors import RegistryError

        raise RegistryError(
            422, "invalid", f"bad revision in {ref!r}", hint="SLUG or SLUG@N, e.g. tiny-cpu@1"
        )
    return slug, int(rev) if at else None


def cmd_pull(args: argparse.Namespace) -> int:
    from lair.errors import LairError, RegistryError
    from lair.launch.trust_store import stamp_pulled
    from lair.recipe import load_recipe
    from lair.recipe.digest import model_sha256

    slug, rev = _split_ref(args.ref)
    client = _client()
    doc = client.recipe(slug, rev)
    out = Path(args.output or f"{slug}.toml")
    out.write_text(client.recipe_toml(slug, rev), encoding="utf-8")
    try:
        sha = model_sha256(load_recipe(out))
        if sha != doc["sha256"]:
            raise RegistryError(422, "mismatch", f"{out}: sha256 {sha} is not the revision's {doc['sha256']}")
    except LairError:
        out.unlink()  # not the revision: nothing of it stays, to be planned as the user's own
        raise
    revision = int(doc["revision"])
    stamp_pulled(out, registry=client.creds.url, slug=slug, revision=revision, sha256=sha)
    if args.json:
        dump_json({"ok": True, "slug": slug, "revision": doc["revision"], "sha256": sha, "file": str(out)})
    else:
        print(out)
        err(f"pulled {slug} revision {doc['revision']} (sha256 {sha[:12]})")
        err("marked untrusted: `lair launch` shows what it asks for and waits for your acceptance")
    return 0


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        return False
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def cmd_push(args: argparse.Namespace) -> int:
    import difflib

    from lair.errors import RegistryError
    from lair.recipe import export_text, load_recipe

    recipe = load_recipe(args.file)
    slug, client = recipe.meta.slug, _client()
    try:
        old = client.recipe_toml(slug) if slug else None
    except RegistryError as exc:
        if exc.status != 404:
            raise
        old = None
    new = export_text(recipe, "toml")
    diff = difflib.unified_diff((old or "").splitlines(True), new.splitlines(True), "latest", args.file)
    sys.stderr.writelines(diff)
    if old == new:
        err("no change against the latest revision")
        return 0
    what = f"a new revision of {slug}" if old is not None else "a new recipe"
    if not args.yes and not _confirm(f"publish {what}?"):
        err("not published")
        return 1
    res = client.push(
        Path(args.file).read_text(encoding="utf-8"), args.notes, slug if old is not None else None
    )
    dump_json(res) if args.json else err(f"published {res.get('slug', slug)} revision {res.get('revision')}")
    return 0


def submit_report(folder: str | Path) -> dict[str, Any]:
    """Pack and upload one report folder; the server's answer (raises RegistryError when refused)."""
    from lair.client import pack_report

    return dict(_client().submit(pack_report(folder)))


def _say_stored(res: dict[str, Any]) -> None:
    url = _client().creds.url
    rows = len(res["rows"])
    err(f"stored: report {res['id']} for {res['slug']} revision {res['revision']} ({rows} verified rows)")
    err(f"  {url}/recipes/{res['slug']}")


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
