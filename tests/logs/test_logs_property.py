"""Property tests of the log reader, the shell-script reader and validate (issue 17 item 4): for
arbitrary text lines and mutated real-shaped logs, the outcome is a clean ``PolytraceError`` or a
valid result, never another exception, never a non-finite number in a result."""

from __future__ import annotations

import math

from _verl_logs import Run, step_records, write_log
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polytrace.calibrate.logconfig import Overrides
from polytrace.calibrate.validate import validate
from polytrace.errors import PolytraceError
from polytrace.logs import parse_value, read_log
from polytrace.logs.script import Shell, Unresolved, run_script
from polytrace.logs.shell_lines import logical_lines, split_words

FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.function_scoped_fixture])

KEYS = ["timing_s/gen", "timing_s/old_log_prob", "timing_s/ref", "timing_s/update_actor", "timing_s/step",
        "timing_s/testing", "timing/gen", "response_length/mean", "response_length/max", "response_length/min",
        "response_length/clip_ratio", "prompt_length/mean", "prompt_length/max", "perf/total_num_tokens",
        "perf/throughput", "perf/time_per_step", "global_seqlen/mean", "x"]
OVERRIDE_KEYS = ["data.train_batch_size", "actor_rollout_ref.rollout.n", "trainer.n_gpus_per_node", "trainer.nnodes",
                 "data.max_prompt_length", "data.max_response_length", "actor_rollout_ref.model.path",
                 "actor_rollout_ref.rollout.tensor_model_parallel_size",
                 "actor_rollout_ref.rollout.gpu_memory_utilization",
                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "actor_rollout_ref.rollout.name"]
SHELLISH = st.sampled_from(["$", "${", "}", "$(", ")", "`", "'", '"', "\\", "#", "=", ":-", ":=", "$((", "))",
                            "[", "]", " ", "\t", "++ ", "+ ", "```", "export ", "A=", "$A", "${A:-8}", "$1", "{'"])
VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["nan", "inf", "-inf", "0", "-1", "1e308", "1e9", "abc", "[1,2]", "two", "", "True", "null",
                     "$GPUS", "${N:-4}", "Qwen/Qwen2.5-7B", "'q'"]),
    st.text(max_size=12))


def _finite_everywhere(obj, path="result") -> None:
    if isinstance(obj, float):
        assert math.isfinite(obj), path
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _finite_everywhere(v, f"{path}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _finite_everywhere(v, f"{path}[{i}]")


step_lines = st.builds(
    lambda prefix, step, pairs: f"{prefix}step:{step} - " + " - ".join(f"{k}:{v}" for k, v in pairs),
    st.sampled_from(["", "(TaskRunner pid=1) ", "\x1b[36m(main_task pid=2)\x1b[0m ", "x"]),
    st.one_of(st.integers(min_value=-3, max_value=40), st.just(10**30)),
    st.lists(st.tuples(st.sampled_from(KEYS), VALUES), max_size=8))
launch_lines = st.builds(
    lambda head, pairs, tail: head + " ".join(f"{k}={v}" for k, v in pairs) + tail,
    st.sampled_from(["python3 -m verl.trainer.main_ppo ", "+ python3 -m recipe.dapo.main_dapo ",
                     "bash run.sh \"", "A=1 python -m verl.trainer.main_ppo \\", "```bash"]),
    st.lists(st.tuples(st.sampled_from(OVERRIDE_KEYS), VALUES), max_size=6),
    st.sampled_from(["", "\"", " \\", " # comment", " $@"]))
any_line = st.one_of(step_lines, launch_lines, st.text(max_size=80),
                     st.lists(SHELLISH, max_size=12).map("".join))


@FAST
@given(lines=st.lists(any_line, max_size=25))
def test_reader_never_raises_anything_but_a_clean_error(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("p") / "fuzz.log"
    path.write_text("\n".join(lines), encoding="utf-8", errors="surrogatepass")
    try:
        log = read_log(path)
    except PolytraceError as exc:
        assert "\n" not in str(exc)
        return
    assert log.steps and all(s.timings for s in log.steps)
    _ = log.config, log.mode, log.stages()


@FAST
@given(text=st.one_of(st.text(max_size=200), st.lists(SHELLISH, max_size=40).map("".join)))
def test_shell_reader_is_total(text):
    sh = Shell()
    sh.vars["A"] = "x y"
    value = sh.expand(text)
    assert isinstance(value, (str, Unresolved))
    for word in split_words(text):
        assert all(isinstance(seg, str) and q in ("", "'", '"') for seg, q in word)
    commands, _ = run_script(logical_lines(text.splitlines()))
    for c in commands:
        assert all(isinstance(w, (str, Unresolved)) for w in c.words)
    parse_value(text)


BASE = Run(steps=16, prompts=8, n=2, gpus_per_node=2, max_prompt=128, max_response=128, micro_per_gpu=2,
           mini_batch=4, test_freq=5, save_freq=8)


@SLOW
@given(edits=st.lists(st.tuples(st.integers(min_value=0, max_value=15), st.sampled_from(KEYS), VALUES),
                      min_size=1, max_size=6),
       duplicate=st.one_of(st.none(), st.integers(min_value=0, max_value=15)),
       drop=st.one_of(st.none(), st.integers(min_value=0, max_value=15)))
def test_validate_on_mutated_logs_is_clean_and_finite(tmp_path_factory, edits, duplicate, drop):
    recs = step_records(BASE)
    for i, key, raw in edits:
        try:
            value = float(raw)
        except ValueError:
            value = raw
        recs[i]["metrics"][key] = value
    if duplicate is not None:
        recs.append({"step": recs[duplicate]["step"], "metrics": dict(recs[duplicate]["metrics"])})
    if drop is not None:
        recs.pop(drop)
    path = write_log(tmp_path_factory.mktemp("m") / "m.log", BASE, records=recs)
    try:
        res = validate(path, overrides=Overrides(gpu="h100"), calibrate_steps=5)
    except PolytraceError as exc:
        assert "\n" not in str(exc)
        return
    _finite_everywhere(res)
