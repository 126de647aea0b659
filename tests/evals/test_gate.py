"""Regression gate: each rule form passes and fails where it should; bad rules fail to parse."""

from dataclasses import replace

import pytest

from tempering.data.longctx import task_id
from tempering.evals.gate import (
    GateRuleError,
    SuiteOutcome,
    evaluate,
    load_rules,
    parse_rule,
    parse_rules,
    run_gate,
)
from tempering.evals.results import EvalResults, MetricResult, SuiteResult
from tempering.evals.stats import Comparison, paired_bootstrap
from tests.evals.conftest import passkey_suite

NOT_SIGNIFICANT = Comparison(delta=-0.01, low=-0.03, high=0.01, p_value=0.4, significant=False, n=100)
SIGNIFICANT_DROP = Comparison(delta=-0.05, low=-0.08, high=-0.02, p_value=0.002, significant=True, n=100)
SIGNIFICANT_GAIN = Comparison(delta=0.06, low=0.03, high=0.09, p_value=0.001, significant=True, n=100)


def outcomes(*, reasoning=0.635, code=0.12, qa=NOT_SIGNIFICANT, hits=0) -> list[SuiteOutcome]:
    return [
        SuiteOutcome("reasoning", "reasoning", {"accuracy": reasoning}, {"accuracy": 0.64}, SIGNIFICANT_GAIN),
        SuiteOutcome("code", "code", {"pass@1": code, "pass@10": 0.3}, {"pass@1": 0.11}, NOT_SIGNIFICANT, hits),
        SuiteOutcome("chat", "general", {"accuracy": 0.5}, {"accuracy": 0.5}, NOT_SIGNIFICANT),
        SuiteOutcome("qa", "general", {"accuracy": 0.5}, {"accuracy": 0.55}, qa),
    ]


def verdict(rule: str, **kw) -> bool:
    (check,) = evaluate([parse_rule(rule)], outcomes(**kw)).rules
    return check.passed


def test_relative_metric_rule():
    rule = "reasoning.accuracy >= base - 0.01"
    assert verdict(rule, reasoning=0.635)
    assert verdict(rule, reasoning=0.63)  # exactly at the threshold 0.64 - 0.01
    assert not verdict(rule, reasoning=0.62)
    assert verdict("reasoning.accuracy > base", reasoning=0.65)
    assert not verdict("reasoning.accuracy > base", reasoning=0.64)
    (check,) = evaluate([parse_rule(rule)], outcomes(reasoning=0.62)).rules
    assert check.detail == "candidate 0.62, required >= 0.63 (base 0.64 - 0.01)"


def test_absolute_metric_rule():
    assert verdict("code.pass@1 >= 0.10", code=0.12)
    assert not verdict("code.pass@1 >= 0.10", code=0.08)
    assert verdict("code.pass@10 < 0.5") and not verdict("code.pass@10 <= 0.25")
    assert verdict("code.pass@10 == 0.3")


def test_no_significant_regression_by_track_and_by_suite():
    assert verdict("no significant regression on general", qa=NOT_SIGNIFICANT)
    assert not verdict("no significant regression on general", qa=SIGNIFICANT_DROP)
    assert verdict("no significant regression on general", qa=SIGNIFICANT_GAIN)
    assert not verdict("no significant regression on qa", qa=SIGNIFICANT_DROP)
    assert verdict("no significant regression on chat", qa=SIGNIFICANT_DROP)  # qa is not chat
    (check,) = evaluate([parse_rule("No significant regression on general")], outcomes(qa=SIGNIFICANT_DROP)).rules
    assert check.detail == "regressed or unchecked: qa -0.05 [-0.08, -0.02] p=0.002"


def test_contamination_rule():
    assert verdict("contamination == 0", hits=0)
    assert not verdict("contamination == 0", hits=2)
    assert verdict("contamination <= 2", hits=2)
    (check,) = evaluate([parse_rule("contamination == 0")], outcomes(hits=2)).rules
    assert check.detail == "2 contaminated training rows (code: 2), required == 0"
    rows = [f"train.jsonl:{n}" for n in (3, 8, 9, 12)]
    named = [replace(o, contaminated_rows=rows) if o.suite == "code" else o for o in outcomes(hits=4)]
    (check,) = evaluate([parse_rule("contamination == 0")], named).rules
    assert check.detail == (
        "4 contaminated training rows (code: 4), required == 0; first: train.jsonl:3, train.jsonl:8, train.jsonl:9 (+1 more)"
    )


