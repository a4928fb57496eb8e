"""Model facts from the Hugging Face Hub by name, without downloading the weights.

A model named ``ORG/NAME`` (optionally ``@REVISION``) is read through ``huggingface_hub``: the model
info (the commit, the file list and sizes), ``config.json`` (``hf_hub_download``, into the HF cache)
and each safetensors shard's header (``parse_safetensors_file_metadata``: one or two range requests per
shard, never the tensors; the shards are the model info's, so the index, over 1 MB for a large MoE, is
not fetched). ``ORG/NAME:FILE.gguf`` reads only the GGUF's header (metadata and tensor infos) by HTTP range
requests on the file's resolve URL, growing the range until the header is whole. Headers are kept
beside the HF cache entry (:mod:`lair.fit.hub_cache`); the facts are then read from the cache
snapshot by the same code as a local folder (:func:`lair.fit.model_files.read_model_facts`), so a
model read from the Hub and from its full local copy give the same facts.

huggingface_hub's own settings apply: ``HF_ENDPOINT``, ``HF_TOKEN`` (or ``hf auth login``),
``HF_HUB_CACHE`` / ``HF_HOME``, ``HF_HUB_OFFLINE`` (offline: the cache only). :class:`HubAccess`
overrides them per call. Budgets: config.json, the number of weight files and tensors, and a GGUF
header each have a ceiling; past it is a :class:`~lair.errors.HubBudgetError`.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx2  # huggingface_hub's HTTP client: its errors are what it raises
import huggingface_hub as hf
from huggingface_hub import constants as hf_constants
from huggingface_hub import errors as hf_errors
from huggingface_hub import hf_raise_for_status
from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]  # lazily exported

from lair.errors import HubAuthError, HubBudgetError, HubError, HubOfflineError
from lair.fit import hub_cache
from lair.fit._gguf import read_gguf
from lair.fit.bundled_models import bundled_facts
from lair.fit.fact_source import FactSource, fact_source
from lair.fit.model_facts import ModelFacts
from lair.fit.model_files import read_model_facts, resolve_model_path

__all__ = [
    "CONFIG_MAX_BYTES",
    "GGUF_HEADER_MAX_BYTES",
    "MAX_TENSORS",
    "MAX_WEIGHT_FILES",
    "HubAccess",
    "HubRef",
    "facts_by_name",
    "local_copy",
    "parse_hub_ref",
    "read_hub_facts",
]

CONFIG_MAX_BYTES = 4 << 20  # config.json: real ones are 1-100 KB
MAX_WEIGHT_FILES = 2048  # safetensors shards of one repo (the largest open models have ~200)
MAX_TENSORS = 500_000  # tensors over all shards (DeepSeek-V3: ~92,000)
GGUF_HEADER_MAX_BYTES = 128 << 20  # metadata + tensor infos (a 256k-token vocabulary: ~10 MB)
_GGUF_FIRST_READ = 256 << 10
_REF = re.compile(
    r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+?)(?:@(?P<rev>[\w./-]+?))?(?::(?P<file>[^:@]+\.gguf))?$"
)
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SPLIT = re.compile(r"^(?P<stem>.+)-00001-of-(?P<n>\d{5})\.gguf$")
_AUTH_HINT = (
    "accept the model's terms on its Hub page if it is gated, then set HF_TOKEN or run `hf auth login`"
)


@dataclass(frozen=True)
class HubRef:
    """A model named on the Hub: ``ORG/NAME[@REVISION][:FILE.gguf]``."""

    repo_id: str
    revision: str | None = None
    filename: str | None = None

    def __str__(self) -> str:
        rev = f"@{self.revision}" if self.revision else ""
        return f"{self.repo_id}{rev}" + (f":{self.filename}" if self.filename else "")


@dataclass(frozen=True)
class HubAccess:
    """Per-call overrides of huggingface_hub's settings (None: the library's own, from its env)."""

    endpoint: str | None = None
    cache_dir: Path | None = None
    offline: bool | None = None
    token: str | bool | None = field(default=None, repr=False)

    @property
    def hub_cache(self) -> Path:
        return Path(self.cache_dir or hf_constants.HF_HUB_CACHE)

    @property
    def is_offline(self) -> bool:
        return hf_constants.is_offline_mode() if self.offline is None else self.offline

    @property
    def host(self) -> str:
        return httpx2.URL(self.endpoint or hf_constants.ENDPOINT).host


def parse_hub_ref(text: str) -> HubRef | None:
    """The Hub id in ``text``, or None when it is not one (a path, a URL, a placeholder)."""
    m = _REF.match(text.strip())
    if m is None or text.startswith(("/", ".", "~")) or "{" in text:
        return None
    return HubRef(m["repo"], m["rev"], m["file"])


def facts_by_name(name: str, access: HubAccess | None = None) -> tuple[ModelFacts, FactSource] | None:
    """The facts of the model ``name`` (``ORG/NAME[@REV][:FILE.gguf]``, or a name lair bundles, such as
    ``qwen3:30b-a3b``) and where each came from: its full local copy in the HF cache when there is one,
    else the facts bundled with lair (:mod:`lair.fit.bundled_models`: no network; not when a revision
    or a GGUF file is named), else the Hub. None when ``name`` is neither a Hub id nor bundled."""
    ref = parse_hub_ref(name)
    if ref is None:
        return bundled_facts(name)
    access = access or HubAccess()
    local = local_copy(ref, access)
    if local is not None:
        facts = replace(read_model_facts(local), name=ref.repo_id)
        return facts, fact_source("hf cache", str(local), facts)
    if not ref.revision and not ref.filename and (bundled := bundled_facts(ref.repo_id)) is not None:
        return bundled
    facts, commit = _read(ref, access)
    return facts, fact_source("hub", f"{ref.repo_id}@{commit}", facts)


def local_copy(ref: HubRef, access: HubAccess) -> Path | None:
    """The cache snapshot of ``ref`` (no revision named) that holds its weights: the safetensors or the
    named GGUF (a snapshot with only config.json is not a copy: its headers are read from the Hub)."""
    entry = hub_cache.repo_entry(access.hub_cache, ref.repo_id)
    if ref.revision or not (entry / "snapshots").is_dir():
        return None
    snap = resolve_model_path(entry)
    if ref.filename:
        return snap / ref.filename if (snap / ref.filename).is_file() else None
    has_weights = (snap / "config.json").is_file() and any(snap.glob("*.safetensors"))
    return snap if has_weights else None


def read_hub_facts(ref: HubRef, access: HubAccess | None = None) -> ModelFacts:
    """The facts of ``ref`` read from the Hub (or, offline, from what an earlier read cached)."""
    return _read(ref, access or HubAccess())[0]


def _read(ref: HubRef, access: HubAccess) -> tuple[ModelFacts, str]:
    entry = hub_cache.repo_entry(access.hub_cache, ref.repo_id)
    with _hub_errors(ref, access):
        commit, info = (_cached_commit(ref, entry), None) if access.is_offline else _model_info(ref, access)
        if ref.filename:
            facts = _gguf_facts(ref, access, entry, commit, info)
        else:
            facts = _config_facts(ref, access, entry, commit, info)
    hub_cache.save_ref(entry, ref.revision or "main", commit)
    where = "the local HF cache (offline)" if access.is_offline else access.host
    source = f"{ref.repo_id}@{commit} from {where}: {facts.source}"
    return replace(facts, name=ref.repo_id, source=source), commit


# ------------------------------------------------------------------------------------ revisions


def _model_info(ref: HubRef, access: HubAccess) -> tuple[str, Any]:
    api = hf.HfApi(endpoint=access.endpoint, token=access.token)
    info = api.model_info(ref.repo_id, revision=ref.revision, files_metadata=True)
    if not info.sha:
        raise HubError(f"{ref}: the Hub's model info has no commit")
    return info.sha, info


def _cached_commit(ref: HubRef, entry: Path) -> str:
    if ref.revision and _COMMIT.match(ref.revision):
        return ref.revision
    commit = hub_cache.load_ref(entry, ref.revision or "main")
    if commit is None:
        raise HubOfflineError(
            f"{ref}: not in the local Hugging Face cache ({entry}) and HF_HUB_OFFLINE is set",
            hint=f"read it once online (unset HF_HUB_OFFLINE): lair fit {ref.repo_id} ...",
        )
    return commit


def _sizes(info: Any) -> dict[str, int]:
    return {s.rfilename: int(s.size or 0) for s in (info.siblings or [])}


# ------------------------------------------------------------------------------ config + safetensors


def _config_facts(ref: HubRef, access: HubAccess, entry: Path, commit: str, info: Any) -> ModelFacts:
    snapshot = entry / "snapshots" / commit
    if info is not None:
        sizes = _sizes(info)
        _check_config(ref, sizes)
        hf.hf_hub_download(
            ref.repo_id,
            "config.json",
            revision=commit,
            cache_dir=access.cache_dir,
            endpoint=access.endpoint,
            token=access.token,
        )
        if hub_cache.load_safetensors_headers(entry, commit) is None:
            _fetch_safetensors_headers(ref, access, entry, commit, sizes)
    config = snapshot / "config.json"
    if not config.is_file():
        raise HubOfflineError(
            f"{ref}@{commit}:config.json: not in the local Hugging Face cache and HF_HUB_OFFLINE is set",
            hint="run once online (unset HF_HUB_OFFLINE)",
        )
    if config.stat().st_size > CONFIG_MAX_BYTES:
        raise _config_budget(ref, config.stat().st_size)
    return read_model_facts(snapshot)


def _check_config(ref: HubRef, sizes: dict[str, int]) -> None:
    if "config.json" not in sizes:
        ggufs = sorted(f for f in sizes if f.endswith(".gguf"))
        hint = f"name a GGUF file: lair fit {ref.repo_id}:{ggufs[0]}" if ggufs else "is it a model repo?"
        raise HubError(f"{ref}: the repo has no config.json", hint=hint)
    if sizes["config.json"] > CONFIG_MAX_BYTES:
        raise _config_budget(ref, sizes["config.json"])


def _config_budget(ref: HubRef, size: int) -> HubBudgetError:
    return HubBudgetError(
        f"{ref}:config.json: {size:,} bytes is past the budget of {CONFIG_MAX_BYTES:,}",
        hint="a model's config.json is a few KB; download the model and give its folder",
    )


def _fetch_safetensors_headers(
    ref: HubRef, access: HubAccess, entry: Path, commit: str, sizes: dict[str, int]
) -> None:
    shards = [f for f in sizes if f.endswith(".safetensors") and "/" not in f]
    if not shards:
        return
    if len(shards) > MAX_WEIGHT_FILES:
        raise HubBudgetError(
            f"{ref}: {len(shards):,} safetensors files is past the budget of {MAX_WEIGHT_FILES:,}"
        )
    api = hf.HfApi(endpoint=access.endpoint, token=access.token)

    def header(name: str) -> dict[str, Any]:
        fm = api.parse_safetensors_file_metadata(ref.repo_id, name, revision=commit)
        return {t: {"dtype": i.dtype, "data_offsets": list(i.data_offsets)} for t, i in fm.tensors.items()}

    with ThreadPoolExecutor(max_workers=8) as pool:  # one or two range requests per shard
        headers = dict(zip(shards, pool.map(header, shards), strict=True))
    n = sum(len(h) for h in headers.values())
    if n > MAX_TENSORS:
        raise HubBudgetError(f"{ref}: {n:,} tensors is past the budget of {MAX_TENSORS:,}")
    hub_cache.save_safetensors_headers(entry, commit, headers)


# ------------------------------------------------------------------------------------------ GGUF


def _gguf_parts(ref: HubRef, sizes: dict[str, int] | None) -> list[str]:
    """The file and, for a split GGUF (``-00001-of-0000N``), all its parts."""
    name = str(ref.filename)
    m = _SPLIT.match(Path(name).name)
    parts = [name]
    if m:
        n = int(m["n"])
        parts = [name.replace("-00001-of-", f"-{i:05d}-of-") for i in range(1, n + 1)]
    missing = [p for p in parts if sizes is not None and p not in sizes]
    if missing:
        ggufs = sorted(f for f in (sizes or {}) if f.endswith(".gguf"))
        hint = "GGUF files: " + ", ".join(ggufs[:20])
        raise HubError(f"{ref}: no file {missing[0]} in the repo", hint=hint)
    return parts


def _gguf_facts(ref: HubRef, access: HubAccess, entry: Path, commit: str, info: Any) -> ModelFacts:
    sizes = _sizes(info) if info is not None else None
    headers = []
    for part in _gguf_parts(ref, sizes):
        got = hub_cache.load_gguf_header(entry, commit, part)
        if got is None and sizes is None:
            raise HubOfflineError(
                f"{ref.repo_id}@{commit}:{part}: header not in the local cache and HF_HUB_OFFLINE is set",
                hint="run once online (unset HF_HUB_OFFLINE)",
            )
        if got is None:
            got = _fetch_gguf_header(ref, access, commit, part, (sizes or {})[part])
            hub_cache.save_gguf_header(entry, commit, part, *got)
        headers.append((part, *got))
    return _parse_gguf_headers(headers)


def _fetch_gguf_header(
    ref: HubRef, access: HubAccess, commit: str, part: str, size: int
) -> tuple[bytes, int]:
    """The file's first bytes, by range requests until the header (metadata, tensor infos) is whole."""
    url = hf.hf_hub_url(ref.repo_id, part, revision=commit, endpoint=access.endpoint)
    headers = build_hf_headers(token=access.token)
    data, want = b"", min(_GGUF_FIRST_READ, size)
    while True:
        resp = hf.get_session().get(
            url, headers={**headers, "Range": f"bytes={len(data)}-{want - 1}"}, follow_redirects=True
        )
        hf_raise_for_status(resp)
        data += resp.content[: want - len(data)]
        end = _gguf_header_end(part, data, size)
        if end is not None:
            return data[:end], size
        if want >= min(size, GGUF_HEADER_MAX_BYTES):
            raise HubBudgetError(
                f"{ref.repo_id}@{commit}:{part}: the GGUF header is past the budget of "
                f"{GGUF_HEADER_MAX_BYTES:,} bytes (or the file is not a GGUF)"
            )
        want = min(want * 4, size, GGUF_HEADER_MAX_BYTES)


