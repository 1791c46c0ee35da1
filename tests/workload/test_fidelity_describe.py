"""Fidelity of the built-in profiles against their own traces, and the describe statistics."""

from __future__ import annotations

import numpy as np
import pytest

from polytrace import load_trace
from polytrace.workload.describe import describe, describe_batch, rollout_tail_share
from polytrace.workload.fidelity import GOAL_KS, GOAL_P99_REL_ERR, compare, fidelity, group_max_mean_ratio
from polytrace.workload.profiles import get_profile
from polytrace.workload.trace.batch import Batch

OWN_TRACES = {
    "dapo-math-32b": ("verl/profile/packed_length_log/20260610_092349", 32768),
    "deepcoder-14b": ("rllm/profile/packed_length_log", None),
    "video-vl-7b": ("verl-video/profile/packed_length_log", None),
    "search-r1-7b": ("search_r1/profile/multiturn_workload_log", None),
}


@pytest.mark.parametrize("name", sorted(OWN_TRACES))
def test_profile_meets_fidelity_goals_on_its_trace(polytrace_data, name):
    folder, cap = OWN_TRACES[name]
    trace = load_trace(polytrace_data / folder, max_response_len=cap)
    result = fidelity(get_profile(name), trace, replicas=4)
    pooled = result["pooled"]
    assert pooled["ks"] <= GOAL_KS, pooled
    assert pooled["p99_rel_err"] <= GOAL_P99_REL_ERR, pooled
    assert abs(pooled["cap_share_sampled"] - pooled["cap_share_real"]) <= 0.05
    assert pooled["group_ratio_median_rel_err"] <= 0.15
    # the Search-R1 trace's last step holds 47 of 2,048 trajectories: flagged and left out
    assert result["partial_steps"] == ([5] if name == "search-r1-7b" else [])
    assert len(result["per_step"]) == len(trace.steps) - len(result["partial_steps"])


def _batch(resp, groups, prompt=10, cap=100):
    resp = np.asarray(resp, dtype=np.int64)
    return Batch(prompt_lens=np.full(resp.size, prompt, dtype=np.int64), response_lens=resp,
                 group_ids=np.asarray(groups, dtype=np.int64), capped=resp >= cap, max_response_len=cap)


def test_fidelity_detects_a_wrong_profile(polytrace_data):
    """A profile of another workload must fail the goals: the test can fail."""
    trace = load_trace(polytrace_data / "rllm/profile/packed_length_log")
    pooled = fidelity(get_profile("dapo-math-32b"), trace, replicas=2)["pooled"]
    assert pooled["ks"] > 0.5 and not pooled["meets_goals"]


def test_compare_identical_is_zero():
    b = _batch([1, 5, 9, 20, 40, 100], [0, 0, 1, 1, 2, 2])
    out = compare([b], [[b]])
    assert out["ks"] == 0 and out["wasserstein"] == 0 and out["p99_rel_err"] == 0
    assert out["cap_share_real"] == out["cap_share_sampled"] == pytest.approx(1 / 6)


def test_group_ratio():
    b = _batch([10, 30, 5, 5], [0, 0, 1, 1])
    assert group_max_mean_ratio(b).tolist() == [1.5, 1.0]


def test_rollout_tail_share():
    # 10 sequences: fewer than 10% (< 1) active never happens while decoding. 20 sequences,
    # 18 of length 10 and 2 of 100: from iteration 10 on 2 of 20 are active, not fewer than 10%.
    # 19 of length 10 and 1 of 100: 1 of 20 active for iterations 10-99, 90% of them.
    assert rollout_tail_share(np.r_[np.full(9, 10), 100]) == 0.0
    assert rollout_tail_share(np.r_[np.full(18, 10), 100, 100]) == 0.0
    assert rollout_tail_share(np.r_[np.full(19, 10), 100]) == pytest.approx(0.9)
    assert rollout_tail_share(np.full(5, 7)) == 0.0


def test_describe_batch_known_values():
    b = _batch([10] * 19 + [70], np.repeat(np.arange(5), 4), prompt=10)
    d = describe_batch(b)
    assert d["tokens"] == 460 and d["response_tokens"] == 260 and d["groups"] == 5
    assert d["max_over_mean"] == pytest.approx(70 / 13)
    assert d["top10pct_token_share"] == pytest.approx(80 / 260)
    assert d["padding_waste"] == pytest.approx(1 - 460 / (20 * 80))
    assert d["rollout_tail_share"] == pytest.approx(60 / 70)


