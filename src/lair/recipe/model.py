"""The recipe model: one strict pydantic model for the launch config and the publication metadata.

The launch keys are top-level (so a launcher recipe such as ``examples/dsv41-flash-exl3-2x`` loads
unchanged); the publication metadata lives under ``[meta]``; typed placeholders under
``[placeholders.NAME]``. Every model rejects unknown keys. Cross-field rules live in
:mod:`lair.recipe.validate`, not here, so that all problems of a file are reported together.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

__all__ = [
    "ENGINES",
    "ULIMIT_NAMES",
    "Credit",
    "Download",
    "EngineInfo",
    "EnvKnob",
    "FitLayout",
    "Hardware",
    "Hook",
    "Meta",
    "ModelFactsTable",
    "Mount",
    "Needle",
    "PerfRow",
    "Placeholder",
    "Quality",
    "Recipe",
    "Requirements",
    "Revision",
    "SourceStamp",
    "TuneStamp",
    "parse_size",
    "ulimit_numbers",
]

ENGINES = ("vllm", "sglang", "llamacpp", "xllamacpp", "trtllm", "exllamav3", "tabbyapi", "ollama", "custom")
SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([bkmgt]?)i?b?$", re.IGNORECASE)
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PLACEHOLDER_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SLUG_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
ULIMIT_NAMES = (
    "core",
    "cpu",
    "data",
    "fsize",
    "locks",
    "memlock",
    "msgqueue",
    "nice",
    "nofile",
    "nproc",
    "rss",
    "rtprio",
    "rttime",
    "sigpending",
    "stack",
)
"""The names ``docker run --ulimit`` and ``podman run --ulimit`` take."""
_ULIMIT_PART = re.compile(r"-1|unlimited|\d{1,19}|\{[A-Za-z_][A-Za-z0-9_]*\}")


def parse_size(text: str | int) -> int:
    """Bytes in a Docker-style size: ``"9g"`` -> 9 GiB, ``"512m"``, ``"1.5g"``, ``"2048"`` (bytes)."""
    if isinstance(text, int):
        return text
    m = SIZE_RE.fullmatch(text.strip())
    if not m:
        raise ValueError(f"not a size: {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def ulimit_numbers(text: str) -> list[int]:
    """The soft and hard limits of a ulimit value ``soft[:hard]`` (-1 for unlimited); ValueError
    for anything else (placeholders, ``{NAME}``, are left to their rendered value)."""
    parts = text.split(":")
    if not 1 <= len(parts) <= 2 or not all(_ULIMIT_PART.fullmatch(p) for p in parts):
        raise ValueError(f"not a ulimit value: {text!r} (a number, -1 or unlimited, optionally soft:hard)")
    return [-1 if p in ("-1", "unlimited") else int(p) for p in parts if not p.startswith("{")]


def _ulimit_value(text: str) -> str:
    nums = ulimit_numbers(text)
    if len(nums) == 2 and nums[1] != -1 and (nums[0] == -1 or nums[0] > nums[1]):
        raise ValueError(f"soft limit {nums[0]} is above the hard limit {nums[1]} in {text!r}")
    return text


UlimitName = Annotated[str, StringConstraints(pattern="^(" + "|".join(ULIMIT_NAMES) + ")$")]
UlimitValue = Annotated[str, AfterValidator(_ulimit_value)]


class Strict(BaseModel):
    """Base of every recipe model: unknown keys are errors, types are not coerced."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_default=False, frozen=False)


EnvName = Annotated[str, StringConstraints(pattern=ENV_NAME_RE.pattern)]
PlaceholderName = Annotated[str, StringConstraints(pattern=PLACEHOLDER_NAME_RE.pattern)]
Size = Annotated[str, Field(description='A size like "9g", "512m", "1.5g"')]


def _hook_from_shorthand(v: Any) -> Any:
    """A hook may be an inline shell string; a single hook may stand without a list."""
    if isinstance(v, str):
        return {"run": v}
    return v


