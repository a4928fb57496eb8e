"""Mount staging: bind mounts that give the container regular files, never symlinks.

Two sources of per-file mounts, both as *manifests* (``host<TAB>container`` lines, one read-only
bind mount per line, inserted into ``docker run`` by launch after reading the file on the node):

* ``extra_mounts_manifest = "PATH"``: a file a ``before_serve`` hook generated on the node;
* a Hugging Face hub repo mounted directly: an ``extra_mounts`` entry whose host path ends in
  ``models--ORG--NAME`` (optionally ``@REF``, default ``main``). lair resolves it on the node:
  ``refs/REF`` -> ``snapshots/REV`` -> every file under it, following the relative symlinks into
  ``blobs/`` to the real file, and mounts each real file at ``CONTAINER/<path in the snapshot>``.
  A recipe needs no inline script for the hub layout.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lair.errors import LaunchError

if TYPE_CHECKING:
    from lair.recipe import Mount

__all__ = [
    "HubMount",
    "hub_mount",
    "manifest_volume_args",
    "parse_manifest",
    "staging_script",
    "volume_arg",
]

_HUB_RE = re.compile(r"^(?P<repo>.*/models--[^/@]+)(?:@(?P<ref>[^/]+))?/?$")


@dataclass(frozen=True)
class HubMount:
    """A hub repo folder (``.../models--org--name``), the ref to resolve, the container folder."""

    repo_dir: str
    ref: str
    container: str


def hub_mount(m: Mount) -> HubMount | None:
    """The hub mount ``m`` stands for, or None if its host path is not a hub repo folder."""
    match = _HUB_RE.match(m.host)
    if not match:
        return None
    return HubMount(match["repo"], match["ref"] or "main", m.container.rstrip("/") or "/")


def volume_arg(host: str, container: str, read_only: bool) -> str:
    return f"{host}:{container}{':ro' if read_only else ''}"


_STAGE_FN = r"""stage() {
  rev=$(cat "$1/refs/$2" 2>/dev/null || printf %s "$2")
  snap="$1/snapshots/$rev"
  [ -d "$snap" ] || { echo "no snapshot $snap (ref $2)" >&2; exit 1; }
  find -L "$snap" -type f | LC_ALL=C sort | while IFS= read -r p; do
    printf '%s\t%s\n' "$(readlink -f "$p")" "$3/${p#"$snap"/}"
  done
}"""


def staging_script(mounts: Sequence[HubMount], manifest: str) -> str:
    """POSIX sh that writes the per-file manifest for ``mounts`` to ``manifest`` on the node."""
    calls = [
        f"stage {shlex.quote(m.repo_dir)} {shlex.quote(m.ref)} {shlex.quote(m.container)}" for m in mounts
    ]
    tmp = shlex.quote(manifest + ".tmp")
    body = "\n".join(f"{c} >> {tmp}" for c in calls)
    return f"set -eu\n{_STAGE_FN}\n: > {tmp}\n{body}\nmv {tmp} {shlex.quote(manifest)}\n"


def parse_manifest(text: str, *, where: str = "manifest") -> list[tuple[str, str]]:
    """``host<TAB>container`` pairs; blank lines and ``#`` comments are skipped."""
    out: list[tuple[str, str]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        host, sep, container = line.partition("\t")
        if not sep or not host.startswith("/") or not container.startswith("/"):
            raise LaunchError(
                f"{where}:{n}: expected 'HOST<TAB>CONTAINER' with absolute paths, got {line!r}",
                hint="the hook that writes the manifest must emit one tab-separated pair per line",
            )
        out.append((host, container))
    return out


def manifest_volume_args(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """``-v host:container:ro`` for each pair (manifest mounts are always read-only)."""
    args: list[str] = []
    for host, container in pairs:
        args += ["-v", volume_arg(host, container, True)]
    return args
