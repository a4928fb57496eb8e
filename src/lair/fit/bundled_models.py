"""Model facts bundled with lair: the config.json fields of the open-weight models people run.

The table lives in ``models.toml`` beside this module (package data; its header says what each field
is). :func:`find_bundled` looks a name up: a repo id, another repo id with the same config, the
lower-case name or an Ollama-style tag (``qwen3:30b-a3b``), matched ignoring case and everything but
letters and digits. :func:`bundled_facts` gives the facts (counted from the config by
:func:`~lair.fit.model_facts.facts_from_config`) and their :class:`~lair.fit.fact_source.FactSource`,
without touching the network. ``lair fit ORG/NAME`` uses them when there is no local copy of the model;
the registry rates and verifies reports with them.
"""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import replace
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lair.fit.fact_source import FactSource, fact_source
from lair.fit.model_facts import ModelFacts, facts_from_config

__all__ = ["BundledModel", "bundled_facts", "bundled_models", "find_bundled", "model_kind", "name_key"]

_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def name_key(name: str) -> str:
    """The comparison key of a model name: lower case, letters and digits only."""
    return _NON_ALNUM.sub("", name.lower())


class BundledModel(BaseModel):
    """One entry of ``models.toml``."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    repo: str = Field(description="Hugging Face repo id")
    aliases: list[str] = Field(default_factory=list, description="other names it goes by")
    source: str = Field(description="the repo's config.json (URL)")
    revision: str = Field(default="", description='the Hub commit read, or "main" (then `checked`)')
    checked: str = Field(default="", description="the date a `main` revision was checked (YYYY-MM-DD)")
    checked_against: str = Field(default="", description="the public copy the values were checked against")
    published_params_b: float | None = Field(default=None, description="publisher's total, billions")
    published_active_b: float | None = Field(default=None, description="publisher's active (MoE), billions")
    published_active_basis: Literal["all", "without input embedding", "without embeddings"] = Field(
        default="all", description="what the published active count counts (embeddings or not)"
    )
    published_source: str = Field(default="", description="where the published counts are stated")
    test_only: bool = Field(default=False, description="a test fixture's model: not listed")
    config: dict[str, Any] = Field(description="the config.json fields lair.fit reads")

    @property
    def where(self) -> str:
        """``config.json of ORG/NAME at REVISION`` (and the date a ``main`` revision was checked)."""
        checked = f", checked {self.checked}" if self.checked else ""
        return f"config.json of {self.repo} at {self.revision or 'its source'}{checked}"

    def facts(self) -> ModelFacts:
        return replace(facts_from_config(self.config, self.repo), source=f"bundled: {self.where}")

    def listing(self) -> dict[str, Any]:
        """The entry as ``lair fit --list-models --json`` prints it."""
        f = self.facts()
        return {
            "repo": self.repo,
            "aliases": list(self.aliases),
            "architecture": f.architecture,
            "kind": model_kind(f),
            "total_params": f.total_params,
            "active_params": f.active_params,
            "weight_format": f.weight_format,
            "weight_bytes": f.weight_bytes,
            "max_context": f.max_context,
            "source": self.source,
            "revision": self.revision,
            "checked": self.checked,
            "checked_against": self.checked_against,
            "published_params_b": self.published_params_b,
            "published_active_b": self.published_active_b,
            "published_source": self.published_source,
        }


def model_kind(f: ModelFacts) -> Literal["dense", "MoE", "MLA", "MLA MoE"]:
    """The architecture class: dense or MoE, with MLA (latent attention) when it has it."""
    if f.attention == "mla":
        return "MLA MoE" if f.is_moe else "MLA"
    return "MoE" if f.is_moe else "dense"


@functools.cache
def bundled_models() -> tuple[BundledModel, ...]:
    """Every entry of the bundled table, test fixtures included (``test_only``)."""
    text = resources.files("lair.fit").joinpath("models.toml").read_text(encoding="utf-8")
    raw = tomllib.loads(text)["models"]
    return tuple(BundledModel(repo=repo, **entry) for repo, entry in raw.items())


@functools.cache
def _by_key() -> dict[str, BundledModel]:
    out: dict[str, BundledModel] = {}
    for m in bundled_models():
        for name in (m.repo, *m.aliases):
            out.setdefault(name_key(name) or name, m)
    return out


def find_bundled(name: str) -> BundledModel | None:
    """The entry called ``name`` (its repo id or an alias), else None."""
    return _by_key().get(name_key(name) or name) if name else None


def bundled_facts(name: str) -> tuple[ModelFacts, FactSource] | None:
    """The bundled facts of ``name`` and where they came from, else None. No network, no disk but
    the package's own table."""
    m = find_bundled(name)
    if m is None:
        return None
    facts = m.facts()
    return facts, fact_source("bundled with lair", m.where, facts)
