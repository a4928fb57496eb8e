"""A PostgreSQL backup's rows loaded into lair's own tables, never its SQL.

A ``pg_dump`` archive is a script: functions, triggers, ``CHECK`` constraints, extensions, roles,
``COPY ... TO PROGRAM``. ``pg_restore`` runs whatever a tampered dump holds, as the connecting role
(often a superuser): a function called by a constraint ran an OS command as ``postgres``. So
nothing of the dump is executed here:

1. its table of contents (``pg_restore -l``) may hold only tables, their data, sequences, defaults,
   constraints and indexes, all in one schema, and only lair's tables; anything else (a function,
   an extension, a trigger, a view, a schema, another table) refuses the whole restore, naming it;
2. its data (``pg_restore --data-only -f -``, which only prints) is read as ``COPY`` blocks and
   ``setval`` calls; any other statement refuses the restore, naming its line;
3. in one transaction, lair's own migrations create the schema at the backup's revision, each
   block's rows go through ``COPY lair_table (columns) FROM STDIN``, the command written here with
   the table and columns checked against that schema (the dump's text is data to PostgreSQL's COPY
   parser only), and each sequence is set by name checked the same way. A failure rolls back all
   of it: the database is left empty.

Errors: :class:`~lair.errors.Invalid` (422 ``invalid``) naming what was refused.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import sqlalchemy as sa
from alembic.util import CommandError
from psycopg import sql
from sqlalchemy import Connection, Engine

from lair.errors import Invalid
from lair.registry.db.engine import migrate_on

__all__ = ["Dump", "load_pg", "parse_data", "refuse_toc"]

ALLOWED = (
    "TABLE DATA", "TABLE", "SEQUENCE SET", "SEQUENCE OWNED BY", "SEQUENCE", "DEFAULT", "FK CONSTRAINT",
    "CONSTRAINT", "INDEX", "ACL",
)  # fmt: skip
"""Kinds of table-of-contents entries a backup of lair holds (longest first: matched as prefixes).
``ACL`` entries (grants to other roles) are never applied, as ``--no-privileges`` did."""
_IDENT = r'(?:"(?:[^"]|"")+"|[a-z_][a-z0-9_$]*)'
_COPY = re.compile(rf"COPY ({_IDENT})\.({_IDENT}) \(({_IDENT}(?:, {_IDENT})*)\) FROM stdin;")
_SETVAL = re.compile(r"SELECT pg_catalog\.setval\('((?:[^']|'')+)', (\d{1,19}), (true|false)\);")
_HARMLESS = re.compile(
    r"|--.*|SET [a-z_]+ = [^;]*;|SELECT pg_catalog\.set_config\('search_path', '', false\);"
    r"|\\(?:un)?restrict [A-Za-z0-9]+"
)
"""The lines of a data-only script that are neither data nor sequences: blank, comments, session
settings (not applied: the load sets its own), psql's ``\\restrict`` guard."""


def _invalid(where: str, message: str) -> Invalid:
    hint = "restore only backups written by lair registry backup, kept where no one else can write"
    return Invalid(message, location=where, hint=hint)


def _unquote(ident: str) -> str:
    return ident[1:-1].replace('""', '"') if ident.startswith('"') else ident


def _run(argv: list[str], where: str) -> bytes:
    done = subprocess.run(argv, capture_output=True, timeout=3600, check=False)
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip()[-800:]
        raise _invalid(where, f"the database dump cannot be read ({tail})")
    return done.stdout


def _toc_entry(line: str) -> tuple[str, str, str] | None:
    """(kind, schema, name) of one ``pg_restore -l`` line (``ID; OID OID KIND SCHEMA NAME OWNER``)."""
    parts = line.split(None, 3)
    if len(parts) < 4 or not parts[0].endswith(";"):
        return None
    rest = parts[3]
    kind = next((k for k in ALLOWED if rest.startswith(k + " ")), rest.split(" ", 1)[0])
    schema, _, name = rest[len(kind) :].strip().partition(" ")
    return kind, schema, name.split(" ", 1)[0]


def refuse_toc(toc: str, tables: set[str], where: str) -> None:
    """Raise unless every entry of the table of contents ``toc`` is one of lair's tables or what
    belongs to them, in one schema."""
    wrong, schemas = [], set()
    for line in toc.splitlines():
        if not line.strip() or line.startswith(";"):
            continue
        entry = _toc_entry(line)
        if entry is None:
            wrong.append(line[:120])
            continue
        kind, schema, name = entry
        schemas |= {schema} - {"-"}  # "-": an object of the database, as a grant on a schema
        if kind not in ALLOWED or (kind in ("TABLE", "TABLE DATA") and name not in tables):
            wrong.append(f"{kind} {schema}.{name}")
    if len(schemas) > 1:
        wrong.append(f"objects in {len(schemas)} schemas ({', '.join(sorted(schemas))})")
    if wrong:
        shown = "; ".join(wrong[:10]) + (f" and {len(wrong) - 10} more" if len(wrong) > 10 else "")
        raise _invalid(where, f"the database dump holds what is not lair's registry: {shown}")