def test_describe_profile_and_trace(polytrace_data):
    d = describe(get_profile("search-r1-7b"), steps=[0, 1])
    assert d["steps"] == [0, 1] and d["summary"]["sequences"] == 2048
    assert 2.0 < d["summary"]["turns_per_trajectory"] < 3.5
    t = describe(load_trace(polytrace_data / "verl/profile/packed_length_log/20260610_092349"))
    assert len(t["per_step"]) == 6 and t["summary"]["sequences"] == 768
    # the long tail the project is about: the recorded DAPO steps are dominated by the tail
    assert t["summary"]["rollout_tail_share"] > 0.6


# --------------------------------------------------------------------------- partial steps (issue 15, item 6)


def _partial_trace(tmp_path):
    """Steps 0 and 1 with 4 groups of 4, step 2 with one group of much longer responses."""
    import json

    d = tmp_path / "run"
    d.mkdir()
    for step, groups, lens in ((0, 4, [10, 20, 30, 40]), (1, 4, [10, 20, 30, 40]), (2, 1, [900, 950, 990, 999])):
        lines = [json.dumps({"step": step, "input": 50, "output": lens, "n_sampling": 4}) for _ in range(groups)]
        (d / f"packed_lengths_step_{step}.jsonl").write_text("\n".join(lines) + "\n")
    return load_trace(d, max_response_len=1000)


def test_describe_leaves_partial_steps_out_of_the_means(tmp_path):
    from polytrace.workload.describe import format_describe

    trace = _partial_trace(tmp_path)
    d = describe(trace)
    assert d["partial_steps"] == [2] and [r["partial"] for r in d["per_step"]] == [False, False, True]
    assert d["summary"]["response_mean"] == pytest.approx(25.0)  # before: (25 + 25 + 959.75) / 3
    assert d["summary"]["sequences"] == 16
    kept = describe(trace, include_partial=True)
    assert kept["summary"]["response_mean"] == pytest.approx((25 + 25 + 959.75) / 3)
    text = format_describe(d, per_step=True)
    assert "note: step 2 (4 responses) is partial (the median step has 16): left out of the statistics" in text
    assert "2 (partial)" in text
    assert "kept in the statistics (--include-partial)" in format_describe(kept)


def test_fidelity_leaves_partial_steps_out(tmp_path):
    from polytrace.workload.fidelity import format_fidelity

    trace = _partial_trace(tmp_path)
    profile = get_profile("deepcoder-14b")
    out = fidelity(profile, trace, replicas=1)
    assert out["partial_steps"] == [2] and out["partial_step_responses"] == [4]
    assert [r["step"] for r in out["per_step"]] == [0, 1] and out["pooled"]["n_real"] == 32
    both = fidelity(profile, trace, replicas=1, include_partial=True)
    assert [r["step"] for r in both["per_step"]] == [0, 1, 2] and both["pooled"]["n_real"] == 36
    assert "note: step 2 (4 responses) is partial" in format_fidelity(out)


def test_cli_describe_and_fidelity_flag_the_partial_search_r1_step(polytrace_data, capsys):
    from polytrace.cli import main

    folder = str(polytrace_data / "search_r1/profile/multiturn_workload_log")
    assert main(["describe", folder]) == 0
    out = capsys.readouterr().out
    assert "step 5 (47 responses) is partial (the median step has 2,048)" in out
    assert "max response 3,000 (recorded in the trace)" in out
    assert main(["describe", folder, "--include-partial", "--json"]) == 0
    import json

    d = json.loads(capsys.readouterr().out)
    assert d["partial_steps"] == [5] and d["include_partial"] is True
    assert d["summary"]["sequences"] == pytest.approx((5 * 2048 + 47) / 6)


def test_cli_describe_max_response_len_is_for_traces(polytrace_data, capsys):
    from polytrace.cli import main

    dapo = str(polytrace_data / "verl/profile/packed_length_log/20260610_092349")
    assert main(["describe", dapo]) == 0
    assert "max response 10,112 (the longest response: no pile-up" in capsys.readouterr().out
    assert main(["describe", dapo, "--max-response-len", "32768"]) == 0
    assert "max response 32,768 (stated by the caller" in capsys.readouterr().out
    assert main(["describe", "dapo-math-32b", "--max-response-len", "32768"]) == 2
    assert "--max-response-len applies to recorded traces" in capsys.readouterr().err
