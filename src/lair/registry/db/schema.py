"""Tables of the registry, as SQLAlchemy 2 declarative models.

The ORM classes define the schema (and are what the migrations were written from); the hot read
paths use their ``__table__`` through SQLAlchemy Core, never ORM sessions. Revisions are immutable:
a recipe's content is always its latest revision's canonical TOML. ``registry_version`` holds one
counter that every write bumps in the same transaction, and two narrower ones (lists and votes) that
the cache of lists and searches keys on, in every process. A recipe's JSON document and anonymous page
are rendered by the write that changes them and stored in ``recipe_documents`` (migration 0009).

Facet columns (GPU model, count, VRAM, engine, model id, max context, license, tags) copy values out
of the latest revision so filters are plain indexed comparisons.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "ApiToken",
    "Base",
    "Blob",
    "CellCertificate",
    "ChartSvg",
    "ExternalIdentity",
    "LoadMeasurement",
    "Measurement",
    "QualityMeasurement",
    "Recipe",
    "RecipeDocument",
    "RecipeTag",
    "RegistryVersion",
    "ReplicationAttempt",
    "Report",
    "Revision",
    "Session",
    "User",
    "Vote",
]


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    display_name: Mapped[str] = mapped_column(String(200), default="")
    link: Mapped[str | None] = mapped_column(String(500))
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    hidden: Mapped[bool] = mapped_column(Boolean, default=False)
    password_hash: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Recipe(Base):
    __tablename__ = "recipes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    slug: Mapped[str] = mapped_column(String(200), unique=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    upstream_id: Mapped[int | None] = mapped_column(ForeignKey("recipes.id"))
    upstream_revision: Mapped[int | None] = mapped_column(Integer)
    title: Mapped[str] = mapped_column(String(500))
    summary: Mapped[str] = mapped_column(Text, default="")
    latest_revision: Mapped[int] = mapped_column(Integer, default=1)
    votes: Mapped[int] = mapped_column(Integer, default=0)
    hidden: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # facets, from the latest revision
    engine: Mapped[str] = mapped_column(String(64))
    gpu_model: Mapped[str | None] = mapped_column(String(100))
    gpu_key: Mapped[str | None] = mapped_column(String(100))
    gpu_count: Mapped[int | None] = mapped_column(Integer)
    vram_gb: Mapped[float | None] = mapped_column(Float)
    model_id: Mapped[str | None] = mapped_column(String(300))
    model_key: Mapped[str | None] = mapped_column(String(300))
    max_context: Mapped[int | None] = mapped_column(BigInteger)
    license: Mapped[str | None] = mapped_column(String(100))
    best_decode_tok_s: Mapped[float | None] = mapped_column(Float)
    # the best decode speed of the non-retracted verified/replicated rows (migration 0005; its index,
    # ix_recipes_verified_decode, is on the expression search.py sorts by, so it lives in the migration)
    best_verified_decode_tok_s: Mapped[float | None] = mapped_column(Float)
    verified_rows: Mapped[int] = mapped_column(Integer, default=0)
    search_text: Mapped[str] = mapped_column(Text, default="")

    __table_args__ = (
        Index("ix_recipes_votes", "votes", "id"),
        Index("ix_recipes_updated", "updated_at", "id"),
        Index("ix_recipes_engine", "engine", "votes"),
        Index("ix_recipes_gpu", "gpu_key", "gpu_count", "votes"),
        Index("ix_recipes_model", "model_key", "votes"),
        Index("ix_recipes_context", "max_context"),
        Index("ix_recipes_vram", "vram_gb"),
        Index("ix_recipes_verified", "verified_rows"),
        Index("ix_recipes_owner", "owner_id"),
    )


class RecipeTag(Base):
    __tablename__ = "recipe_tags"

    recipe_id: Mapped[int] = mapped_column(ForeignKey("recipes.id", ondelete="CASCADE"), primary_key=True)
    tag: Mapped[str] = mapped_column(String(100), primary_key=True)

    __table_args__ = (Index("ix_recipe_tags_tag", "tag", "recipe_id"),)


class Revision(Base):
    __tablename__ = "revisions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    recipe_id: Mapped[int] = mapped_column(ForeignKey("recipes.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    toml: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    notes: Mapped[str] = mapped_column(Text, default="")
    author_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        UniqueConstraint("recipe_id", "number", name="uq_revisions_recipe_number"),
        Index("ix_revisions_sha256", "sha256"),
    )


class Measurement(Base):
    """One speed row, tied to the revision it was measured with; ``provenance`` is reported (typed by
    the author), verified (an accepted report upload) or replicated. Retracted rows stay, struck."""

    __tablename__ = "measurements"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    recipe_id: Mapped[int] = mapped_column(ForeignKey("recipes.id", ondelete="CASCADE"))
    revision_id: Mapped[int] = mapped_column(ForeignKey("revisions.id", ondelete="CASCADE"))
    context: Mapped[int] = mapped_column(BigInteger)
    concurrency: Mapped[int] = mapped_column(Integer, default=1)
    prefill_tok_s: Mapped[float | None] = mapped_column(Float)
    decode_tok_s: Mapped[float | None] = mapped_column(Float)
    decode_tok_s_per_stream: Mapped[float | None] = mapped_column(Float)
    ttft_ms: Mapped[float | None] = mapped_column(Float)
    provenance: Mapped[str] = mapped_column(String(20), default="reported")
    note: Mapped[str] = mapped_column(Text, default="")
    submitted_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    rig_fingerprint: Mapped[str | None] = mapped_column(String(64))
    report_id: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    retracted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    retracted_reason: Mapped[str | None] = mapped_column(Text)
    retracted_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"))

    __table_args__ = (
        Index("ix_measurements_recipe_decode", "recipe_id", "context", "decode_tok_s"),
        Index("ix_measurements_context_decode", "context", "decode_tok_s"),
        Index("ix_measurements_report", "report_id"),
    )


class LoadMeasurement(Base):
    """One open-loop cell or sweep headline of an accepted report (migration 0017): ``kind`` ``rate``
    (a cell at ``offered_rate`` per second, ``figures`` as :func:`lair.bench.load.load_figures`
    recomputed them) or ``sweep`` (``figures`` as :func:`lair.bench.load.sweep_summary` gave them).
    ``provenance`` is verified or reported-by-report (invalid answers, a client-bound cell) with the
    reason in ``note``. Kept apart from ``measurements``: a load cell is never ranked with a speed row."""

    __tablename__ = "load_measurements"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    recipe_id: Mapped[int] = mapped_column(ForeignKey("recipes.id", ondelete="CASCADE"))
    revision_id: Mapped[int] = mapped_column(ForeignKey("revisions.id", ondelete="CASCADE"))
    report_id: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(10))
    context: Mapped[int] = mapped_column(BigInteger)
    step: Mapped[int | None] = mapped_column(Integer)
    offered_rate: Mapped[float | None] = mapped_column(Float)
    cache: Mapped[str] = mapped_column(String(10), default="cold")
    figures: Mapped[str] = mapped_column(Text)
    flags: Mapped[str] = mapped_column(Text, default="[]")
    provenance: Mapped[str] = mapped_column(String(20))
    note: Mapped[str] = mapped_column(Text, default="")
    submitted_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    rig_fingerprint: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        Index("ix_load_recipe", "recipe_id", "report_id"),
        Index("ix_load_report", "report_id"),
    )


class Vote(Base):
    __tablename__ = "votes"

    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    recipe_id: Mapped[int] = mapped_column(ForeignKey("recipes.id", ondelete="CASCADE"), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (Index("ix_votes_recipe", "recipe_id"),)


class RegistryVersion(Base):
    """One row: a counter bumped by every write, and when; ``lists`` is bumped by every write that
        changes what a list or search shows besides vote counts (publish, revision, report, retraction,
        hiding), ``votes`` by every vote (migration 0009). ``documents`` is bumped with ``n`` by every
        write of a release that keeps the stored documents; the stored documents are current while it
        equals ``n`` (migration 0012, :mod:`lair.registry.service.stored`), and ``renderer`` names the
    templates and view code they were rendered with (migration 0015)."""

    __tablename__ = "registry_version"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    n: Mapped[int] = mapped_column(BigInteger, default=0)
    changed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    lists: Mapped[int] = mapped_column(BigInteger, default=0)
    votes: Mapped[int] = mapped_column(BigInteger, default=0)
    documents: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    renderer: Mapped[str | None] = mapped_column(String(64), nullable=True)


class RecipeDocument(Base):
    """A rendered response of a visible recipe (migration 0009), written by the transaction of every
    write that changes it: ``kind`` is ``json`` (the API document) or ``page`` (the anonymous HTML
    page); ``revision`` is 0 for the recipe's own URL, else the (latest) revision its URL names. Links in
    ``body`` start with a marker the read replaces with the request's base URL; ``etag`` is a hash
    of ``body``, ``modified`` the Last-Modified date."""

    __tablename__ = "recipe_documents"

    slug: Mapped[str] = mapped_column(String(200), primary_key=True)
    kind: Mapped[str] = mapped_column(String(8), primary_key=True)
    revision: Mapped[int] = mapped_column(Integer, primary_key=True)
    recipe_id: Mapped[int] = mapped_column(ForeignKey("recipes.id", ondelete="CASCADE"))
    body: Mapped[bytes] = mapped_column(LargeBinary)
    etag: Mapped[str] = mapped_column(String(40))
    modified: Mapped[str] = mapped_column(String(40))

    __table_args__ = (Index("ix_recipe_documents_recipe", "recipe_id"),)


class ChartSvg(Base):
    """A drawn speed chart, keyed by the sha256 of what it shows (migration 0009): a write that does
    not change a recipe's rows (a vote) re-renders its page without drawing again, in any process."""

    __tablename__ = "chart_svgs"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    svg: Mapped[str] = mapped_column(Text)