def _listify(v: Any) -> Any:
    if isinstance(v, str | dict):
        return [v]
    return v


class Hook(Strict):
    """A hook step: a named script from the script library, or inline shell."""

    script: str | None = Field(None, description="name of a script in the script library (built-in or user)")
    run: str | None = Field(None, description="inline shell, run with sh -c on each node")
    on_failure: Literal["fail", "warn"] = Field("fail", description="fail the launch, or warn and go on")
    timeout_s: float = Field(600.0, gt=0, description="seconds before the hook is killed")
    args: list[str] = Field(default_factory=list, description="arguments passed to a named script")


HookItem = Annotated[Hook, BeforeValidator(_hook_from_shorthand)]
HookList = Annotated[list[HookItem], BeforeValidator(_listify)]


class Mount(Strict):
    """A bind mount: host path -> container path."""

    host: str = Field(description="path on the node")
    container: str = Field(description="absolute path in the container")
    read_only: bool = Field(False, description="mount read-only")


class Placeholder(Strict):
    """A value the recipe needs from the user's rig, written ``{NAME}`` in launch fields."""

    type: Literal["path", "secret", "int", "host", "string"] = Field("string", description="value type")
    description: str = ""
    default: str | int | None = Field(
        None, description="used when the rig gives no value (never for secrets)"
    )
    example: str | None = None


class Credit(Strict):
    who: str
    role: str = ""
    link: str | None = None


class Hardware(Strict):
    gpu_model: str | None = None
    gpu_count: int | None = Field(None, ge=0)
    vram_gb: float | None = Field(None, gt=0, description="per GPU")
    host_ram_gb: float | None = Field(None, gt=0)
    disk_gb: float | None = Field(None, gt=0)
    cpu: str | None = None
    interconnect: str | None = None
    notes: str | None = None


_FORMAT_RE = r"^[A-Za-z0-9_.:+-]{1,40}$"
MAX_PARAMS = 10**14
"""Most parameters a model's facts may claim (100 T)."""
MAX_WEIGHT_BYTES = 10**15
"""Most weight bytes a model's facts may claim (1 PB)."""
BITS_PER_WEIGHT = (0.5, 64.0)
"""Weight bytes per parameter a model's facts may imply, in bits (ternary packs to fp64)."""


def _dim(limit: int, description: str, low: int = 1) -> Any:
    return Field(ge=low, le=limit, description=description)


def _opt(limit: int, description: str) -> Any:
    return Field(0, ge=0, le=limit, description=description)