def test_missing_data_fails_the_rule_instead_of_passing():
    results = evaluate(
        parse_rules(
            [
                "math.accuracy >= 0.5",
                "code.pass@5 >= 0.2",
                "code.pass@10 >= base",
                "no significant regression on safety",
            ]
        ),
        outcomes(),
    )
    assert not results.passed
    assert [r.detail for r in results.rules] == [
        "suite 'math' is not in the candidate results",
        "suite 'code' has no metric 'pass@5' (has: pass@1, pass@10)",
        "no base result for code.pass@10 to compare with",
        "no suite, track or suite.metric named 'safety' in the candidate results",
    ]
    no_base = [SuiteOutcome("qa", "general", {"accuracy": 0.5})]
    (check,) = evaluate([parse_rule("no significant regression on general")], no_base).rules
    assert not check.passed and check.detail == "regressed or unchecked: qa: no paired comparison with the base"


def test_gate_passes_only_when_every_rule_passes():
    rules = parse_rules(
        [
            "reasoning.accuracy >= base - 0.01",
            "code.pass@1 >= 0.10",
            "no significant regression on general",
            "contamination == 0",
        ]
    )
    assert evaluate(rules, outcomes()).passed
    failed = evaluate(rules, outcomes(code=0.05))
    assert not failed.passed and [r["passed"] for r in failed.to_dict()["rules"]] == [True, False, True, True]


@pytest.mark.parametrize(
    "rule, problem",
    [
        ("reasoning.accuracy => 0.5", "no comparison operator"),
        ("reasoning.accuracy = 0.5", "no comparison operator"),
        ("reasoning.accuracy >=", "nothing after '>='"),
        ("reasoning.accuracy >= base * 0.9", "'base \\* 0.9' is not a number, 'base', or 'base \\+ / - <number>'"),
        ("reasoning.accuracy >= 1%", "'1%' is not a number"),
        ("reasoning.accuracy >= basement", "'basement' is not a number"),
        ("accuracy >= 0.5", "'accuracy' is not '<suite>.<metric>' or 'contamination'"),
        (".accuracy >= 0.5", "'.accuracy' is not '<suite>.<metric>'"),
        ("contamination == base", "contamination is compared with a count, got 'base'"),
        ("contamination >= -1", "contamination is compared with a count"),
        ("no regression on general", "expected 'no significant regression on <suite-or-track-or-suite.metric>'"),
        ("no significant regression on", "expected 'no significant regression on"),
        ("__import__('os').system('true')", "no comparison operator"),
        ("   ", "empty rule"),
    ],
)
def test_bad_rules_error_clearly(rule, problem):
    with pytest.raises(GateRuleError, match=problem):
        parse_rule(rule)


def test_rule_lists_and_files_name_the_bad_rule(tmp_path):
    with pytest.raises(GateRuleError, match=r"gate: rule 2: rule 'code.pass@1 >> 1'"):
        parse_rules(["contamination == 0", "code.pass@1 >> 1"])
    with pytest.raises(GateRuleError, match="non-empty list"):
        parse_rules([])
    path = tmp_path / "gate.yaml"
    path.write_text("rules:\n  - contamination == 0\n  - code.pass@1 >= 0.10\n")
    assert [type(r).__name__ for r in load_rules(path)] == ["ContaminationRule", "MetricRule"]
    path.write_text("- contamination == 0\n- code.pass@1 >= 0.1O\n")
    with pytest.raises(GateRuleError, match=r"gate.yaml:2: rule 'code.pass@1 >= 0.1O'"):
        load_rules(path)
    path.write_text("- contamination == 0\n- 0.5\n")
    with pytest.raises(GateRuleError, match=r"gate.yaml:2: each rule must be a string"):
        load_rules(path)
    path.write_text("rule:\n  - contamination == 0\n")
    with pytest.raises(GateRuleError, match=r"gate.yaml:1: expected only the key 'rules'"):
        load_rules(path)
    path.write_text("- [unclosed\n")
    with pytest.raises(GateRuleError, match=r"gate.yaml:2: invalid YAML"):
        load_rules(path)


def results(model: str, scores: dict[str, list[float]], hits: int = 0) -> EvalResults:
    metric = MetricResult.from_scores("accuracy", list(scores.values()))
    s = SuiteResult(
        suite="qa",
        suite_hash="h",
        model_id=model,
        metrics={"accuracy": metric},
        primary_metric="accuracy",
        task_scores=scores,
        contamination_hits=hits,
    )
    return EvalResults(model=model, suites=[s])


