"""``lair plan`` text: per node, every step with its exact command line."""

from __future__ import annotations

import shlex

from lair.plan.steps import DETECT, NodePlan, Plan, Step

__all__ = ["render_text"]


def _step(i: int, s: Step) -> list[str]:
    head = f"  {i:2d}. [{s.stage.value}] {s.name}"
    if s.on_failure == "warn":
        head += " (on failure: warn)"
    if s.timeout_s and s.kind == "exec":
        head += f" (timeout {s.timeout_s:g}s)"
    lines = [head]
    if s.argv:
        lines.append("      $ " + shlex.join(s.argv))
    if s.kind == "env_file":
        folder = (s.path or "").rsplit("/", 1)[0]
        lines.append(
            f"      mkdir -m 700 {folder}; write {s.path} (mode {s.mode}): {', '.join(s.env_names or [])}"
        )
    lines = _launch_extras(s, lines)
    if s.kind == "upload":
        lines.append(f"      copy {s.source} -> {s.path} (mode {s.mode})")
    if s.script:
        lines += ["      | " + ln for ln in s.script.rstrip().splitlines()]
    if s.manifest:
        lines.append(
            f"      + one read-only -v per line of {s.manifest.replace(';', ' and ')}, before the image"
        )
    if s.urls is not None:
        what = ", ".join(s.urls) if s.urls else "the process stays up"
        lines.append(f"      wait up to {s.timeout_s:g}s: {what}")
    if s.kind == "stop" and not s.argv:
        lines.append(f"      SIGTERM the process group, SIGKILL after {s.timeout_s:g}s, verify it is gone")
    if s.kind == "cleanup":
        lines.append(f"      rm -rf {s.path}")
    return lines


def _env_value(name: str, value: str) -> str:
    if value.startswith(DETECT):
        return f"{name}=<interface toward {value[len(DETECT) :]}, found on the node>"
    return f"{name}={value}"


_PULL = {"missing": "if the node lacks it", "always": "always", "never": "never: fail if it is missing"}


def _launch_extras(s: Step, lines: list[str]) -> list[str]:
    """What the secrets file, port check, pull and authenticated readiness do."""
    if s.kind == "env_file" and s.secrets:
        lines[-1] = lines[-1].replace("): ", "), read-only at /run/lair/secrets, sourced inside: ", 1)
    if s.kind == "check":
        ports = ", ".join(str(p) for p in s.ports or [])
        lines.append(f"      fail if a process listens on port {ports} (naming it)")
    if s.kind == "pull":
        binary = (s.argv or ["docker"])[0]
        lines[-1] = f"      {binary} pull {_PULL[s.pull or 'missing']}"
        lines[-1] += f" (progress on stderr, timeout {s.timeout_s or 0:g}s)"
    if s.auth_env:
        lines.append(f"      with Authorization: Bearer ${s.auth_env}; /v1/models must list the served model")
    return lines


def _node(n: NodePlan, run_gpus: str) -> list[str]:
    mark = " (would take: not leased)" if n.would_take else ""
    gpus = f", gpus {n.gpus}" if n.gpus and n.gpus != run_gpus else ""
    out = [f"node {n.name} ({n.address}) rank {n.rank}, {n.role}{gpus}{mark}"]
    if n.engine_env:
        shown = [_env_value(k, v) for k, v in n.engine_env.items()]
        out.append(f"  engine networking: {', '.join(shown)}")
    for i, s in enumerate(n.steps, 1):
        out += _step(i, s)
    return out


def render_text(p: Plan) -> str:
    r = p.run
    out = [
        f"run {r.run_id}: {r.name}",
        f"  engine {r.engine}, runtime {r.runtime}" + (f", image {r.image}" if r.image else ""),
        f"  endpoint {r.endpoint}   master {r.master_addr}:{r.master_port}",
        f"  gpus {r.gpus}" + (f", pull {r.pull}" if r.image else ""),
        f"  env: {', '.join(sorted(r.env)) or '-'}"
        + (f"  (secret: {', '.join(r.secret_env)})" if r.secret_env else ""),
    ]
    if not r.trusted:
        out.append("  untrusted recipe (accepted)")
    out += [f"  left out: {d}" for d in r.dropped]
    out += [f"  added: {a}" for a in r.added]
    for n in p.nodes:
        out += ["", *_node(n, r.gpus)]
    return "\n".join(out) + "\n"