def _gguf_header_end(part: str, data: bytes, size: int) -> int | None:
    """Where the tensor data starts when ``data`` holds the whole header, else None."""
    with _sparse_copy(part, data, size) as path:
        try:
            import gguf  # the engines extra brings it; read_gguf says so when it is missing

            end = int(gguf.GGUFReader(str(path), "r").data_offset)
        except (ValueError, IndexError, KeyError, UnicodeDecodeError):
            return None
    return end if end <= len(data) else None


@contextlib.contextmanager
def _sparse_copy(name: str, data: bytes, size: int) -> Iterator[Path]:
    """``data`` in a temporary file of the whole file's ``size`` (the rest a hole: no disk used), so the
    gguf reader, which maps the file, finds the tensors where they would be and never reads them."""
    with tempfile.TemporaryDirectory(prefix="lair-gguf-") as tmp:
        path = Path(tmp) / Path(name).name
        with path.open("wb") as f:
            f.write(data)
            f.truncate(max(size, len(data)))
        yield path


def _parse_gguf_headers(headers: list[tuple[str, bytes, int]]) -> ModelFacts:
    with contextlib.ExitStack() as stack:
        paths = [stack.enter_context(_sparse_copy(p, data, size)) for p, data, size in headers]
        return read_gguf(paths)