def test_run_gate_compares_two_results_files():
    base = results("base", {f"t{i}": [1.0] for i in range(60)})
    same = results("cand", {f"t{i}": [1.0] for i in range(60)})
    broken = results("cand", {f"t{i}": [1.0 if i < 30 else 0.0] for i in range(60)}, hits=1)
    rules = parse_rules(["qa.accuracy >= base - 0.05", "no significant regression on general", "contamination == 0"])
    assert run_gate(rules, base, same).passed
    verdicts = run_gate(rules, base, broken).to_dict()
    assert [r["passed"] for r in verdicts["rules"]] == [False, False, False]
    assert verdicts["rules"][1]["detail"].startswith("regressed or unchecked: qa -0.5 [")


def test_non_inferiority_needs_the_interval_above_minus_the_margin():
    # NOT_SIGNIFICANT: [-0.03, 0.01]; SIGNIFICANT_DROP: [-0.08, -0.02]
    assert verdict("non-inferior on qa within 0.05", qa=NOT_SIGNIFICANT)
    assert verdict("non-inferior on qa within 0.03", qa=NOT_SIGNIFICANT)  # exactly at the margin
    assert not verdict("non-inferior on qa within 0.02", qa=NOT_SIGNIFICANT)  # not significant, still not shown
    assert not verdict("non-inferior on general within 0.05", qa=SIGNIFICANT_DROP)
    assert verdict("Non-inferior on general within 0.1", qa=SIGNIFICANT_DROP)
    (check,) = evaluate([parse_rule("non-inferior on general within 0.05")], outcomes(qa=SIGNIFICANT_DROP)).rules
    assert check.detail == "lower bound below -0.05 or unchecked: qa -0.05 [-0.08, -0.02]"
    with pytest.raises(GateRuleError, match="expected 'non-inferior on <suite-or-track> within <margin>'"):
        parse_rule("non-inferior on general")


def two_metric_results(model: str, accuracy: dict[str, list[float]], partial: dict[str, list[float]]) -> EvalResults:
    metrics = {
        "accuracy": MetricResult.from_scores("accuracy", list(accuracy.values())),
        "mean_reward": MetricResult.from_scores("mean_reward", list(partial.values())),
    }
    s = SuiteResult(
        suite="spell",
        suite_hash="h",
        model_id=model,
        metrics=metrics,
        primary_metric="accuracy",
        task_scores=accuracy,
        metric_task_scores={"mean_reward": partial},
    )
    return EvalResults(model=model, suites=[s])


def test_a_rule_on_suite_dot_metric_catches_a_secondary_metric_the_suite_rule_does_not_read():
    # accuracy is 0 on both; the partial credit (mean_reward) drops from 0.5 to 0 on every task
    zeros = {f"t{i}": [0.0, 0.0] for i in range(40)}
    base = two_metric_results("base", zeros, {f"t{i}": [0.5, 0.5] for i in range(40)})
    cand = two_metric_results("cand", zeros, zeros)
    rules = parse_rules(
        [
            "no significant regression on spell",
            "no significant regression on spell.mean_reward",
            "no significant regression on spell.accuracy",
        ]
    )
    verdicts = run_gate(rules, base, cand).to_dict()["rules"]
    assert [r["passed"] for r in verdicts] == [True, False, True]
    assert verdicts[1]["detail"].startswith("regressed or unchecked: spell.mean_reward -0.5 [-0.5, -0.5]")
    assert verdicts[2]["detail"].startswith("no significant regression: spell +0")  # the primary, by name
    # a metric the runs kept no per-task scores for fails (never passes for lack of data)
    (check,) = run_gate(parse_rules(["no significant regression on spell.pass@1"]), base, cand).rules
    assert (
        not check.passed and check.detail == "regressed or unchecked: spell.pass@1: no paired comparison with the base"
    )


def test_metric_task_scores_must_name_a_metric_of_the_suite():
    with pytest.raises(ValueError, match="metric_task_scores of 'pass@1', which is not among metrics"):
        SuiteResult(
            suite="s",
            suite_hash="h",
            model_id="m",
            primary_metric="accuracy",
            metrics={"accuracy": MetricResult.from_scores("accuracy", [[1.0]])},
            metric_task_scores={"pass@1": {"t": [1.0]}},
        )


