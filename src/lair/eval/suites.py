"""Suite names to runnable specs, and the offline check of their data sets.

    gsm8k        lm-eval's own ``gsm8k`` task (5-shot, exact match); data ``openai/gsm8k``
    humaneval    lair's ``lair_humaneval`` task (pass@1, programs run in the sandbox); data
                 ``openai/openai_humaneval``
    needle       lair's needle-in-a-haystack (:mod:`lair.bench`), at several depths
    lair_arith   the bundled tiny arithmetic task (36 questions, data in the package)
    NAME         any lm-eval task or group name
    FILE.yaml    any lm-eval task YAML (its relative ``data_files`` resolve against the file)

``--data PATH`` replaces the data set of gsm8k / humaneval / a YAML task with a local JSON Lines
or Parquet file (its records in the data set's own format). Hub data sets are read from the local
Hugging Face cache only (lair sets ``HF_DATASETS_OFFLINE`` and ``HF_HUB_OFFLINE``).
"""

from __future__ import annotations

import contextlib
import difflib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lair.errors import EvalError

__all__ = [
    "BUILTIN",
    "LOCAL_BUILDERS",
    "SuiteSpec",
    "builtin_config",
    "hub_cached",
    "hub_snapshot",
    "offline_config",
    "offline_env",
    "resolve_suite",
]

TASKS_DIR = Path(__file__).parent / "tasks"
BUILTIN = ("gsm8k", "humaneval", "needle", "lair_arith")
LOCAL_BUILDERS = {"json", "csv", "parquet", "text", "arrow"}


@dataclass
class SuiteSpec:
    """What :mod:`lair.eval.harness` runs for one suite."""

    name: str
    kind: str  # lm_eval | humaneval | needle
    task: str | dict[str, Any] = ""
    data: str = ""
    include: list[str] = field(default_factory=list)


def _yaml(path: Path) -> dict[str, Any]:
    from lm_eval.tasks._yaml_loader import load_yaml

    try:
        cfg: dict[str, Any] = load_yaml(path)
    except (OSError, ValueError) as exc:
        raise EvalError(f"{path}: not an lm-eval task YAML ({exc})") from exc
    if cfg.get("unsafe_code"):
        raise EvalError(
            f"{path}: the task runs generated code inside the harness (unsafe_code: true)",
            hint="lair runs generated code only in its sandbox: use --suite humaneval for HumanEval-format "
            "data",
        )
    return cfg


def _data_file_kind(path: Path) -> str:
    if not path.exists():
        raise EvalError(f"--data {path}: no such file")
    return "parquet" if path.suffix == ".parquet" else "json"


def _with_data(cfg: dict[str, Any], data: Path) -> dict[str, Any]:
    """``cfg`` reading every split it uses from the one local file ``data``."""
    cfg = dict(cfg)
    cfg["dataset_path"] = _data_file_kind(data)
    cfg.pop("dataset_name", None)
    split = cfg.get("test_split") or cfg.get("validation_split") or "test"
    cfg["dataset_kwargs"] = {"data_files": {split: str(data.resolve())}}
    for key in ("training_split", "validation_split", "fewshot_split"):
        if cfg.get(key) and cfg[key] != split:
            cfg.pop(key)
    cfg["test_split"] = split
    if cfg.get("num_fewshot") and not cfg.get("fewshot_split"):
        cfg["num_fewshot"] = 0  # few-shot examples came from a split the file does not have
    return cfg


def _resolve_relative(cfg: dict[str, Any], base: Path) -> dict[str, Any]:
    files = (cfg.get("dataset_kwargs") or {}).get("data_files")
    if not files or cfg.get("dataset_path") not in LOCAL_BUILDERS:
        return cfg
    cfg = dict(cfg)

    def fix(p: str) -> str:
        return p if "://" in p or Path(p).is_absolute() else str((base / p).resolve())

    fixed = {k: fix(v) if isinstance(v, str) else [fix(x) for x in v] for k, v in files.items()}
    cfg["dataset_kwargs"] = {**cfg["dataset_kwargs"], "data_files": fixed}
    return cfg


@contextlib.contextmanager
def offline_env(**extra: str) -> Iterator[None]:
    """Hugging Face hub and data sets offline (and ``extra`` variables set) for the duration."""
    values = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", **extra}
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def hub_snapshot(repo: str) -> Path | None:
    """The folder of the hub data set ``repo`` (``org/name``) in the local hub cache, as ``hf download``
    leaves it: the snapshot ``refs/main`` names, else the newest one."""
    from huggingface_hub import constants

    hub = Path(constants.HF_HUB_CACHE) / ("datasets--" + repo.replace("/", "--"))
    ref = hub / "refs" / "main"
    if ref.is_file() and (hub / "snapshots" / ref.read_text().strip()).is_dir():
        return hub / "snapshots" / ref.read_text().strip()
    snaps = sorted((hub / "snapshots").iterdir(), key=lambda p: p.stat().st_mtime) if hub.is_dir() else []
    return snaps[-1] if snaps else None