# ---------------------------------------------------------------------------------------- errors


@contextlib.contextmanager
def _hub_errors(ref: HubRef, access: HubAccess) -> Iterator[None]:
    """huggingface_hub's and httpx's errors as lair's, located at ``ref``; the token never appears."""
    try:
        yield
    except hf_errors.GatedRepoError as exc:
        raise HubAuthError(f"{ref}: gated repo, access refused ({_status(exc)})", hint=_AUTH_HINT) from None
    except hf_errors.RepositoryNotFoundError as exc:
        raise HubAuthError(
            f"{ref}: no such repo on {access.host}, or a private one ({_status(exc)})", hint=_AUTH_HINT
        ) from None
    except hf_errors.RevisionNotFoundError:
        raise HubError(f"{ref}: no revision {ref.revision!r} on {access.host}") from None
    except (hf_errors.OfflineModeIsEnabled, hf_errors.LocalEntryNotFoundError) as exc:
        raise HubOfflineError(f"{ref}: {exc}", hint="run once online (unset HF_HUB_OFFLINE)") from None
    except hf_errors.HfHubHTTPError as exc:
        if _status(exc) in (401, 403):
            raise HubAuthError(f"{ref}: access refused ({_status(exc)})", hint=_AUTH_HINT) from None
        raise HubError(f"{ref}: the Hub answered {_status(exc)}") from None
    except (hf_errors.SafetensorsParsingError, hf_errors.NotASafetensorsRepoError) as exc:
        raise HubError(f"{ref}: {exc}") from None
    except httpx2.HTTPError as exc:
        raise HubError(
            f"{ref}: cannot reach {access.host} ({type(exc).__name__})",
            hint="check the network or HF_ENDPOINT; HF_HUB_OFFLINE=1 reads what is cached",
        ) from None


def _status(exc: hf_errors.HfHubHTTPError) -> int:
    return int(exc.response.status_code) if exc.response is not None else 0