class ModelFactsTable(Strict):
    """The model's facts ``lair fit`` reads from a model folder (``config.json``, weight headers, a
    GGUF's metadata), written into the recipe so that a registry can size and rate it without the
    weights. ``lair push`` fills the table from what ``lair fit`` reads (the local Hugging Face cache,
    the ``fit/`` folder beside the recipe, or ``--model DIR``); the field names are those of
    ``lair.fit.ModelFacts``. The facts are the author's: a registry shows them and uses them for its
    fit widget and the % of roofline of reported rows, but checks uploaded reports only against a
    model table of its own (docs/registry-reports.md)."""

    name: str = Field("", max_length=200, description="the model the facts describe (repo id or file)")
    architecture: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="config.json model_type")
    n_layers: int = _dim(1024, "transformer layers (num_hidden_layers)")
    hidden_size: int = _dim(1 << 18, "residual width (hidden_size)")
    n_heads: int = _dim(4096, "attention heads (num_attention_heads)")
    n_kv_heads: int = _dim(4096, "key/value heads (num_key_value_heads; = n_heads without GQA)")
    head_dim: int = _dim(1 << 14, "width of one attention head")
    vocab_size: int = _dim(1 << 24, "tokenizer vocabulary")
    intermediate_size: int = _dim(1 << 20, "dense MLP width (intermediate_size)", low=0)
    total_params: int = _dim(MAX_PARAMS, "all parameters")
    active_params: int = _dim(MAX_PARAMS, "parameters a token uses (total minus unrouted experts)")
    weight_bytes: int = _dim(MAX_WEIGHT_BYTES, "bytes of the weights as an engine loads them")
    expert_bytes: int = _opt(MAX_WEIGHT_BYTES, "part of weight_bytes: all routed experts")
    embedding_bytes: int = _opt(MAX_WEIGHT_BYTES, "part of weight_bytes: the untied input embedding")
    extra_bytes: int = _opt(MAX_WEIGHT_BYTES, "part of weight_bytes: towers not run per token (vision)")
    weight_format: str = Field("bf16", pattern=_FORMAT_RE, description='e.g. "bf16", "fp8", "exl3-3bpw"')
    compute_format: Literal["bf16", "fp8", "fp4"] = Field("bf16", description="GEMM math the weights allow")
    tied_embeddings: bool = Field(False, description="input embedding shared with the output head")
    attention: Literal["mha", "gqa", "mqa", "mla"] = "gqa"
    kv_lora_rank: int = _opt(1 << 16, "MLA: latent width cached per token and layer")
    qk_rope_head_dim: int = _opt(1 << 14, "MLA: rotary part of a query/key head")
    qk_head_dim: int = _opt(1 << 14, "per-head query/key width (attention FLOPs)")
    v_head_dim: int = _opt(1 << 14, "per-head value width")
    index_topk: int = _opt(1 << 24, "sparse attention: tokens each query attends to")
    index_head_dim: int = _opt(1 << 14, "sparse attention: the indexer's key width")
    index_n_heads: int = _opt(4096, "sparse attention: the indexer's heads")
    sliding_window: int = _opt(1 << 24, "tokens a sliding-window layer attends to")
    sliding_layers: int = _opt(1024, "layers with a sliding window")
    n_experts: int = _opt(1 << 16, "routed experts per MoE layer")
    experts_per_token: int = _opt(1 << 10, "routed experts a token uses")
    n_shared_experts: int = _opt(1 << 10, "shared experts per MoE layer")
    moe_layers: int = _opt(1024, "layers with routed experts")
    moe_intermediate_size: int = _opt(1 << 20, "one expert's MLP width")
    max_context: int = _opt(1 << 27, "the model's own context limit (max_position_embeddings)")
    kv_cache_dtype: str | None = Field(
        None, pattern=_FORMAT_RE, description="a KV format the checkpoint asks for"
    )
    source: str = Field("", max_length=200, description="where the facts were read (written by lair push)")

    @model_validator(mode="after")
    def _consistent(self) -> ModelFactsTable:
        problems = [
            why
            for bad, why in (
                (self.active_params > self.total_params, "active_params is above total_params"),
                (self.n_kv_heads > self.n_heads, "n_kv_heads is above n_heads"),
                (self.experts_per_token > self.n_experts, "experts_per_token is above n_experts"),
                (self.moe_layers > self.n_layers, "moe_layers is above n_layers"),
                (self.sliding_layers > self.n_layers, "sliding_layers is above n_layers"),
                (
                    self.expert_bytes + self.embedding_bytes + self.extra_bytes >= self.weight_bytes,
                    "expert_bytes + embedding_bytes + extra_bytes leave no dense weights in weight_bytes",
                ),
                (
                    self.active_params
                    <= self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2),
                    "active_params is not above the embedding table(s) vocab_size x hidden_size",
                ),
                (self.attention == "mla" and not self.kv_lora_rank, "attention mla needs kv_lora_rank"),
            )
            if bad
        ]
        bits = 8 * self.weight_bytes / self.total_params
        if not BITS_PER_WEIGHT[0] <= bits <= BITS_PER_WEIGHT[1]:
            problems.append(
                f"weight_bytes / total_params is {bits:.2f} bits per weight "
                f"(a model has {BITS_PER_WEIGHT[0]} to {BITS_PER_WEIGHT[1]:.0f})"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self


class FitLayout(Strict):
    """Placement ``lair fit`` cannot read from the launch fields (what a ``fit/layout.toml`` beside a
    recipe holds: settings a launch script makes). Used with :class:`ModelFactsTable` for the fit
    widget and the % of roofline of reported rows only; never for checking uploaded reports."""

    kv_cache_dtype: str | None = Field(None, pattern=_FORMAT_RE, description='KV format, e.g. "fp8", "fp4"')
    sliding_kv_cache_dtype: str | None = Field(None, pattern=_FORMAT_RE, description="KV of sliding layers")
    dcp: int | None = Field(None, ge=1, le=64, description="decode context parallel size")
    spec_tokens: int | None = Field(None, ge=0, le=16, description="speculative tokens per step")
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1, description="memory fraction")
    max_model_len: int | None = Field(None, ge=1, le=1 << 27, description="tokens per sequence")
    cpu_offload_gb: float | None = Field(
        None, ge=0, le=1 << 20, description="weights in host RAM, GiB per GPU"
    )
    expert_offload: bool | None = Field(None, description="routed experts may live in host RAM")
    expert_cache_slots: int | None = Field(None, ge=0, le=1 << 20, description="GPU slots caching experts")
    ssd_offload: bool | None = Field(None, description="experts beyond host RAM are read from SSD")
    ssd_tables_gb: float | None = Field(None, ge=0, le=1 << 20, description="tables read from SSD, GB")