class ChartPending(Base):
    """A recipe whose stored page shows a chart placeholder (migration 0014): the write left the drawing
    to the drawer of its process (:mod:`lair.registry.service.drawer`), which removes the row once it
    rendered the page again; a process that starts draws what one that stopped left here."""

    __tablename__ = "chart_pending"

    recipe_id: Mapped[int] = mapped_column(ForeignKey("recipes.id", ondelete="CASCADE"), primary_key=True)


class Session(Base):
    """A signed-in browser: the cookie holds a random id, the table its sha256 (a leak of the table is
    no session); the CSRF secret goes into every form of the session's pages."""

    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    csrf: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (Index("ix_sessions_user", "user_id"),)


class ApiToken(Base):
    """A CLI token: shown once, stored as its sha256, scoped (``read``, ``publish``), revocable."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100), default="")
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[str] = mapped_column(String(100), default="read")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (Index("ix_api_tokens_user", "user_id"),)


class Report(Base):
    """An accepted run report (migration 0003). ``digest`` is the sha256 of its results and raw
    timings, so the same report uploaded twice is one report; ``files`` lists the raw files kept in the
    blob store under ``reports/<id>/``; ``rig_fingerprint`` is the hash of the rig's hardware."""

    __tablename__ = "reports"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    recipe_id: Mapped[int] = mapped_column(ForeignKey("recipes.id", ondelete="CASCADE"))
    revision_id: Mapped[int] = mapped_column(ForeignKey("revisions.id", ondelete="CASCADE"))
    submitted_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    rig_fingerprint: Mapped[str] = mapped_column(String(64))
    fingerprint: Mapped[str] = mapped_column(Text)
    files: Mapped[str] = mapped_column(Text)
    run_name: Mapped[str] = mapped_column(String(500), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    filer_age_days: Mapped[float | None] = mapped_column(Float)
    """Migration 0016: the filing account's age in days, when it filed (lair.registry.service.standing)."""
    filer_history: Mapped[int | None] = mapped_column(Integer)
    """...how many reports and recipe revisions it had filed before."""
    filer_new: Mapped[bool | None] = mapped_column(Boolean)
    """...and whether that made it a new account (None: filed before the registry kept standings)."""

    __table_args__ = (Index("ix_reports_recipe", "recipe_id", "created_at"),)


class QualityMeasurement(Base):
    """One quality row (migration 0004), tied to the revision it was measured with; ``provenance`` is
    reported (typed by the author in ``meta.quality``), verified (an accepted report whose per-sample
    records the registry re-scored) or reported-by-report (an accepted report whose samples the
    registry cannot re-score, e.g. HumanEval's programs). Scores are in ``unit`` (``%`` for measured
    rows: ``score``, ``stderr`` and the spread over repeats in percent). Retracted rows stay, struck."""

    __tablename__ = "quality_measurements"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    recipe_id: Mapped[int] = mapped_column(ForeignKey("recipes.id", ondelete="CASCADE"))
    revision_id: Mapped[int] = mapped_column(ForeignKey("revisions.id", ondelete="CASCADE"))
    suite: Mapped[str] = mapped_column(String(200))
    metric: Mapped[str] = mapped_column(String(200), default="")
    score: Mapped[float] = mapped_column(Float)
    unit: Mapped[str] = mapped_column(String(20), default="%")
    n: Mapped[int | None] = mapped_column(Integer)
    stderr: Mapped[float | None] = mapped_column(Float)
    repeats: Mapped[int | None] = mapped_column(Integer)
    spread_min: Mapped[float | None] = mapped_column(Float)
    spread_max: Mapped[float | None] = mapped_column(Float)
    flips: Mapped[int | None] = mapped_column(Integer)
    provenance: Mapped[str] = mapped_column(String(20), default="reported")
    note: Mapped[str] = mapped_column(Text, default="")
    submitted_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    rig_fingerprint: Mapped[str | None] = mapped_column(String(64))
    report_id: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    retracted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    retracted_reason: Mapped[str | None] = mapped_column(Text)
    retracted_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"))

    __table_args__ = (
        Index("ix_quality_recipe", "recipe_id", "suite"),
        Index("ix_quality_report", "report_id"),
    )


class ExternalIdentity(Base):
    """A sign-in account at an OAuth provider (migration 0006): ``provider`` (``github``,
    ``huggingface``) and its stable ``subject`` (GitHub's numeric id, the OIDC ``sub``) name one user;
    ``login`` is the provider's user name at the last sign-in. No provider token is kept."""

    __tablename__ = "external_identities"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    provider: Mapped[str] = mapped_column(String(32))
    subject: Mapped[str] = mapped_column(String(255))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    login: Mapped[str] = mapped_column(String(255), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_sign_in_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        UniqueConstraint("provider", "subject", name="uq_external_identities_provider_subject"),
        Index("ix_external_identities_user", "user_id"),
    )


class Blob(Base):
    """A raw file of a stored report when the blob store is the database (``--blobs db``, migration
    0007): the key is its path under the store (``reports/<id>/<name>``)."""

    __tablename__ = "blobs"

    key: Mapped[str] = mapped_column(String(500), primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    size: Mapped[int] = mapped_column(BigInteger)


class ReplicationAttempt(Base):
    """A report uploaded as a replication of a published speed row (migration 0010): ``target_id``
    the row replicated, ``report_id`` the attempt's report, ``attempt_id`` its row of the same cell;
    ``outcome`` is ``replicated`` or ``not-reproduced`` by :mod:`lair.replication`'s rule, applied by
    the registry to its own recomputations; ``comparison`` holds each figure (theirs, yours, delta %,
    band) as JSON."""

    __tablename__ = "replication_attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    target_id: Mapped[int] = mapped_column(ForeignKey("measurements.id", ondelete="CASCADE"))
    report_id: Mapped[str] = mapped_column(String(32), ForeignKey("reports.id", ondelete="CASCADE"))
    attempt_id: Mapped[int | None] = mapped_column(ForeignKey("measurements.id", ondelete="CASCADE"))
    outcome: Mapped[str] = mapped_column(String(20))
    delta_pct: Mapped[float | None] = mapped_column(Float)
    comparison: Mapped[str] = mapped_column(Text)
    rig_fingerprint: Mapped[str] = mapped_column(String(64))
    submitted_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        Index("ix_replication_target", "target_id", "created_at"),
        Index("ix_replication_report", "report_id"),
    )


class CellCertificate(Base):
    """The certificate behind a speed row from a report (migration 0011): ``certificate`` holds what
    the recipe page shows of the cell's and the run's certificate as JSON
    (:func:`lair.registry.service.certificates.summary`); the energy figures are columns."""

    __tablename__ = "cell_certificates"

    measurement_id: Mapped[int] = mapped_column(
        ForeignKey("measurements.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    certificate: Mapped[str] = mapped_column(Text)
    j_per_output_token: Mapped[float | None] = mapped_column(Float)
    j_per_prompt_token: Mapped[float | None] = mapped_column(Float)
    avg_w: Mapped[float | None] = mapped_column(Float)
    peak_w: Mapped[float | None] = mapped_column(Float)
    energy_source: Mapped[str | None] = mapped_column(String(32))


class GitSource(Base):
    """Where a revision came from when ``lair registry import-git`` loaded it (migration 0018): the
    repository as given, the file's path in it and the commit that wrote that content. One row per
    (repository, path, commit): importing the same history again adds nothing."""

    __tablename__ = "git_sources"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    recipe_id: Mapped[int] = mapped_column(ForeignKey("recipes.id", ondelete="CASCADE"))
    revision_id: Mapped[int] = mapped_column(ForeignKey("revisions.id", ondelete="CASCADE"))
    repo: Mapped[str] = mapped_column(String(500))
    path: Mapped[str] = mapped_column(String(1000))
    commit: Mapped[str] = mapped_column(String(64))
    committed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        UniqueConstraint("repo", "path", "commit", name="uq_git_source"),
        Index("ix_git_source_revision", "revision_id"),
    )
