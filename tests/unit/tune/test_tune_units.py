"""lair tune's pure parts: knobs written into a recipe (comments kept), the space file, objectives,
limits and guards worked out by hand, the Pareto front, the checks that refuse a candidate before
launch (xllamacpp's own parser, llama.cpp's slot context, lair fit on a GPU), the engine's reason read
from real logs, the study's records and resume, the winner file's [meta.tune], and the CLI's errors."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from lair.errors import ConfigError
from lair.recipe import load_text
from lair.tune import load_space, parse_constraint, parse_guard, parse_objective, parse_params
from lair.tune.check import failure_reason, fit_check, parse_check
from lair.tune.result import pareto, trial_rows, trials_table, write_winner
from lair.tune.search_loop import gate
from lair.tune.space import UNSET, apply, current_value

ROOT = Path(__file__).resolve().parents[3]
TINY = (ROOT / "examples" / "tiny-cpu" / "recipe.toml").read_text()


def test_flags_replaced_where_written_and_added_to_args() -> None:
    out = apply(
        TINY, {"--parallel": "4", "--batch-size": "512", "--metrics": "false", "env.OMP_NUM_THREADS": "1"}
    )
    doc = tomllib.loads(out)
    ep = doc["entrypoint"]
    assert ep[ep.index("--parallel") + 1] == "4" and "--metrics" not in ep
    assert doc["args"] == ["--batch-size", "512"] and doc["env"] == {"OMP_NUM_THREADS": "1"}
    assert "# --ctx 8192: room for lair bench's calibration prompts" in out  # comments kept
    assert out.count("\n") == TINY.count("\n") + 3  # args line, [env] and its key (plus a blank)
    back = apply(out, {"--batch-size": UNSET, "--metrics": "true", "max_model_len": "4096"})
    doc = tomllib.loads(back)
    assert doc["args"] == ["--metrics"] and doc["max_model_len"] == 4096  # removed above: added back to args


def test_current_values_in_every_spelling() -> None:
    doc = tomllib.loads(
        'engine = "vllm"\nentrypoint = ["vllm", "serve", "m", "--max_num_seqs=8", "--enforce-eager"]\n'
        'args = ["-tp", "2"]\nmax_model_len = 512\n[env]\nA = "1"\n'
    )
    assert current_value(doc, "--max-num-seqs") == "8"  # vLLM reads --max_num_seqs as --max-num-seqs
    assert current_value(doc, "--enforce-eager") == "true" and current_value(doc, "-tp") == "2"
    assert current_value(doc, "max_model_len") == "512" and current_value(doc, "env.A") == "1"
    assert current_value(doc, "--kv-cache-dtype") == UNSET and current_value(doc, "env.B") == UNSET
    out = tomllib.loads(apply('entrypoint = ["x", "--max_num_seqs=8"]\n', {"--max-num-seqs": "4"}))
    assert out["entrypoint"] == ["x", "--max_num_seqs=4"]


def test_space_from_params_and_file(tmp_path: Path) -> None:
    s = parse_params(["--parallel=1,2,4", "env.X=a,b", "--kv-cache-dtype=auto,fp8"])
    assert s.size() == 12 and [p.kind for p in s.params] == ["flag", "env", "flag"]
    assert [p.changes_output for p in s.params] == [False, False, True]
    with_base = s.with_baseline({"--parallel": "8", "env.X": "a", "--kv-cache-dtype": UNSET})
    assert with_base.params[0].values == ("8", "1", "2", "4") and with_base.size() == 4 * 2 * 3
    f = tmp_path / "space.toml"
    f.write_text(
        'sampler = "grid"\nseed = 3\nbudget = "10m"\n'
        '[[param]]\nname = "--ubatch-size"\nrange = [128, 512, 128]\n'
    )
    space = load_space(f)
    assert (
        space.params[0].values == ("128", "256", "384", "512") and space.sampler == "grid" and space.seed == 3
    )
    assert space.settings == {"budget": "10m"}
    f.write_text('[[param]]\nname = "--x"\nvalue = [1]\n')
    with pytest.raises(ConfigError, match=r"param\[0\]\.value: unknown key"):
        load_space(f)
    for bad, match in [
        (["--parallel"], "expected NAME=V1"),
        (["--p=1", "--p=2"], "given twice"),
        (["env.1X=a"], "not an environment"),
    ]:
        with pytest.raises(ConfigError, match=match):
            parse_params(bad)


CELLS = [
    {
        "context": 512,
        "concurrency": 1,
        "decode_tok_s_per_stream": 100.0,
        "ttft_ms_p90": 40.0,
        "prefill_tok_s": 9000.0,
    },
    {
        "context": 512,
        "concurrency": 4,
        "decode_tok_s_per_stream": 60.0,
        "ttft_ms_p90": 250.0,
        "prefill_tok_s": 8000.0,
    },
]


def test_objectives_limits_guards_by_hand() -> None:
    o = parse_objective("decode_tok_s_per_stream@ctx=512,c=1")
    assert o.goal == "max" and o.value(CELLS) == 100.0
    w = parse_objective("0.7*decode_tok_s_per_stream@ctx=512,c=1 + 0.3*decode_tok_s_per_stream@ctx=512,c=4")
    assert w.value(CELLS) == pytest.approx(0.7 * 100 + 0.3 * 60)
    assert parse_objective("ttft_ms_p90@ctx=512,c=4").goal == "min"
    assert parse_objective("min ttft_ms_p90@ctx=512,c=4").value(CELLS) == 250.0
    assert parse_objective("decode_tok_s_per_stream@ctx=2048,c=1").value(CELLS) is None
    lim = parse_constraint("ttft_ms_p90@ctx=512,c=4 <= 200")
    assert (
        lim.holds(CELLS) == (False, 250.0)
        and parse_constraint("ttft_ms_p90@ctx=512,c=4<=300").holds(CELLS)[0]
    )
    assert parse_guard("gsm8k:2.5").points == 2.5
    with pytest.raises(ConfigError, match="unknown metric 'decode_tok_s_per_strem'") as exc:
        parse_objective("decode_tok_s_per_strem@ctx=512,c=1")
    assert exc.value.hint.startswith("did you mean decode_tok_s_per_stream?")
    with pytest.raises(ConfigError, match="different directions"):
        parse_objective("decode_tok_s_per_stream@ctx=512,c=1 + ttft_ms_p90@ctx=512,c=1")
    for bad in ("gsm8k", ":2", "gsm8k:-1"):
        with pytest.raises(ConfigError):
            parse_guard(bad)


def test_pareto_front_by_hand() -> None:
    a, b = (
        parse_objective("max decode_tok_s_per_stream@ctx=1,c=1"),
        parse_objective("min ttft_ms_p90@ctx=1,c=1"),
    )
    rows = [
        {"trial": 0, "outcome": "ok", "values": [100.0, 50.0]},
        {"trial": 1, "outcome": "ok", "values": [120.0, 80.0]},  # faster, slower first token: on the front
        {"trial": 2, "outcome": "ok", "values": [90.0, 60.0]},  # worse than 0 on both
        {"trial": 3, "outcome": "ok", "values": [100.0, 50.0]},  # equal to 0: neither dominates
        {"trial": 4, "outcome": "failed", "values": None},
    ]
    assert pareto(rows, [a, b]) == {0, 1, 3}


def test_xllamacpp_parser_refuses_and_takes() -> None:
    base = ["python3", "-m", "lair.engines.xllamacpp_server", "--model", "m.gguf"]
    got = parse_check(
        [
            [*base, "--parallel", "4", "-b", "512"],
            [*base, "--batch-size", "auto"],
            [*base, "--flash-attn"],
            None,
        ]
    )
    assert got[0] is None
    assert got[1] is not None and "argument --batch-size/-b: invalid int value: 'auto'" in got[1]
    assert got[2] is not None and "unrecognized arguments: --flash-attn" in got[2]
    assert got[3] == "not checked"


def _recipe(extra: str) -> object:
    return load_text(
        'engine = "xllamacpp"\nruntime = "native"\nmodel = "/m.gguf"\nmax_model_len = 8192\n'
        f'entrypoint = ["python3", "-m", "lair.engines.xllamacpp_server", "--parallel", "{extra}"]\n'
    )


def test_slot_context_and_lair_fit(tmp_path: Path) -> None:
    reason, _ = fit_check(_recipe("16"), tmp_path, None, context=544, concurrency=4)
    assert reason == "each of the 16 slots holds 512 tokens (8192 / 16); the objective's cells need 544"
    assert fit_check(_recipe("8"), tmp_path, None, context=544, concurrency=4)[0] is None  # 1024 >= 544
    from lair.fit import Hardware, find_device

    gpu = Hardware(find_device("rtx-4090"), gpus=1)  # 24 GB
    facts = (ROOT / "examples" / "tiny-vllm-cpu" / "recipe.toml").read_text()
    big = facts.replace("weight_bytes = 869120", "weight_bytes = 60000000000")  # 15B fp32: 60 GB
    big = big.replace("total_params = 434560", "total_params = 15000000000")
    big = big.replace("active_params = 434560", "active_params = 15000000000")
    for text, verdict in ((facts, None), (big, "lair fit: fits only with offload")):
        r = load_text(text.replace("{MODEL_DIR}", str(tmp_path / "none")))
        reason, what = fit_check(r, tmp_path, gpu, context=128, concurrency=1)
        assert (reason or "").startswith(verdict or "") and (reason is None) == (verdict is None), (
            reason,
            what,
        )
        assert what.startswith("lair fit")
    small_ram = Hardware(find_device("rtx-4090"), gpus=1, host_ram_bytes=8 << 30)
    reason, _ = fit_check(r, tmp_path, small_ram, context=128, concurrency=1)
    assert reason is not None and reason.startswith("lair fit: does not fit: "), reason


def test_engine_reason_from_real_logs() -> None:
    vllm = """(APIServer pid=1) INFO non-default args: {'max_num_seqs': 0}
  File "/v/lib/python3.11/site-packages/pydantic/_internal/_dataclasses.py", line 121, in __init__
