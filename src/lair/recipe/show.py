"""A human summary of a recipe, in the order of its published page."""

from __future__ import annotations

from lair.recipe.model import Meta, Recipe
from lair.table import text_table

__all__ = ["perf_table", "summary_text"]


def _fmt(v: float | int | None, unit: str = "") -> str:
    if v is None:
        return "—"
    s = f"{v:,.0f}" if isinstance(v, int) or float(v).is_integer() else f"{v:,.1f}"
    return s + unit


PERF_HEAD = ("context", "conc", "prefill tok/s", "decode tok/s", "TTFT ms", "provenance", "note")


def perf_table(meta: Meta) -> list[str]:
    """The speed-by-context rows as aligned text lines (indented two spaces), notes included."""
    rows = [
        [f"{r.context:,}", _fmt(r.concurrency), _fmt(r.prefill_tok_s), _fmt(r.decode_tok_s), _fmt(r.ttft_ms),
         r.provenance, r.note or ""]
        for r in meta.performance
    ]  # fmt: skip
    return ["  " + line for line in text_table(PERF_HEAD, rows).splitlines()]


def _meta_lines(m: Meta, floor: str | None = None) -> list[str]:
    out: list[str] = []
    if m.credits:
        out.append("recipe by " + "; ".join(c.who + (f" ({c.role})" if c.role else "") for c in m.credits))
    if m.upstream_weights:
        out.append(f"upstream weights: {m.upstream_weights}")
    if m.license:
        out.append(f"license {m.license}")
    if m.tags:
        out.append("tags: " + " ".join(m.tags))
    if m.summary:
        out += ["", m.summary]
    if m.launch_command:
        out += ["", "Launch command", f"  {m.launch_command}"]
    if m.env_knobs:
        out += ["", "env"] + [
            f"  {k.name}={k.value}" + (f"  # {k.description}" if k.description else "") for k in m.env_knobs
        ]
    for title, text in (("flags", m.flags), ("notes", m.notes)):
        if text:
            out += ["", title, f"  {text}"]
    if m.engine and (m.engine.name or m.engine.install_note):
        out += ["", "Engine", f"  {m.engine.name or ''} {m.engine.version or ''}".rstrip()]
        if m.engine.install_note:
            out.append(f"  install: {m.engine.install_note}")
    if m.model_repo or m.quantization:
        out += ["", "Model", f"  {m.model_repo or ''} {m.quantization or ''}".rstrip()]
    hw = m.hardware
    if hw:
        gpu = f"{hw.gpu_count or '?'}x {hw.gpu_model or '?'}" + (
            f" {_fmt(hw.vram_gb)} GB" if hw.vram_gb else ""
        )
        extra = ", ".join(
            x
            for x in (
                f"{_fmt(hw.host_ram_gb)} GB RAM" if hw.host_ram_gb else "",
                f"{_fmt(hw.disk_gb)} GB disk" if hw.disk_gb else "",
                hw.cpu or "",
            )
            if x
        )
        out += ["", "Hardware", f"  {gpu}" + (f"; {extra}" if extra else "")]
    if m.max_context:
        out += ["", "Context", f"  max context: {m.max_context:,} tokens"]
    if m.kv_pool_tokens:
        out += ["", "KV pool", f"  {m.kv_pool_tokens:,} tokens across concurrent requests"]
    if m.performance:
        out += ["", "Speed by context", *perf_table(m)]
    if m.performance_notes:
        out.append(f"  notes: {m.performance_notes}")
    if m.quality:
        out += ["", "Quality"] + [f"  {q.suite}: {q.score}{q.unit}" for q in m.quality]
    if m.needles:
        out += ["", "Needle"] + [
            f"  {n.context:,} tokens: {'found' if n.found else 'NOT found'}"
            + (f" in {n.seconds} s" if n.seconds else "")
            for n in m.needles
        ]
    rq = m.requirements
    stated = rq.model_dump(exclude_none=True) if rq else {}
    if floor is not None and (stated or not floor.startswith("unknown")):
        stated["driver_floor"] = floor  # the computed floor, as the registry's page shows it
    if stated:
        out += ["", "Install requirements"]
        out += [f"  {k}: {v}" for k, v in stated.items()]
    if m.downloads:
        out += ["", "Downloads"] + [f"  {d.name}: {d.url}" for d in m.downloads]
    if m.revisions:
        out += ["", "Revision notes"] + [
            f"  {r.version or ''} {r.date or ''} {r.note}".strip() for r in m.revisions
        ]
    return out


def summary_text(r: Recipe, driver_floor: str | None = None) -> str:
    """The recipe in the order of its page; ``driver_floor``: the NVIDIA driver floor's text as
    :func:`lair.fit.driver.driver_floor` computes it for the registry's page (this layer cannot
    import it), in place of the floor the recipe states."""
    from lair.recipe import secret_env_names

    m = r.meta
    out = [m.title or r.display_name]
    if m.submission:
        out.append(f"{m.submission} submission")
    out += _meta_lines(m, driver_floor)
    if r.placeholders:
        out += ["", "Placeholders (map them to your rig)"]
        out += [
            f"  {{{n}}}  {p.type}  {p.description}"
            + (f" (default {p.default})" if p.default is not None else "")
            for n, p in r.placeholders.items()
        ]
    out += ["", "Launch config", f"  engine {r.engine}, runtime {r.runtime}, image {r.docker_image or '—'}"]
    out.append(
        f"  nodes {r.required_nodes}"
        + (f" of cluster {r.cluster}" if r.cluster else "")
        + f", TP {r.tensor_parallel_size} x PP {r.pipeline_parallel_size}"
        + (f", backend {r.distributed_backend}" if r.distributed_backend else "")
    )
    limits = ", ".join(
        x
        for x in (
            f"shm {r.shm_size}" if r.shm_size else "",
            f"memory {r.memory_limit} (no swap)" if r.memory_limit else "",
            f"cpus {r.cpus:g}" if r.cpus else "",
            f"devices {', '.join(r.devices)}" if r.devices else "",
        )
        if x
    )
    if limits:
        out.append(f"  {limits}")
    for mnt in r.extra_mounts:
        out.append(f"  mount {mnt.host} -> {mnt.container}" + (" (ro)" if mnt.read_only else ""))
    if r.extra_mounts_manifest:
        out.append(f"  per-file mounts from {r.extra_mounts_manifest}")
    secrets = secret_env_names(r)
    if r.env:
        out.append(f"  env: {len(r.env)} variables" + (f" ({len(secrets)} secret)" if secrets else ""))
    for stage in ("before_serve", "after_stop"):
        for h in getattr(r, stage):
            what = f"script {h.script}" if h.script else f"sh: {(h.run or '').splitlines()[0][:70]}"
            out.append(f"  {stage}: {what}" + (" (warn on failure)" if h.on_failure == "warn" else ""))
    return "\n".join(out)
