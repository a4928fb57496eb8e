"""Container image references: ``[registry/]path[:tag][@sha256:<64 hex>]``, as Docker reads them.

    repository("vllm/vllm-openai:v0.11.0")               -> "docker.io/vllm/vllm-openai"
    repository("docker.io/library/nginx@sha256:...")     -> "docker.io/library/nginx"
    same_repository("nginx:1", "nginx@sha256:...")       -> True
    pinned_reference("vllm/vllm-openai:v0.11.0", "other/x@sha256:...")  -> None (another repository)

The rules are Docker's reference grammar (distribution/reference): the first path component is a
registry only when it has a ``.`` or ``:`` or is ``localhost``; without one the registry is
``docker.io``, and a one-component path there is under ``library/``.
"""

from __future__ import annotations

import re

__all__ = ["DIGEST", "digest_of", "pinned_reference", "repository", "same_repository"]

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
"""An image content digest (the only algorithm registries serve for manifests)."""

_DEFAULT_REGISTRY = "docker.io"


def _split(ref: str) -> tuple[str, str | None, str | None]:
    """(name, tag, digest) of a reference."""
    name, _, digest = ref.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = None
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
    return name, tag, digest or None


def repository(ref: str) -> str:
    """The fully qualified repository of an image reference (registry and path, no tag or digest)."""
    name = _split(ref.strip())[0].lower()
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = _DEFAULT_REGISTRY, name
    if registry in ("docker.io", "index.docker.io", "registry-1.docker.io"):
        registry = _DEFAULT_REGISTRY
        path = path if "/" in path else f"library/{path}"
    return f"{registry}/{path}"


def same_repository(a: str, b: str) -> bool:
    """Whether two references name the same repository (tags and digests aside)."""
    return repository(a) == repository(b)


def digest_of(ref: str) -> str | None:
    """The ``sha256:...`` digest a reference pins, or None (also for a malformed digest)."""
    digest = _split(ref.strip())[2]
    return digest if digest and DIGEST.fullmatch(digest) else None


def pinned_reference(image: str, candidate: str) -> str | None:
    """``image``'s repository pinned by ``candidate``'s digest (``REPO@sha256:...``, the recipe's own
    spelling of the repository), or None when ``candidate`` is of another repository or pins no
    well-formed digest: a digest from elsewhere never picks which repository is pulled."""
    digest = digest_of(candidate)
    if digest is None or not same_repository(image, candidate):
        return None
    return f"{_split(image.strip())[0]}@{digest}"