pydantic_core._pydantic_core.ValidationError: 1 validation error for SchedulerConfig
max_num_seqs
  Input should be greater than or equal to 1 [type=greater_than_equal, input_value=0, input_type=int]
    For further information visit https://errors.pydantic.dev/2.14/v/greater_than_equal
"""
    assert failure_reason(vllm, "x") == (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for SchedulerConfig | max_num_seqs"
        " | Input should be greater than or equal to 1"
        " [type=greater_than_equal, input_value=0, input_type=int]"
    )
    llama = (
        "0.00.01 I srv init: loading\n/ll/llama-context.cpp:2289: GGML_ASSERT(n_outputs_max <= x) failed\n"
        "[New LWP 5]\n#0 0x1 in f ()\n"
    )
    assert failure_reason(llama, "x") == "/ll/llama-context.cpp:2289: GGML_ASSERT(n_outputs_max <= x) failed"
    assert failure_reason("all fine\n", "launch failed") == "launch failed"


def test_study_records_rows_and_resume(tmp_path: Path) -> None:
    import optuna

    from lair.tune.study import open_study, record, stale_to_failed

    space = parse_params(["--p=1,2,4"], sampler="random", seed=1)
    obj = [parse_objective("max decode_tok_s_per_stream@ctx=1,c=1")]
    study = open_study(tmp_path, "s", space, ["max"])
    outcomes = [("ok", [10.0]), ("ok", [30.0]), ("refused", None), ("failed", None)]
    for outcome, values in outcomes:
        t = study.ask()
        p = str(t.suggest_categorical("--p", ["1", "2", "4"]))
        record(study, t, {"outcome": outcome, "knobs": {"--p": p}, "values": values, "reason": "r"}, values)
    study.ask()  # left running by a Ctrl-C
    again = open_study(tmp_path, "s", space, ["max"])
    assert stale_to_failed(again) == 1
    rows = trial_rows(again, obj)
    assert [r["outcome"] for r in rows] == ["ok", "ok", "failed", "refused", "interrupted"]
    assert [r["values"] for r in rows[:2]] == [[30.0], [10.0]]
    assert again.trials[-1].state == optuna.trial.TrialState.FAIL
    table = trials_table(rows, obj)
    assert table.splitlines()[0].split() == [
        "trial",
        "knobs",
        "max",
        "decode_tok_s_per_stream@ctx=1,c=1",
        "outcome",
        "note",
    ]


def test_the_table_names_the_trials_the_sampler_spent_on_tried_knobs(tmp_path: Path) -> None:
    """A duplicate (the sampler proposing trial 0's knobs again) runs nothing and has no row; the table
    says which numbers those were, so trial 1 is not silently missing."""
    from lair.tune.result import duplicate_trials
    from lair.tune.study import open_study, record

    space = parse_params(["--p=1,2"], sampler="random", seed=1)
    obj = [parse_objective("max decode_tok_s_per_stream@ctx=1,c=1")]
    study = open_study(tmp_path, "d", space, ["max"])
    for attrs, values in (
        ({"outcome": "ok", "knobs": {"--p": "1"}, "values": [5.0]}, [5.0]),
        ({"outcome": "duplicate", "reason": "same as trial 0"}, None),
        ({"outcome": "ok", "knobs": {"--p": "2"}, "values": [7.0]}, [7.0]),
    ):
        t = study.ask()
        t.suggest_categorical("--p", ["1", "2"])
        record(study, t, attrs, values)
    rows, dups = trial_rows(study, obj), duplicate_trials(study)
    assert [r["trial"] for r in rows] == [2, 0] and dups == [{"trial": 1, "reason": "same as trial 0"}]
    last = trials_table(rows, obj, duplicates=dups).splitlines()[-1]
    assert last == "not run, the sampler proposed tried knobs again: trial 1 (same as trial 0)"
    assert "not run" not in trials_table(rows, obj)


def test_winner_file_keeps_comments_and_loads(tmp_path: Path) -> None:
    from lair.errors import RecipeError
    from lair.recipe import load_recipe

    src = tmp_path / "recipe.toml"
    src.write_text(TINY)
    stamp = {
        "study": "tiny-cpu-1", "tuned_from": "tiny-cpu", "from_sha256": "0" * 64, "objectives": ["max x"],
        "sampler": "grid", "trials": 3, "refused": 1, "failed": 1, "best_trial": 2,
        "knobs": {"--parallel": "4"}, "start_values": [1.0], "best_values": [2.0],
    }  # fmt: skip
    out = write_winner(src, tmp_path / "recipe.tuned.toml", {"--parallel": "4"}, stamp)
    r = load_recipe(out)
    assert r.meta.tune is not None and r.meta.tune.knobs == {"--parallel": "4"} and r.meta.slug is None
    assert r.meta.title == "Tiny CPU demo (xllamacpp) (tuned)"
    assert "# The before_serve hook builds the model" in out.read_text()
    with pytest.raises(RecipeError):
        write_winner(src, tmp_path / "bad.toml", {"--parallel": "4"}, {**stamp, "from_sha256": "nope"})
    assert not (tmp_path / "bad.toml").exists()


def test_guard_verdict_by_hand() -> None:
    g = parse_guard("lair_arith:10")
    assert g.verdict(25.0, 25.0) is None and g.verdict(15.0, 25.0) is None  # exactly 10 lost passes
    assert g.verdict(30.0, 25.0) is None
    assert g.verdict(0.0, 25.0) == (
        "quality lair_arith:10: 0 points on lair_arith against 25 at the start (25 lost, more than 10)"
    )
    assert g.verdict(14.9, 25.0) == (
        "quality lair_arith:10: 14.9 points on lair_arith against 25 at the start (10.1 lost, more than 10)"
    )
    assert 100 * 10 / 30 - 100 * 7 / 30 > 10  # 3 of 30 samples lost: 10.000000000000004 in floats
    assert g.verdict(100 * 7 / 30, 100 * 10 / 30) is None  # ... and 10 points by hand
    assert g.verdict(None, 25.0) == "quality lair_arith:10: no score on lair_arith"
    # a start without a score vouches for nothing: every guarded candidate fails, with the start's reason
    assert g.verdict(25.0, None) == (
        "quality lair_arith:10: the starting recipe has no score on lair_arith to compare with"
    )
    assert g.verdict(25.0, None, "cannot connect").endswith("to compare with (cannot connect)")


def test_xllamacpp_kv_types_and_grammar() -> None:
    from lair.engines.xllamacpp_server import _params, build_parser

    base = ["python3", "-m", "lair.engines.xllamacpp_server", "--model", "m.gguf"]
    ok, bad = parse_check([[*base, "-ctk", "q8_0", "--cache-type-v", "f16", "--grammar", "root ::= [^6]*"],
                           [*base, "--cache-type-k", "fp8"]])  # fmt: skip
    assert ok is None
    assert bad is not None and "argument --cache-type-k/-ctk: invalid choice: 'fp8'" in bad
    pytest.importorskip("xllamacpp")
    p = _params(build_parser().parse_args([*base[3:], "-ctk", "q8_0", "--grammar", "root ::= [^6]*"]))
    assert (p.cache_type_k.name, p.cache_type_v.name) == ("GGML_TYPE_Q8_0", "GGML_TYPE_F16")
    assert p.sampling.grammar.grammar == "root ::= [^6]*" and p.sampling.grammar.type.name.endswith("_USER")
    plain = _params(build_parser().parse_args(base[3:]))
    assert plain.sampling.grammar.grammar == ""  # no --grammar: llama.cpp's default, none


def test_guard_on_an_engine_that_does_not_answer(tmp_path: Path) -> None:
    """The guard's eval against a port nothing listens on: the start's score is None with the eval's
    reason, a guarded candidate is rejected with it (the tune goes on), a candidate whose knobs
    change no output is not evaluated."""
    import socket

    from lair.launch import LaunchResult
    from lair.tune import TuneOptions
    from lair.tune.search_loop import Candidate, Search
    from lair.tune.study import open_study

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: connections are refused
    space = parse_params(["--cache-type-k=q8_0", "--threads=1"], sampler="random", seed=1).with_baseline(
        {"--cache-type-k": UNSET, "--threads": "2"}
    )
    obj = parse_objective("max decode_tok_s_per_stream@ctx=256,c=1")
    opts = TuneOptions(ROOT / "examples" / "tiny-cpu" / "recipe.toml", space, [obj])
    opts.guard, opts.guard_limit = parse_guard("lair_arith:10"), 2
    study = open_study(tmp_path, "g", space, ["max"])
    s = Search(opts, study, tmp_path, TINY, gate(opts))
    res = LaunchResult(run_id="r", endpoint=f"http://127.0.0.1:{port}/v1", state="running")
    study.enqueue_trial({"--cache-type-k": UNSET, "--threads": "2"}, user_attrs={"baseline": True})
    start = Candidate(study.ask(), {"--cache-type-k": UNSET, "--threads": "2"}, TINY)
    assert s._guard(start, res) == (None, None)
    why = study.user_attrs["guard_baseline_error"]
    assert study.user_attrs["guard_baseline"] is None and f"127.0.0.1:{port}" in why, why
    kv = Candidate(study.ask(), {"--cache-type-k": "q8_0", "--threads": "2"}, "")
    reason, ev = s._guard(kv, res)
    assert ev is None and reason == f"quality lair_arith:10: the eval failed: {why}"
    assert kv.trial.user_attrs["guard_score"] is None
    threads = Candidate(study.ask(), {"--cache-type-k": UNSET, "--threads": "1"}, "")
    assert s._guard(threads, res) == (None, None) and "guard_score" not in threads.trial.user_attrs


def test_tpe_sees_a_rejected_trial_as_infeasible(tmp_path: Path) -> None:
    """The default sampler (TPE) with no deprecated ``constraints_func`` (warnings are errors here):
    a rejected trial's limits reach Optuna as the trial's constraints, > 0 meaning infeasible."""
    from optuna.samplers import TPESampler

    from lair.tune.study import open_study, record

    space = parse_params(["--p=1,2,4"], seed=1)
    assert space.sampler == "tpe"
    study = open_study(tmp_path, "t", space, ["max"])
    assert isinstance(study.sampler, TPESampler)
    for outcome, limits in (("ok", [0.0]), ("rejected", [0.0, 1.0])):
        t = study.ask()
        t.suggest_categorical("--p", ["1", "2", "4"])
        record(study, t, {"outcome": outcome, "values": [5.0], "constraint_values": limits}, [5.0])
    ok, rejected = study.trials
    assert ok.constraints == {"c0": 0.0}
    assert rejected.constraints == {"c0": 0.0, "c1": 1.0}
    assert [t.number for t in study.best_trials] == [0]  # the infeasible one is never the best
