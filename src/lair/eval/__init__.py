"""lair's quality evaluation: scores next to speed, over the served OpenAI-compatible API.

    from lair.eval import EvalOptions, run_eval
    result = run_eval("http://127.0.0.1:8000", EvalOptions(suites=["gsm8k"], limit=200, repeat=3))

Built on EleutherAI's lm-evaluation-harness (the ``lair[eval]`` extra) through its API-model
backends: suites in :mod:`lair.eval.suites`, one harness run in :mod:`lair.eval.harness`, the
needle in :mod:`lair.eval.needle`, generated code only ever in :mod:`lair.eval.sandbox`, the result
model in :mod:`lair.eval.records`.
"""

from lair.eval.evaluate import run_eval
from lair.eval.records import EVAL_SCHEMA_VERSION, EvalOptions, EvalResult, SampleRecord, SuiteResult

__all__ = ["EVAL_SCHEMA_VERSION", "EvalOptions", "EvalResult", "SampleRecord", "SuiteResult", "run_eval"]
