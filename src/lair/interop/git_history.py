"""A git repository of recipes, read as its history: every commit that adds or changes a recipe file,
oldest first, with the file at that commit as lair TOML (``lair registry import-git`` loads them into
a registry with :mod:`lair.registry.service.git_import`).

- ``*.toml``: a lair recipe (checked by lair's recipe core); its slug is ``[meta] slug``, else the
  file's folder (for ``NAME/recipe.toml``) or stem;
- ``*.yaml`` / ``*.yml`` with ``recipe_version``: a sparkrun recipe, converted by
  :func:`lair.interop.sparkrun_yaml.from_sparkrun` (what has no lair meaning is listed in the
  recipe's comment block, as ``lair import sparkrun`` does);
- anything else, and a file that does not check, is kept with the reason it is skipped.

Merges are skipped (their changes are in the commits merged); a deleted file is no change.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath

import yaml

from lair.errors import ConfigError, LairError, RecipeError
from lair.interop.sparkrun_yaml import from_sparkrun
from lair.recipe import load_text

__all__ = ["MAX_FILE_BYTES", "GitRecipe", "recipe_history"]

MAX_FILE_BYTES = 1 << 20
"""A recipe file larger than this at some commit is skipped (a recipe is a few KiB)."""
_SUFFIXES = (".toml", ".yaml", ".yml")
_SEP, _END = "\x1f", "\x1e"


@dataclass(frozen=True)
class GitRecipe:
    """One recipe file as one commit left it: ``text`` (lair TOML) and ``slug``, or ``why`` it is
    skipped (then both are empty)."""

    commit: str
    author: str
    committed_at: datetime
    path: str
    subject: str
    text: str = ""
    slug: str = ""
    why: str = ""


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:80]


def _git(repo: Path, *args: str) -> bytes:
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True, timeout=300)
    except FileNotFoundError as exc:
        raise ConfigError("git is not installed", hint="install git, then import again") from exc
    except subprocess.CalledProcessError as exc:
        why = exc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["failed"]
        raise ConfigError(f"{repo}: git {args[0]}: {why[0]}", hint="give a git repository's folder") from exc
    return out.stdout


def _changes(repo: Path) -> list[tuple[str, str, datetime, str, str]]:
    """(commit, author, date, path, subject) per recipe-looking file a commit added or changed."""
    fmt = f"{_END}%H{_SEP}%an{_SEP}%aI{_SEP}%s"
    raw = _git(repo, "log", "--reverse", "--no-merges", "--no-renames", f"--format={fmt}", "--name-status")
    out = []
    for block in raw.decode(errors="replace").split(_END)[1:]:
        head, _, files = block.partition("\n")
        commit, author, date, subject = head.split(_SEP, 3)
        for line in files.splitlines():
            status, _, path = line.partition("\t")
            if status[:1] in ("A", "M") and path.endswith(_SUFFIXES):
                out.append((commit, author, datetime.fromisoformat(date), path, subject))
    return out


def _recipe_text(repo: Path, commit: str, path: str) -> tuple[str, str]:
    """(lair TOML text, slug) of the file at the commit, or a ConfigError saying why it is skipped."""
    size = int(_git(repo, "cat-file", "-s", f"{commit}:{path}").strip() or 0)
    if size > MAX_FILE_BYTES:
        raise ConfigError(f"{size} bytes is over the budget of {MAX_FILE_BYTES}")
    blob = _git(repo, "show", f"{commit}:{path}")
    where = PurePosixPath(path)
    if where.suffix == ".toml":
        text = blob.decode()
    else:
        data = yaml.safe_load(blob)
        if not isinstance(data, dict) or "recipe_version" not in data:
            raise ConfigError("a YAML file that is not a sparkrun recipe (no recipe_version)")
        text = from_sparkrun(data, f"{path}@{commit[:12]}", hashlib.sha256(blob).hexdigest()).toml()
    recipe = load_text(text, where.name)
    stem = where.parent.name if where.stem == "recipe" and where.parent.name else where.stem
    return text, recipe.meta.slug or _slug(stem)


def _why(exc: Exception) -> str:
    """The reason a file is skipped, on one line: each problem with its location (file:line:col)."""
    if isinstance(exc, RecipeError):
        return "; ".join(i.render().splitlines()[0] for i in exc.issues)[:500] or str(exc)
    return " ".join(str(exc).split())[:500]


def recipe_history(repo: Path) -> list[GitRecipe]:
    """Every recipe-looking file each commit of ``repo`` added or changed, oldest commit first."""
    out = []
    for commit, author, when, path, subject in _changes(repo):
        try:
            text, slug = _recipe_text(repo, commit, path)
        except (LairError, UnicodeDecodeError, yaml.YAMLError) as exc:
            out.append(GitRecipe(commit, author, when, path, subject, why=_why(exc)))
            continue
        out.append(GitRecipe(commit, author, when, path, subject, text, slug))
    return out
