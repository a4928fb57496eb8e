"""Rig profiles: what a user's machine (or cluster) is and the values its recipes need.

A rig is ``<config>/rigs/<name>.toml``::

    [values]             # placeholder values, e.g. PACK = "/models/dsv41"
    [hardware]           # gpu_model, gpu_count, vram_gb, host_ram_gb, cpu
    [capabilities]       # what the hosts' container runtime allows (see lair.rig.Capabilities)
    [cost]               # power_price_kwh, hardware_cost, hardware_life_years: the bench's $/Mtok
    cluster = "homelab"  # default cluster for recipes run with this rig

``lair rig set home power_price_kwh=0.31 hardware_cost=7200 hardware_life_years=3`` writes the
``[cost]`` keys (:data:`COST_KEYS` go there, every other ``NAME=VALUE`` is a placeholder value).

Secrets do not belong in a rig: secret placeholders are read from the environment.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lair.errors import ConfigError

__all__ = [
    "COST_KEYS",
    "Capabilities",
    "Rig",
    "RigCost",
    "RigHardware",
    "list_rigs",
    "load_rig",
    "rig_path",
    "set_rig_values",
]

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class RigHardware(_Strict):
    gpu_model: str | None = None
    gpu_count: int | None = Field(None, ge=0)
    vram_gb: float | None = Field(None, gt=0)
    host_ram_gb: float | None = Field(None, gt=0)
    cpu: str | None = None


class RigCost(_Strict):
    """What running the rig costs: the bench's $/Mtok (:func:`lair.bench.telemetry.cost_per_mtok`)."""

    power_price_kwh: float | None = Field(None, ge=0, le=1000, description="electricity price per kWh")
    hardware_cost: float | None = Field(None, ge=0, le=1e9, description="what the hardware cost")
    hardware_life_years: float | None = Field(
        None, gt=0, le=100, description="years the hardware cost is spread over"
    )


COST_KEYS = frozenset(RigCost.model_fields)
"""Keys ``lair rig set NAME KEY=VALUE`` writes to ``[cost]`` rather than to ``[values]``."""


class Capabilities(_Strict):
    """What the hosts accept. Defaults describe a GPU server with the NVIDIA container toolkit."""

    gpus: bool = Field(True, description="a GPU container runtime (NVIDIA toolkit or CDI) is installed")
    gpu_access: Literal["auto", "gpus-flag", "cdi"] = Field(
        "auto", description="how containers get GPUs: --gpus, CDI devices, auto (docker --gpus, podman CDI)"
    )
    privileged: bool = Field(True, description="--privileged allowed")
    ulimit_memlock_unlimited: bool = Field(True, description="--ulimit memlock=-1 allowed")
    max_ulimit_nofile: int = Field(1048576, ge=0, description="highest --ulimit nofile accepted")
    max_ulimit_nproc: int = Field(-1, ge=-1, description="highest --ulimit nproc accepted; -1: no cap")
    devices: bool = Field(True, description="--device allowed")
    runtimes: list[str] = Field(default_factory=lambda: ["docker", "podman", "native"])


class Rig(_Strict):
    name: str = ""
    cluster: str | None = None
    values: dict[str, str | int] = Field(default_factory=dict)
    hardware: RigHardware = Field(default_factory=RigHardware)
    capabilities: Capabilities = Field(default_factory=Capabilities)
    cost: RigCost = Field(default_factory=RigCost)

    def string_values(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.values.items()}


def rig_path(name: str) -> Path:
    from lair import config

    if not NAME_RE.fullmatch(name):
        raise ConfigError(f"invalid rig name {name!r}", hint="letters, digits, '.', '_' and '-'")
    return config.rigs_dir() / f"{name}.toml"


def load_rig(name: str) -> Rig:
    p = rig_path(name)
    if not p.exists():
        raise ConfigError(f"no rig named {name!r} ({p})", hint=f"create it: lair rig set {name} NAME=VALUE")
    return load_rig_text(p, name, keep=True)


def list_rigs() -> list[str]:
    from lair import config

    d = config.rigs_dir()
    return sorted(f.stem for f in d.glob("*.toml")) if d.is_dir() else []


def set_rig_values(name: str, assignments: dict[str, str], *, section: str = "values") -> Rig:
    """Set ``section.KEY = VALUE`` in a rig file (created if missing), keeping its comments; in
    ``values``, the :data:`COST_KEYS` go to ``[cost]``."""
    import tomlkit

    if section == "values" and COST_KEYS & set(assignments):
        cost = {k: v for k, v in assignments.items() if k in COST_KEYS}
        set_rig_values(name, cost, section="cost")
        assignments = {k: v for k, v in assignments.items() if k not in COST_KEYS}
        if not assignments:
            return load_rig(name)

    p = rig_path(name)
    p.parent.mkdir(parents=True, exist_ok=True)
    doc = tomlkit.parse(p.read_text(encoding="utf-8")) if p.exists() else tomlkit.document()
    if not section:  # top-level keys (cluster)
        for k, v in assignments.items():
            doc[k] = v
    else:
        if section not in doc:
            doc[section] = tomlkit.table()
        for k, v in assignments.items():
            doc[section][k] = _typed(section, k, v)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(tomlkit.dumps(doc), encoding="utf-8")
    rig = load_rig_text(tmp, name)
    tmp.replace(p)
    return rig


def _typed(section: str, key: str, value: str) -> Any:
    if section == "values":
        return value
    models: dict[str, type[BaseModel]] = {"hardware": RigHardware, "cost": RigCost}
    model = models.get(section, Capabilities)
    field = model.model_fields.get(key)
    if field is None:
        raise ConfigError(f"unknown {section} key {key!r}")
    ann = str(field.annotation)
    if "bool" in ann:
        return value.lower() in ("1", "true", "yes")
    if "int" in ann:
        return int(value)
    if "float" in ann:
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"{section}.{key}: expected a number, got {value!r}") from None
    if "list" in ann:
        return [x for x in value.split(",") if x]
    return value


def load_rig_text(path: Path, name: str, *, keep: bool = False) -> Rig:
    """Parse and validate a rig file; a rejected temporary file (``keep=False``) is removed."""
    import tomllib

    from pydantic import ValidationError

    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
        data.setdefault("name", name)
        return Rig.model_validate(data)
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        if not keep:
            path.unlink(missing_ok=True)
        if isinstance(exc, ValidationError):
            e = exc.errors()[0]
            raise ConfigError(f"rig {name}: {'.'.join(str(x) for x in e['loc'])}: {e['msg']}") from None
        raise ConfigError(f"{path}: invalid TOML: {exc}", hint="fix the rig file or re-create it") from None