class EngineInfo(Strict):
    name: str | None = None
    version: str | None = None
    install_note: str | None = None


class EnvKnob(Strict):
    name: str
    value: str = ""
    description: str = ""


class PerfRow(Strict):
    """One row of the "speed by context" table."""

    context: int = Field(ge=1, description="prompt tokens")
    concurrency: int | None = Field(None, ge=1, description="parallel streams")
    prefill_tok_s: float | None = Field(None, gt=0)
    decode_tok_s: float | None = Field(None, gt=0, description="per stream at concurrency 1, else aggregate")
    decode_tok_s_per_stream: float | None = Field(None, gt=0)
    ttft_ms: float | None = Field(None, gt=0)
    provenance: Literal["reported", "verified"] = "reported"
    note: str = ""


class Quality(Strict):
    suite: str
    score: float
    unit: str = "%"
    note: str = ""


class Needle(Strict):
    context: int = Field(ge=1)
    depth: float | None = Field(None, ge=0, le=1)
    found: bool
    seconds: float | None = Field(None, ge=0)
    peak_vram_gb: float | None = Field(None, gt=0)
    note: str = ""


class Requirements(Strict):
    driver_floor: str | None = None
    cuda: str | None = None
    image: str | None = None
    ram_gb: float | None = Field(None, gt=0)
    disk_gb: float | None = Field(None, gt=0)
    notes: str | None = None
    source: str | None = None


class Download(Strict):
    name: str
    url: str
    size: str | None = None
    sha256: str | None = None


class Revision(Strict):
    note: str
    version: str | None = None
    date: str | None = None


class SourceStamp(Strict):
    """Where a recipe file came from: written by ``lair pull`` (and into fetched URLs). A local file
    with a stamp is untrusted as coming from that source; editing the file does not remove it."""

    url: str | None = Field(None, description="the http(s) URL the recipe was fetched from")
    registry: str | None = Field(None, description="the registry's base URL the recipe was pulled from")
    slug: str | None = Field(None, description="the recipe's slug on that registry")
    revision: int | None = Field(None, ge=1, description="the pulled revision")
    sha256: str = Field(
        pattern=r"^[0-9a-f]{64}$",
        description="sha256 of the recipe as pulled (its canonical model, this stamp left out)",
    )
    pulled_at: str | None = Field(None, description="local time of the pull")

    @model_validator(mode="after")
    def _one_source(self) -> SourceStamp:
        if (self.url is None) == (self.registry is None):
            raise ValueError("a source stamp names either url or registry (with slug and revision)")
        if self.registry is not None and (self.slug is None or self.revision is None):
            raise ValueError("a registry source stamp needs slug and revision")
        return self

    @property
    def origin(self) -> str:
        """The source an acceptance is bound to: the URL, or the registry revision's address."""
        if self.url is not None:
            return self.url
        return f"{(self.registry or '').rstrip('/')}/recipes/{self.slug}@{self.revision}"