# Two lengths of 20 tasks (depths cycling 0 / 0.5 / 1). The base gets tasks 0-15 right at both
# lengths (0.8 each, 0.8 overall). The candidate gets all 20 right at 1024 (1.0) but drops
# tasks 12-15 at 4096 (0.6): overall 32/40 = 0.8 again, so only a rule at 4096 sees the drop.
def longctx_results(model: str, right: dict[int, range]) -> EvalResults:
    scores = {
        task_id("passkey", length, (0.0, 0.5, 1.0)[i % 3], i): [1.0 if i in right[length] else 0.0]
        for length in (1024, 4096)
        for i in range(20)
    }
    s = passkey_suite(model, scores, suite_hash="h")
    return EvalResults(model=model, suites=[s])


LONGCTX_BASE = longctx_results("base", {1024: range(16), 4096: range(16)})
LONGCTX_CAND = longctx_results("cand", {1024: range(20), 4096: range(12)})


def test_a_rule_at_one_length_reads_only_the_tasks_at_that_length():
    rules = [
        "longctx-passkey.accuracy >= base - 0.05",
        "longctx-passkey@1024.accuracy >= base - 0.05",
        "longctx-passkey@4096.accuracy >= base - 0.05",
        "longctx-passkey@4096.accuracy >= 0.6",
    ]
    checks = run_gate(parse_rules(rules), LONGCTX_BASE, LONGCTX_CAND).rules
    assert [(c.passed, c.detail) for c in checks] == [
        (True, "candidate 0.8, required >= 0.75 (base 0.8 - 0.05)"),
        (True, "candidate 1, required >= 0.75 (base 0.8 - 0.05)"),
        (False, "candidate 0.6, required >= 0.75 (base 0.8 - 0.05)"),
        (True, "candidate 0.6, required >= 0.6"),
    ]


def test_significant_regression_at_one_length_pairs_the_same_tasks_as_the_whole_suite():
    rules = [
        "no significant regression on longctx-passkey",
        "no significant regression on longctx-passkey@1024",
        "no significant regression on longctx-passkey@4096",
        "no significant regression on longctx-passkey@4096.accuracy",
        "non-inferior on longctx-passkey@4096 within 0.5",
    ]
    checks = run_gate(parse_rules(rules), LONGCTX_BASE, LONGCTX_CAND).rules
    assert [c.passed for c in checks] == [True, True, False, False, True]
    # the comparison at 4096 is the paired bootstrap of the 20 task ids there (4 dropped, 16 the
    # same: delta -0.2; a resample misses all four drops with probability 0.8^20 = 1.2% < 2.5%)
    ids = sorted(t for t in LONGCTX_CAND.suites[0].task_scores if "-L4096-" in t)
    base, cand = LONGCTX_BASE.suites[0].task_scores, LONGCTX_CAND.suites[0].task_scores
    c = paired_bootstrap([base[t] for t in ids], [cand[t] for t in ids], seed=0)
    assert c.delta == pytest.approx(-0.2) and c.high < 0
    assert checks[2].detail == (
        f"regressed or unchecked: longctx-passkey@4096 {c.delta:+.4g} [{c.low:.4g}, {c.high:.4g}] p={c.p_value:.3g}"
    )
    assert checks[0].detail.startswith("no significant regression: longctx-passkey +0 [")
    assert checks[1].detail.startswith("no significant regression: longctx-passkey@1024 +0.2 [")


def test_a_length_the_results_do_not_hold_is_one_line_naming_the_rule_and_the_lengths():
    for rule in ["longctx-passkey@2048.accuracy >= 0.5", "no significant regression on longctx-passkey@2048"]:
        with pytest.raises(GateRuleError) as exc:
            run_gate(parse_rules([rule]), LONGCTX_BASE, LONGCTX_CAND)
        assert str(exc.value) == (
            f"rule {rule!r}: suite 'longctx-passkey' has no tasks at length 2048 (lengths: 1024, 4096)"
        )
    plain = results("base", {f"t{i}": [1.0] for i in range(5)})
    with pytest.raises(GateRuleError, match=r"suite 'qa' has no tasks at length 512 \(lengths: none: its task ids"):
        run_gate(parse_rules(["qa@512.accuracy >= 0.5"]), plain, plain)
    # a suite that is not there at all fails the rule, as it does without a length
    (check,) = run_gate(parse_rules(["math@512.accuracy >= 0.5"]), plain, plain).rules
    assert not check.passed and check.detail == "suite 'math@512' is not in the candidate results"


@pytest.mark.parametrize(
    "rule", ["longctx-passkey@4k.accuracy >= 0.5", "no significant regression on longctx-passkey@0", "a@b@1.x > 0"]
)
def test_a_malformed_length_fails_to_parse(rule):
    with pytest.raises(GateRuleError, match="a length is selected as '<suite>@<tokens>'"):
        parse_rule(rule)