def _datasets_cached(repo: str) -> bool:
    from huggingface_hub import constants

    ds_cache = Path(os.environ.get("HF_DATASETS_CACHE") or Path(constants.HF_HOME) / "datasets")
    return (ds_cache / repo.replace("/", "___")).is_dir()


def hub_cached(repo: str) -> bool:
    """Whether the hub data set ``repo`` (``org/name``) is in the local Hugging Face caches."""
    return hub_snapshot(repo) is not None or _datasets_cached(repo)


def offline_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` reading its hub data set from where it lies offline. The data sets library, offline,
    finds a hub data set by name only in its own cache (one it once loaded online); a snapshot that
    ``hf download`` left in the hub cache is read through its folder (its README's configs name the
    files of each config and split)."""
    path = str(cfg.get("dataset_path") or "")
    if not path or path in LOCAL_BUILDERS or Path(path).exists():
        return cfg
    snap = hub_snapshot(path)
    return cfg | {"dataset_path": str(snap)} if snap is not None else cfg


def check_data(cfg: dict[str, Any], suite: str) -> str:
    """The data set ``cfg`` reads, checked to be there offline; a clear error when it is not."""
    path = str(cfg.get("dataset_path") or "")
    if path in LOCAL_BUILDERS:
        files = (cfg.get("dataset_kwargs") or {}).get("data_files") or {}
        for f in [x for v in files.values() for x in ([v] if isinstance(v, str) else v)]:
            if "://" not in f and not Path(f).exists():
                raise EvalError(f"suite {suite}: data file {f} does not exist")
        return ", ".join(str(v) for v in files.values())
    if not path or Path(path).exists() or hub_cached(path):
        return path
    raise EvalError(
        f"suite {suite}: data set {path} is not in the local Hugging Face cache and lair evaluates offline",
        hint=f"fetch it once with: hf download {path} --repo-type dataset\n"
        "(or give a local file in the data set's format with --data PATH)",
    )


def _task_name_spec(name: str, data: Path | None) -> SuiteSpec:
    from lm_eval.tasks import TaskManager

    index = TaskManager().task_index
    entry = index.get(name)
    if entry is None:
        close = difflib.get_close_matches(name, list(index), n=3)
        hint = (
            f"did you mean {', '.join(close)}?" if close else "give an lm-eval task name or a task YAML file"
        )
        raise EvalError(
            f"unknown suite {name!r}: not a lair suite ({', '.join(BUILTIN)}) nor an lm-eval task", hint=hint
        )
    if entry.yaml_path is None or entry.kind.name.lower() != "task":
        return SuiteSpec(name, "lm_eval", name, data="(lm-eval group: data sets checked when loaded)")
    cfg = _yaml(entry.yaml_path)
    cfg = _with_data(cfg, data) if data else offline_config(cfg)
    return SuiteSpec(name, "lm_eval", cfg, data=check_data(cfg, name))


def builtin_config(name: str) -> dict[str, Any] | None:
    """The lm-eval task config of a lair suite scored by exact match (``lair_arith``, ``gsm8k``), its
    data set not checked; None for any other name. The registry re-scores uploads with it."""
    if name == "lair_arith":
        return _resolve_relative(_yaml(TASKS_DIR / "lair_arith.yaml"), TASKS_DIR)
    if name == "gsm8k":
        import lm_eval.tasks

        return _yaml(Path(lm_eval.tasks.__file__).parent / "gsm8k" / "gsm8k.yaml")
    return None


def resolve_suite(name: str, data: Path | None = None) -> SuiteSpec:
    """The spec of one suite name or task YAML path (data sets checked, nothing sent)."""
    if name == "needle":
        return SuiteSpec(name, "needle", data="generated filler (lair.bench.prompt)")
    if name in ("humaneval", "lair_arith"):
        cfg = _resolve_relative(_yaml(TASKS_DIR / f"lair_{name.removeprefix('lair_')}.yaml"), TASKS_DIR)
        kind = "humaneval" if name == "humaneval" else "lm_eval"
    elif name == "gsm8k":
        import lm_eval.tasks

        cfg, kind = _yaml(Path(lm_eval.tasks.__file__).parent / "gsm8k" / "gsm8k.yaml"), "lm_eval"
    elif name.endswith((".yaml", ".yml")):
        path = Path(name)
        if not path.is_file():
            raise EvalError(f"--suite {name}: no such task YAML file")
        cfg, kind = _resolve_relative(_yaml(path), path.resolve().parent), "lm_eval"
    else:
        return _task_name_spec(name, data)
    cfg = _with_data(cfg, data) if data else offline_config(cfg)
    return SuiteSpec(name, kind, cfg, data=check_data(cfg, name))
