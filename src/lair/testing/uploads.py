"""Hostile report uploads, built byte by byte (never written to disk, never the sizes they declare),
and a small report whose documents have every field the registry types, for tests of
``POST /api/v1/reports``.

Each archive of :data:`HOSTILE` comes with the status and a piece of the reason the registry must
answer: they are the uploads that once stalled or bloated a worker (a pax header of 100,000 digits
for tarfile's quadratic regex, a 1 GiB pax header, an 8 GiB member behind ``..``, a gzip bomb).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
import zlib
from collections.abc import Callable
from typing import Any

from lair.testing.forged_reports import certificates

__all__ = [
    "HOSTILE",
    "declared_8gib",
    "encode",
    "gzip_bomb",
    "huge_pax_header",
    "pax_bytes",
    "pax_digits",
    "pax_keys",
    "report_files",
    "tar_gz",
]

_END = bytes(1024)


def _header(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type = size, kind
    return info.tobuf(format=tarfile.GNU_FORMAT)  # GNU: base-256 sizes past 8 GiB


def _padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % 512)


def pax_digits(digits: int = 100_000) -> bytes:
    """A tiny ``.tar.gz`` whose pax header holds ``digits`` digits and no record length (the input
    of CVE-2024-6232: tarfile's header regex backtracks over it)."""
    payload = b"1" * digits
    tar = _header("././@PaxHeader", len(payload), tarfile.XHDTYPE) + _padded(payload)
    return gzip.compress(tar + _header("run/results.json", 2) + _padded(b"{}") + _END, 9)


def huge_pax_header(declared: int = 1 << 30, body: int = 1 << 20) -> bytes:
    """A pax header declaring ``declared`` bytes, followed by ``body`` random bytes (about 1 MB on
    the wire: incompressible)."""
    return gzip.compress(_header("././@PaxHeader", declared, tarfile.XHDTYPE) + os.urandom(body), 1)


def declared_8gib(name: str = "run/../bomb0") -> bytes:
    """A member ``name`` whose header declares 8 GiB (the data is never made: the header is enough)."""
    return gzip.compress(_header("run/results.json", 2) + _padded(b"{}") + _header(name, 8 << 30))


def gzip_bomb(inflated: int = 256 << 20) -> bytes:
    """A valid member, then ``inflated`` bytes of one repeated letter: a few hundred KB on the wire
    that inflate a thousandfold (the letters are no tar header: the stream is corrupt there)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    out = [z.compress(_header("run/results.json", 2) + _padded(b"{}"))]
    chunk = b"A" * (1 << 20)
    out += [z.compress(chunk) for _ in range(inflated >> 20)]
    return b"".join(out) + z.flush()


def _pax_record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n".encode()
    n = len(body) + len(str(len(body)))
    n += len(str(n)) - len(str(len(body)))  # the length counts its own digits
    return str(n).encode() + body


def pax_keys(keys: int = 1000, members: int = 200) -> bytes:
    """``members`` files, each behind a well-formed pax header of ``keys`` records (about 20 KB,
    under the size limit): once 10 s of CPU and 370 MB of memory for a 12 MB upload."""
    payload = b"".join(_pax_record(f"LAIR.k{i:05d}", "v") for i in range(keys))
    pax = _header("././@PaxHeader", len(payload), tarfile.XHDTYPE) + _padded(payload)
    body = b"".join(pax + _header(f"run/f{n}.log", 2) + _padded(b"{}") for n in range(members))
    return gzip.compress(body + _END, 9)


def pax_bytes(total: int = 2 << 20) -> bytes:
    """Pax headers of 60 long records each (about 60 KB: every one under the size and record limits)
    in front of members until ``total`` bytes of them."""
    payload = b"".join(_pax_record(f"LAIR.k{i:02d}", "v" * 1000) for i in range(60))
    pax = _header("././@PaxHeader", len(payload), tarfile.XHDTYPE) + _padded(payload)
    count = -(-total // len(payload))
    body = b"".join(pax + _header(f"run/f{n}.log", 2) + _padded(b"{}") for n in range(count))
    return gzip.compress(body + _END, 9)


HOSTILE: dict[str, tuple[Callable[[], bytes], int, str]] = {
    "pax header of 100,000 digits": (pax_digits, 413, "pax header of 100,000 bytes"),
    "pax header declaring 1 GiB": (huge_pax_header, 413, "pax header of 1,073,741,824 bytes"),
    "run/../bomb0 declaring 8 GiB": (declared_8gib, 413, "unpacked report over 64 MiB"),
    "gzip bomb": (gzip_bomb, 422, "corrupt archive"),
    "pax headers of 1,000 keys": (pax_keys, 413, "pax header of more than 64 records"),
    "pax headers of 2 MiB in all": (pax_bytes, 413, "pax headers over 1024 KiB in all"),
}
"""name -> (the archive's builder, the status it must get, a piece of its reason)."""


def _row(repeat: int, send_ms: float, chunks: list[float]) -> dict[str, Any]:
    return {
        "context": 256,
        "concurrency": 1,
        "repeat": repeat,
        "index": 0,
        "send_ms": send_ms,
        "ttft_ms": chunks[0],
        "decode_tok_s": None,
        "prompt_tokens": 254,
        "completion_tokens": len(chunks),
        "cached_tokens": 0,
        "status": 200,
        "error": "",
        "chunk_ms": chunks,
        "chunk_tokens": [1.0] * len(chunks),
    }


def report_files(recipe_toml: str, model_sha256: str) -> dict[str, Any]:
    """A run report of the bench's layout (:func:`lair.report.folder.write_run_report`), as parsed
    documents: ``results.json``, ``fingerprint.json`` (dicts), ``requests.jsonl`` (a list of rows)
    and the recipe as run (text). Its cell has a certificate
    (:func:`lair.testing.forged_reports.certificates`).
    Its cell is not recomputed from its rows: a test that needs it
    verified fills the cell in from the registry's recomputation."""
    rows = [_row(0, 0.0, [120.0, 130.0, 140.5, 150.0]), _row(1, 0.0, [110.0, 121.0, 131.0, 141.0])]
    fp = {
        "gpus": None,
        "cpu": {"model": "AMD EPYC", "count": 2, "arch": "x86_64"},
        "ram_bytes": 25 << 30,
        "kernel": "6.1",
        "os": "Debian",
        "python": "3.11.7",
        "image": None,
        "engine": {"name": "llama.cpp"},
        "lair_version": "0.1.0",
        "recipe_sha256": "0" * 64,
    }
    cell = {
        "context": 256,
        "concurrency": 1,
        "repeats": 2,
        "prompt_tokens": 254,
        "ttft_ms_p50": 115.0,
        "ttft_ms_p90": 119.0,
        "prefill_tok_s": 2000.0,
        "decode_tok_s_per_stream": 100.0,
        "decode_tok_s_aggregate": 100.0,
        "completion_tokens": 4,
        "cached_tokens": 0,
        "cache_hit": False,
        "client_bound": False,
        "output_length_ok": True,
        "errors": 0,
        "error_messages": [],
        "flags": [],
        "stats": {},
        "client": {"cpu_fraction_max": 0.01, "loop_lag_p99_ms_max": 0.1},
        "engine_metrics": [{"metrics_engine": "llamacpp", "prefix_cache_hits_delta": None}],
    }
    options = {"decode_tokens": 4, "force_output": True, "read_interval_ms": 20.0, "repeat": 2}
    run_certificate = certificates([cell], None, requests=2)
    results = {
        "schema_version": 1,
        "kind": "lair.run_report",
        "run_name": "tiny",
        "created_at": "2026-01-01T00:00:00+00:00",
        "recipe": {"file": "recipe.recipe.toml", "model_sha256": model_sha256},
        "bench": {
            "url": "http://127.0.0.1:1",
            "model": "tiny",
            "options": options,
            "cells": [cell],
            "certificate": run_certificate,
        },
        "fingerprint": fp,
        "logs": [],
    }
    return {
        "results.json": results,
        "fingerprint.json": fp,
        "requests.jsonl": rows,
        "recipe.recipe.toml": recipe_toml,
    }


def encode(files: dict[str, Any]) -> dict[str, bytes]:
    """The files of :func:`report_files` (edited or not) as the bytes a report folder holds."""
    out = {}
    for name, value in files.items():
        if isinstance(value, bytes):
            out[name] = value
        elif name.endswith(".jsonl"):
            out[name] = "".join(json.dumps(r) + "\n" for r in value).encode()
        elif name.endswith(".json"):
            out[name] = json.dumps(value).encode()
        else:
            out[name] = str(value).encode()
    return out


def tar_gz(files: dict[str, bytes], top: str = "run") -> bytes:
    """``files`` under one top folder, as ``lair report submit`` packs a folder."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