class TuneStamp(Strict):
    """How ``lair tune`` found this recipe: written by the tune into the winning recipe."""

    study: str = Field(max_length=200, description="the tune's study name (its folder and Optuna study)")
    tuned_from: str = Field(max_length=300, description="the starting recipe: its slug, else its file name")
    from_sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="sha256 of the starting recipe's model")
    objectives: list[str] = Field(
        min_length=1, max_length=4, description="what was optimised (goal and cells)"
    )
    constraints: list[str] = Field(
        default_factory=list, max_length=16, description="limits a result had to meet"
    )
    guard: str | None = Field(None, max_length=200, description="quality guard SUITE:POINTS, if any")
    sampler: str = Field(max_length=20, description="Optuna sampler: tpe, grid or random")
    trials: int = Field(ge=0, description="trials counted: results, rejected, refused and failed")
    refused: int = Field(0, ge=0, description="candidates refused before launch (recipe, parser, fit)")
    failed: int = Field(0, ge=0, description="candidates that failed to launch or to serve the bench")
    best_trial: int = Field(ge=0, description="the trial this recipe's knobs come from")
    knobs: dict[str, str] = Field(
        default_factory=dict, description="the knobs searched and the values chosen"
    )
    start_values: list[float] = Field(
        default_factory=list, description="the objectives of the starting recipe"
    )
    best_values: list[float] = Field(default_factory=list, description="the objectives of the best trial")
    date: str | None = Field(None, max_length=40, description="when the tune finished (ISO 8601)")


class Meta(Strict):
    """Publication metadata, in the order of a recipe page."""

    title: str | None = None
    slug: str | None = None
    summary: str | None = None
    submission: Literal["community", "official", "verified"] | None = None
    tags: list[str] = Field(default_factory=list)
    license: str | None = None
    credits: list[Credit] = Field(default_factory=list)
    listed_by: str | None = None
    upstream_weights: str | None = Field(None, description="upstream weights repo, e.g. org/model")
    model_repo: str | None = Field(None, description="the exact weights served (quantized pack, revision)")
    quantization: str | None = None
    model_facts: ModelFactsTable | None = Field(
        None, description="the model's facts for lair fit (filled by lair push; see ModelFactsTable)"
    )
    fit_layout: FitLayout | None = Field(
        None, description="placement lair fit cannot read from the launch fields (fit/layout.toml)"
    )
    hardware: Hardware | None = None
    engine: EngineInfo | None = None
    launch_command: str | None = None
    env_knobs: list[EnvKnob] = Field(default_factory=list)
    flags: str | None = None
    notes: str | None = None
    max_context: int | None = Field(None, ge=1)
    kv_pool_tokens: int | None = Field(None, ge=1)
    performance: list[PerfRow] = Field(default_factory=list)
    performance_notes: str | None = None
    quality: list[Quality] = Field(default_factory=list)
    needles: list[Needle] = Field(default_factory=list)
    requirements: Requirements | None = None
    downloads: list[Download] = Field(default_factory=list)
    revisions: list[Revision] = Field(default_factory=list)
    tune: TuneStamp | None = Field(None, description="how lair tune found this recipe (written by lair tune)")
    source: SourceStamp | None = Field(
        None,
        description="provenance stamp of a pulled recipe (written by lair pull; "
        "a file with one is untrusted, see docs/launch.md#trust)",
    )

    @field_validator("slug")
    @classmethod
    def _slug(cls, v: str | None) -> str | None:
        if v is not None and not SLUG_RE.fullmatch(v):
            raise ValueError("a slug is lowercase letters, digits and single hyphens")
        return v


