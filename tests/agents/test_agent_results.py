"""Agent suites as `SuiteResult`s: results.json, the gate and the report read them like any suite."""

from tempering.agents.episode import run_episodes
from tempering.agents.policies import POLICIES
from tempering.agents.tasks import builtin_tasks, select
from tempering.evals.agent_suites import agent_suite_result
from tempering.evals.gate import parse_rules, run_gate
from tempering.evals.results import EvalResults


def test_oracle_and_noop_episodes_become_suite_results_the_gate_and_report_read(pool, tmp_path):
    from tempering.evals.report import render_report

    tasks = select(builtin_tasks("tool_arith"), "heldout")[:12]
    runs = {}
    for policy in ("oracle", "noop"):
        episodes = [(seed, e) for seed in (0, 1) for e in run_episodes(pool, POLICIES[policy], tasks)]
        runs[policy] = agent_suite_result("agent:tool_arith", tasks, episodes, policy, {"seeds": [0, 1]})
    (oracle, oracle_rows), (noop, _) = runs["oracle"], runs["noop"]
    assert oracle.track == "agent" and oracle.primary_metric == "completion"
    assert oracle.metrics["completion"].mean == 1.0 and noop.metrics["completion"].mean == 0.0
    assert oracle.task_scores == {t.id: [1.0, 1.0] for t in tasks}  # one score per seed
    assert oracle.metric_task_scores["intact"] == {t.id: [1.0, 1.0] for t in tasks}
    assert oracle.suite_hash == noop.suite_hash and len(oracle_rows) == 24 and oracle_rows[0]["passed"] is True
    base, cand = EvalResults(model="oracle", suites=[oracle]), EvalResults(model="noop", suites=[noop])
    rules = parse_rules(
        [
            "no significant regression on agent",
            "agent:tool_arith.completion >= base - 0.05",
            "no significant regression on agent:tool_arith.intact",
        ]
    )
    verdicts = [r.passed for r in run_gate(rules, base, cand).rules]
    assert verdicts == [False, False, True]  # completion fell 1 -> 0; nothing was broken
    assert run_gate(rules, cand, base).passed
    render_report(cand, tmp_path, compare=base)
    assert "agent:tool_arith" in (tmp_path / "report.html").read_text()
