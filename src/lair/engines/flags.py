"""The serve flags lair writes for an engine, one table per engine version.

Each :class:`Flag` is keyed by the engine's own argument name (argparse ``dest``: what vLLM's
``EngineArgs`` / SGLang's ``ServerArgs`` call the field) and lists every spelling the engine's parser
accepts for it (short forms such as vLLM's ``-tp``, ``-n``, ``-r``; negations such as
``--no-enable-prompt-tokens-details``). A flag the recipe already writes in any spelling is never
added again. ``tests/integration/engines`` builds the engines' real parsers and checks that every
entry here names an existing argument with exactly these spellings, and that every plan parses.

    VLLM_FLAGS.add(argv, "tensor_parallel_size", 2)    # appends --tensor-parallel-size 2
    VLLM_FLAGS.present(["-tp", "2"], "tensor_parallel_size")  # True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["SGLANG_FLAGS", "VLLM_FLAGS", "Flag", "FlagTable", "spelled"]


@dataclass(frozen=True)
class Flag:
    """One engine argument: its long name first, then the other spellings its parser accepts."""

    spellings: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.spellings[0]


def spelled(argv: Sequence[str], spellings: Sequence[str]) -> bool:
    """True if any spelling appears as ``--flag``, ``--flag=value`` (or ``--flag_name``, which
    vLLM's parser reads as ``--flag-name``)."""
    for a in argv:
        if not a.startswith("-"):
            continue
        word = a.split("=", 1)[0]
        if word.startswith("--"):
            word = "--" + word[2:].replace("_", "-")
        if word in spellings:
            return True
    return False


@dataclass(frozen=True)
class FlagTable:
    """The flags of one engine version that lair may write, by the engine's argument name."""

    engine: str
    version: str
    flags: Mapping[str, Flag]
    kv_cache_dtypes: tuple[str, ...] = field(default=())

    def present(self, argv: Sequence[str], dest: str) -> bool:
        return spelled(argv, self.flags[dest].spellings)

    def add(self, argv: list[str], dest: str, value: object = None) -> None:
        """Append ``--flag [value]`` unless it is written already; None/False values add nothing."""
        if value is None or value is False or self.present(argv, dest):
            return
        argv.append(self.flags[dest].name)
        if value is not True:
            argv.append(str(value))


def _t(**flags: tuple[str, ...]) -> dict[str, Flag]:
    return {dest: Flag(spellings) for dest, spellings in flags.items()}


VLLM_FLAGS = FlagTable(
    "vllm",
    "0.32.0",
    _t(
        host=("--host",),
        port=("--port",),
        served_model_name=("--served-model-name",),
        tensor_parallel_size=("--tensor-parallel-size", "-tp"),
        pipeline_parallel_size=("--pipeline-parallel-size", "-pp"),
        data_parallel_size=("--data-parallel-size", "-dp"),
        gpu_memory_utilization=("--gpu-memory-utilization", "--device-memory-utilization"),
        kv_cache_dtype=("--kv-cache-dtype",),
        max_model_len=("--max-model-len",),
        distributed_executor_backend=("--distributed-executor-backend",),
        nnodes=("--nnodes", "-n"),
        node_rank=("--node-rank", "-r"),
        master_addr=("--master-addr",),
        master_port=("--master-port",),
        headless=("--headless",),
        enable_prompt_tokens_details=("--enable-prompt-tokens-details", "--no-enable-prompt-tokens-details"),
        disable_log_stats=("--disable-log-stats",),
    ),
    kv_cache_dtypes=(
        "auto",
        "bfloat16",
        "float16",
        "fp8",
        "fp8_ds_mla",
        "fp8_e4m3",
        "fp8_e5m2",
        "fp8_inc",
        "fp8_per_token_head",
        "int4_per_token_head",
        "int8_per_token_head",
        "nvfp4",
        "nvfp4_4over6",
        "nvfp4_ds_mla",
        "turboquant_3bit_nc",
        "turboquant_4bit_nc",
        "turboquant_k3v4_nc",
        "turboquant_k8v4",
        "ultraquant_4bit",
    ),
)
"""vLLM 0.32.0 (``vllm serve``), as read from its ``EngineArgs`` / ``FrontendArgs`` parser."""

SGLANG_FLAGS = FlagTable(
    "sglang",
    "0.5.23",
    _t(
        model_path=("--model-path", "--model"),
        host=("--host",),
        port=("--port",),
        served_model_name=("--served-model-name",),
        tp_size=("--tp-size", "--tensor-parallel-size"),
        pp_size=("--pp-size", "--pipeline-parallel-size"),
        dp_size=("--dp-size", "--data-parallel-size"),
        mem_fraction_static=("--mem-fraction-static",),
        kv_cache_dtype=("--kv-cache-dtype",),
        context_length=("--context-length",),
        nnodes=("--nnodes",),
        node_rank=("--node-rank",),
        dist_init_addr=("--dist-init-addr", "--nccl-init-addr"),
        enable_metrics=("--enable-metrics",),
        enable_cache_report=("--enable-cache-report",),
    ),
    kv_cache_dtypes=("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16"),
)
"""SGLang 0.5.23 (``python -m sglang.launch_server``), as read from its ``ServerArgs.add_cli_args``."""