class Recipe(Strict):
    """A lair recipe: launch config (top level) + publication metadata (``meta``)."""

    schema_version: int = Field(1, ge=1, le=1, description="recipe format version")
    engine: str = Field(description="serving engine: " + ", ".join(ENGINES))
    runtime: Literal["docker", "podman", "native"] = Field(
        "docker", description="docker (default), podman, or native (the entrypoint as a plain process)"
    )
    docker_image: str | None = Field(None, description="container image (docker/podman runtimes)")
    model: str = Field("", description="model path or id passed to the engine; may be empty")
    name: str = Field("", description="run name")
    served_model_name: str | None = None
    required_nodes: int = Field(1, ge=1, description="nodes the recipe runs on")
    cluster: str | None = Field(None, description="named cluster in the user's inventory")
    tensor_parallel_size: int = Field(1, ge=1)
    pipeline_parallel_size: int = Field(1, ge=1)
    data_parallel_size: int = Field(1, ge=1)
    distributed_backend: Literal["mp", "ray"] | None = Field(None, description="multi-node wiring")
    shm_size: Size | None = None
    devices: list[str] = Field(default_factory=list, description="devices passed to the container")
    gpus: str | None = Field(
        None,
        description='GPUs of a container: "all", a count ("2"), device ids ("0,1") or "none"; '
        "GPU engines (vllm, sglang, trtllm, exllamav3, tabbyapi) default to all",
    )
    privileged: bool = False
    cap_add: list[str] = Field(default_factory=list, description="kernel capabilities added (--cap-add)")
    ipc: Literal["host", "private", "shareable"] | None = None
    pid: Literal["host"] | None = Field(None, description='"host": the host\'s PID namespace (--pid host)')
    ulimits: dict[UlimitName, UlimitValue] = Field(
        default_factory=dict,
        description='container ulimits, soft[:hard] (-1 or "unlimited": no limit), '
        'e.g. {memlock = "-1", nofile = "65536:65536"}; names: ' + ", ".join(ULIMIT_NAMES),
    )
    memory_limit: Size | None = Field(None, description="container memory cap; swap is turned off with it")
    cpus: float | None = Field(None, gt=0)
    extra_mounts_manifest: str | None = Field(
        None, description="file of 'host<TAB>container' lines: one read-only bind mount per file"
    )
    entrypoint: list[str] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)
    port: int = Field(8000, ge=1, le=65535, description="engine port")
    host: str = Field("0.0.0.0", description="address the engine binds")
    health_path: str = "/health"
    ready_timeout_s: float = Field(900.0, gt=0)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    kv_cache_dtype: str | None = None
    max_model_len: int | None = Field(None, ge=1)
    metrics_flags: bool = Field(
        True,
        description="add the engine flags lair's cache and metrics proofs need (vLLM "
        "--enable-prompt-tokens-details; SGLang --enable-metrics --enable-cache-report)",
    )
    before_serve: HookList = Field(default_factory=list)
    after_stop: HookList = Field(default_factory=list)
    extra_mounts: list[Mount] = Field(default_factory=list)
    env: dict[EnvName, str] = Field(default_factory=dict, description="container / process environment")
    placeholders: dict[PlaceholderName, Placeholder] = Field(default_factory=dict)
    meta: Meta = Field(default_factory=Meta)

    @field_validator("entrypoint", mode="before")
    @classmethod
    def _entrypoint(cls, v: Any) -> Any:
        if isinstance(v, str):
            import shlex

            return shlex.split(v)
        return v

    @field_validator("shm_size", "memory_limit")
    @classmethod
    def _size(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                parse_size(v)
            except ValueError:
                raise ValueError(f"not a size: {v!r}") from None
        return v

    # ---- derived values -------------------------------------------------------------------
    @property
    def shm_size_bytes(self) -> int | None:
        return parse_size(self.shm_size) if self.shm_size else None

    @property
    def memory_limit_bytes(self) -> int | None:
        return parse_size(self.memory_limit) if self.memory_limit else None

    @property
    def world_size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def display_name(self) -> str:
        return self.name or self.meta.title or self.model or self.engine
