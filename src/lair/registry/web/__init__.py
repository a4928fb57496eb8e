"""The web layer: thin Starlette routes and Jinja2 templates over :mod:`lair.registry.service`, in
front of them a cache of rendered responses keyed by the data's version (see :mod:`.cache`)."""

from lair.registry.web.app import create_app

__all__ = ["create_app"]
