"""Run with sparkrun's venv Python (not lair's): print, as JSON, what sparkrun's own recipe loader
and validator make of each file given (its errors; the fields it read)."""

import json
import sys

from sparkrun.core.recipe import Recipe  # type: ignore[import-not-found]
from sparkrun.core.validation import ERROR, validate_recipe  # type: ignore[import-not-found]

out = []
for path in sys.argv[1:]:
    r = Recipe.load(path)
    issues = validate_recipe(r, include_unmapped_keys=False)
    out.append(
        {
            "name": r.name,
            "errors": [i.to_dict()["message"] for i in issues if i.severity == ERROR],
            "model": r.model,
            "runtime": r.runtime,
            "container": r.container,
            "min_nodes": r.min_nodes,
            "max_nodes": r.max_nodes,
            "defaults": r.defaults,
            "env": r.env,
            "command": r.command,
            "pre_exec": list(r.pre_exec),
            "executor_config": r.executor_config,
            "description": r.description,
            "runtime_config": r.runtime_config,
        }
    )
json.dump(out, sys.stdout, default=str)
