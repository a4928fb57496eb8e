"""``lair new``: a commented recipe that checks out of the box."""

from __future__ import annotations

__all__ = ["scaffold"]

TEMPLATE = """\
# {title}
# Launch config (top level) + publication metadata ([meta]). `lair check` validates it,
# `lair plan` shows exactly what `lair launch` will run.
engine = "{engine}"
docker_image = "{image}"
model = "{model}"
name = "{name}"
required_nodes = {nodes}
tensor_parallel_size = {tp}
pipeline_parallel_size = 1
{backend}port = 8000
shm_size = "16g"
args = ["--max-model-len", "32768", "--gpu-memory-utilization", "0.90"]

[env]
HF_HUB_OFFLINE = "1"

[placeholders.MODEL_DIR]
type = "path"
description = "folder (or HF cache snapshot) holding the weights on each node"

[[extra_mounts]]
host = "{{MODEL_DIR}}"
container = "{{MODEL_DIR}}"
read_only = true

[meta]
title = "{title}"
tags = []
license = "MIT"
"""


def scaffold(engine: str, image: str, model: str, nodes: int, tp: int) -> str:
    backend = 'distributed_backend = "mp"\n' if nodes > 1 else ""
    title = f"{model.strip('{}')} on {nodes} node(s), TP{tp}"
    return TEMPLATE.format(
        engine=engine,
        image=image,
        model=model,
        name="my-recipe",
        nodes=nodes,
        tp=tp,
        backend=backend,
        title=title,
    )
