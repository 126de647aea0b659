"""Agent evaluation dimensions per tier (hand-derived numbers), as metrics of the suite result, and
the cache of agent suites."""

import pytest

from tempering.agents.tasks import builtin_tasks, select
from tempering.evals import agent_suites
from tempering.evals.agent_suites import suite_result_from_records, task_scores, tier_summary


def _row(task, tier, seed, passed, steps, invalid=0, tool_errors=0, intact=True, status="scored"):
    return {
        "suite": "agent:x",
        "task_id": task,
        "tier": tier,
        "seed": seed,
        "passed": passed,
        "status": status,
        "steps": steps,
        "invalid_calls": invalid,
        "tool_errors": tool_errors,
        "errors": invalid + tool_errors,
        "recovered": passed and invalid + tool_errors > 0,
        "intact": intact,
        "unsafe_actions": 0,
        "unsafe_reasons": [],
        "sandbox_s": 0.5,
        "sandbox_timeouts": 0,
        "detail": "",
    }


RECORDS = [
    _row("a", 1, 0, True, 2),
    _row("a", 1, 1, True, 3, invalid=1),  # an error, then success: recovered
    _row("b", 1, 0, False, 4, invalid=2),
    _row("b", 1, 1, False, 4, tool_errors=1, intact=False),
    _row("c", 2, 0, True, 5),
    _row("c", 2, 1, False, 1, status="env_error"),  # the environment failed: left out
]


def test_tier_dimensions_by_hand():
    t1 = tier_summary(RECORDS, 1)
    # per task, seeds averaged first: completion a 1, b 0; steps a 2.5, b 4; invalid a 0.5, b 1;
    # recovery only over episodes with an error: a [1] (seed 1), b [0, 0]; intact a 1, b 0.5
    assert (t1["completion"], t1["steps"], t1["invalid_calls"]) == (0.5, 3.25, 0.75)
    assert (t1["recovery"], t1["intact"], t1["episodes_with_error"]) == (0.5, 0.75, 3)
    assert t1["invalid_calls_per_turn"] == pytest.approx(3 / 13)
    assert t1["completion_ci"][0] <= 0.5 <= t1["completion_ci"][1]
    t2 = tier_summary(RECORDS, 2)
    assert (t2["completion"], t2["recovery"], t2["env_errors"], t2["tasks"]) == (1.0, None, 1, 1)
    everything = tier_summary(RECORDS)
    assert everything["completion"] == pytest.approx(2 / 3) and everything["recovery"] == 0.5
    assert everything["completion_rate"] == everything["completion"]  # the names `eval run` prints
    assert task_scores(RECORDS, "recovery") == {"a": [1.0], "b": [0.0, 0.0]}


def test_every_dimension_is_a_metric_overall_and_per_tier():
    tasks = select(builtin_tasks("tool_arith"), "heldout")[:3]
    result = suite_result_from_records("agent:x", tasks, RECORDS, "m", {})
    m = result.metrics
    assert result.primary_metric == "completion" and m["completion"].mean == pytest.approx(2 / 3)
    assert (m["steps_tier1"].mean, m["recovery_tier1"].mean, m["completion_tier2"].mean) == (3.25, 0.5, 1.0)
    assert "recovery_tier2" not in m  # no episode of tier 2 made an error
    assert result.metric_task_scores["recovery"] == {"a": [1.0], "b": [0.0, 0.0]}
    assert result.verifier_errors == 1
    assert all(m[k].low is not None and m[k].low <= m[k].mean <= m[k].high for k in m)


def test_agent_suites_are_cached_under_model_suite_and_settings(tmp_path, monkeypatch, smol_tokenizer):
    from tests.conftest import tiny_llama

    monkeypatch.setenv("TEMPERING_CACHE", str(tmp_path / "cache"))
    model = tiny_llama(vocab=49152, seed=0)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    model.save_pretrained(tmp_path / "m")
    smol_tokenizer.save_pretrained(tmp_path / "m")
    lines = []
    kw = {"limit": 1, "max_new_tokens": 2, "precision": "fp32", "log": lines.append}
    first = agent_suites.run_agent_suites(str(tmp_path / "m"), ["agent:tool_arith"], tmp_path / "a", **kw)
    assert lines == []

    def no_sampling(*args, **kwargs):
        raise AssertionError("a cached suite is not sampled again")

    monkeypatch.setattr(agent_suites, "_run", no_sampling)
    again = agent_suites.run_agent_suites(str(tmp_path / "m"), ["agent:tool_arith"], tmp_path / "b", **kw)
    assert len(lines) == 1 and "cached result" in lines[0]
    assert again["records"] == first["records"] and again["suites"] == first["suites"]
    assert again["suite_results"][0].metrics == first["suite_results"][0].metrics
    with pytest.raises(AssertionError, match="not sampled again"):  # other settings: another key
        agent_suites.run_agent_suites(
            str(tmp_path / "m"), ["agent:tool_arith"], tmp_path / "c", **{**kw, "max_new_tokens": 3}
        )
