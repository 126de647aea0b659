"""The agent harness is validated with scripted policies on every built-in suite and tier."""

from collections import defaultdict

import pytest

from tempering.agents.env import ToolEnv
from tempering.agents.episode import run_episode, run_episodes, summarise
from tempering.agents.policies import MALFORMED, POLICIES, recover
from tempering.agents.tasks import BUILTIN, builtin_tasks


@pytest.fixture(scope="module")
def suites():
    return {name: builtin_tasks(name) for name in BUILTIN}


def one_per_family_and_tier(tasks):
    """The first task of each (family, tier): every kind of task, a fraction of the sandbox time."""
    firsts = {}
    for t in tasks:
        firsts.setdefault((t.family, t.tier), t)
    return list(firsts.values())


def oracle_sample(name, tasks):
    # repo: make_envs.py checks every planted bug on the host (the broken repository fails its
    # tests, the oracle's files pass them); bench/diagnostics/agent_envs.py runs every task here
    return one_per_family_and_tier(tasks) if name == "repo" else tasks


def test_builtin_suites_have_tiers_and_disjoint_heldout(suites):
    ws = suites["workspace"]
    assert len(ws) >= 60 and {t.tier for t in ws} == {1, 2, 3}
    for tier in (1, 2, 3):
        assert {t.split for t in ws if t.tier == tier} == {"train", "heldout"}
    for name in ("workspace", "repo"):  # held out by family: no held-out task is of a kind trained on
        families = {split: {t.family for t in suites[name] if t.split == split} for split in ("train", "heldout")}
        assert None not in families["train"] and not families["train"] & families["heldout"], name
    for tasks in suites.values():
        train = {(t.prompt, tuple(sorted(t.files.items()))) for t in tasks if t.split == "train"}
        assert not any((t.prompt, tuple(sorted(t.files.items()))) in train for t in tasks if t.split == "heldout")


def test_oracle_solves_every_suite_tier_and_family(pool, suites):
    for name, tasks in suites.items():
        by_tier = defaultdict(list)
        for result in run_episodes(pool, POLICIES["oracle"], oracle_sample(name, tasks)):
            by_tier[result.task.tier].append(result.stats)
            assert result.rewards[-1] == 1.0, (result.task.id, result.stats)  # the expert scores in full
        for tier, stats in by_tier.items():
            assert summarise(stats)["completion_rate"] == 1.0, (name, tier)
            assert all(s.intact and s.status == "scored" for s in stats)


def test_noop_and_random_policies_solve_about_nothing(pool, suites):
    for name, tasks in suites.items():
        # every tier (and family), a share of the rows
        sample = (
            tasks[::4]
            if name == "tool_arith"
            else one_per_family_and_tier(tasks)
            if name in ("workspace", "repo")
            else tasks[::2]
        )
        assert summarise([r.stats for r in run_episodes(pool, POLICIES["noop"], sample)])["completion_rate"] == 0.0
        rates = summarise([r.stats for r in run_episodes(pool, POLICIES["random"], sample)])
        assert rates["completion_rate"] <= 0.05, name
        assert rates["env_errors"] == 0


def test_one_bad_call_then_the_oracle_is_a_recovery(pool, suites):
    env = ToolEnv(pool)
    for tasks in suites.values():
        picks = [next(t for t in tasks if t.tier == tier) for tier in sorted({t.tier for t in tasks})]
        for task in picks:
            result = run_episode(env, recover, task)
            assert result.stats.success and result.stats.recovered and result.stats.invalid_calls == 1, task.id
            assert result.messages[1]["content"] == MALFORMED and "invalid JSON" in result.messages[2]["content"]


def test_malformed_calls_never_end_the_run(pool, suites):
    env = ToolEnv(pool)
    task = next(t for t in suites["workspace"] if t.tier == 3)
    result = run_episode(env, lambda t, m: MALFORMED, task)
    assert result.stats.status == "scored" and not result.stats.success
    assert result.stats.steps == task.max_steps and result.stats.invalid_calls == task.max_steps


def test_the_scripted_mistake_then_fix_is_recovery_data(pool, suites):
    # tool_notation's `mistake` (the expression as written) errs, the error is read, the expert fixes it
    from tempering.agents.recovered import recovered_rows

    tasks = suites["tool_notation"]
    assert all(t.mistake for t in tasks)
    results = run_episodes(pool, POLICIES["mistake"], tasks[::8])
    for r in results:
        assert r.stats.success and r.stats.recovered and r.stats.tool_errors == 1, r.task.id
        feedback = next(m["content"] for m in r.messages if m["role"] == "tool")
        assert r.turn_errors == [1, 0, 0] and "not an arithmetic expression" in feedback
    rows = recovered_rows([r.row() for r in results], "scripted")
    assert len(rows) == len(results)
    turns = [m for m in rows[0]["messages"] if m["role"] == "assistant"]
    assert [m.get("weight", 1) for m in turns] == [0, 1, 1]  # the error is context, the fix is learnt