@dataclass
class Dump:
    """The rows of a data-only script: per table its columns and COPY text lines; sequence values."""

    copies: dict[str, tuple[list[str], list[bytes]]] = field(default_factory=dict)
    sequences: dict[str, tuple[int, bool]] = field(default_factory=dict)


def _block(lines: Iterator[tuple[int, bytes]], start: int, where: str) -> list[bytes]:
    rows: list[bytes] = []
    for _n, raw in lines:
        if raw == b"\\.":
            return rows
        rows.append(raw)
    raise _invalid(where, f"line {start}: a COPY block without its end (\\.)")


def parse_data(script: bytes, where: str) -> Dump:
    """The COPY blocks and ``setval`` calls of ``pg_restore --data-only -f -``'s output; any other
    statement is refused by its line number."""
    dump = Dump()
    lines = enumerate(script.split(b"\n"), 1)
    for n, raw in lines:
        try:
            line = raw.decode()
        except UnicodeDecodeError:
            raise _invalid(where, f"line {n} of the database dump is not UTF-8") from None
        if copy := _COPY.fullmatch(line):
            table, cols = _unquote(copy.group(2)), [_unquote(c) for c in copy.group(3).split(", ")]
            if table in dump.copies:
                raise _invalid(where, f"line {n}: the rows of {table} come twice")
            dump.copies[table] = (cols, _block(lines, n, where))
        elif setval := _SETVAL.fullmatch(line):
            name = setval.group(1).replace("''", "'").rsplit(".", 1)[-1]
            dump.sequences[_unquote(name)] = (int(setval.group(2)), setval.group(3) == "true")
        elif not _HARMLESS.fullmatch(line):
            raise _invalid(where, f"line {n} of the database dump is not a row: {line[:80]!r}")
    return dump


def _sequences(conn: Connection, tables: list[sa.Table]) -> dict[str, str]:
    """Unqualified sequence name -> the qualified one, of every serial column of lair's tables."""
    out = {}
    for t in tables:
        for c in t.columns:
            seq = conn.execute(sa.text("SELECT pg_get_serial_sequence(:t, :c)"), {"t": t.name, "c": c.name})
            if (name := seq.scalar()) is not None:
                out[_unquote(name.rsplit(".", 1)[-1])] = name
    return out


def _copy(conn: Connection, table: sa.Table, cols: list[str], rows: list[bytes], where: str) -> None:
    unknown = [c for c in cols if c not in table.columns]
    if unknown:
        raise _invalid(where, f"the rows of {table.name} name columns it does not have: {unknown}")
    stmt = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table.name), sql.SQL(", ").join(sql.Identifier(c) for c in cols)
    )
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    with cursor.copy(stmt) as copy:
        for row in rows:
            copy.write(row + b"\n")


def _load(conn: Connection, dump: Dump, where: str) -> None:
    meta = sa.MetaData()
    meta.reflect(conn)
    tables = [t for t in meta.sorted_tables if t.name != "alembic_version"]
    unknown = sorted(set(dump.copies) - {t.name for t in tables} - {"alembic_version"})
    if unknown:
        raise _invalid(where, f"the database dump holds rows of tables lair does not have: {unknown}")
    seqs = _sequences(conn, tables)
    if stray := sorted(set(dump.sequences) - set(seqs)):
        raise _invalid(where, f"the database dump sets sequences lair does not have: {stray}")
    # rows the migrations wrote (registry_version's) give way to the backup's
    conn.execute(sa.text("TRUNCATE " + ", ".join(f'"{t.name}"' for t in tables)))
    for t in tables:  # parents before children: every foreign key holds as the rows arrive
        if t.name in dump.copies:
            _copy(conn, t, *dump.copies[t.name], where)
    for name, (value, called) in dump.sequences.items():
        conn.execute(
            sa.text("SELECT setval(CAST(:s AS regclass), :v, :c)"), {"s": seqs[name], "v": value, "c": called}
        )


def load_pg(engine: Engine, dump_file: Path, revision: str, pg_restore: str, where: str) -> None:
    """Create lair's schema at ``revision`` in the empty database of ``engine`` and load the rows of
    the custom-format dump ``dump_file`` into it, in one transaction."""
    toc = _run([pg_restore, "-l", str(dump_file)], where).decode(errors="replace")
    script = _run([pg_restore, "--data-only", "-f", "-", str(dump_file)], where)
    dump = parse_data(script, where)
    with engine.begin() as conn:
        try:
            migrate_on(conn, revision)
        except CommandError as exc:  # an unknown revision: a backup of a newer lair
            raise _invalid(where, f"schema revision {revision!r} is not known here ({exc})") from None
        refuse_toc(toc, set(sa.inspect(conn).get_table_names()), where)
        try:
            _load(conn, dump, where)
        except (sa.exc.DBAPIError, psycopg.Error) as exc:
            cause = exc.orig if isinstance(exc, sa.exc.DBAPIError) and exc.orig else exc
            first = (str(cause).splitlines() or [type(cause).__name__])[0]
            raise _invalid(where, f"the backup's rows do not load: {first}") from None
