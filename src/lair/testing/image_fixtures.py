"""The local image builder, for tests and fixtures: it lives in :mod:`lair.runners.image_build` (the
evaluation sandbox builds its image with it too); this module keeps the old import path."""

from lair.runners.image_build import (
    ENGINE_PACKAGES,
    PY_DIR,
    build_python_image,
    image_exists,
    load_into_podman,
)

__all__ = ["ENGINE_PACKAGES", "PY_DIR", "build_python_image", "image_exists", "load_into_podman"]
