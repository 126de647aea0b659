"""The regression gate: a short list of rules a candidate model must meet to ship.

Rule forms (one string each; a YAML file holds a list of them, or `{rules: [...]}`):

    <suite>.<metric> <op> <number>            code.pass@1 >= 0.10
    <suite>.<metric> <op> base [+|- <number>] reasoning.accuracy >= base - 0.01
    no significant regression on <name>       <name> is a suite, a track or <suite>.<metric>
    non-inferior on <name> within <margin>    non-inferior on general within 0.02
    contamination <op> <count>                contamination == 0

Where a suite's task ids name lengths (`longctx-passkey-L4096-d0.50-3`), `<suite>@<length>`
selects its tasks at that length, in place of a suite name in any form but contamination:
`longctx-passkey@4096.accuracy >= base - 0.05`, `no significant regression on
longctx-passkey@4096`. The metric is then the mean over those tasks, and the paired comparison
pairs the same task ids as the whole suite's, restricted to that length. A length the candidate's
task ids do not name raises `GateRuleError` naming the rule and the lengths there are.

<op> is one of >=, >, <=, <, ==. `base` is the same metric of the base model. "Significant
regression" means the paired comparison's interval lies wholly below 0 (see
evals.stats.paired_bootstrap). "Non-inferior within m" is the stricter canary test: the
interval's lower end must lie at or above -m (the candidate may be worse by less than m, and
the data must show it). `contamination` is the sum of the candidate suites'
`contamination_hits`. The parser is strict: anything else is a `GateRuleError` naming the
rule and the problem. A rule whose suite, metric or base result is missing fails (it never
passes for lack of data).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, Union

import yaml

from tempering.errors import InputNotFound, UserError
from tempering.evals.results import EvalResults, SuiteComparison, compare, compare_metrics, no_tasks_at
from tempering.evals.stats import Comparison
from tempering.numbers import FLOAT_LITERAL, UNSIGNED_FLOAT

# Comparisons allow this much floating-point slack, so `>= base - 0.01` holds at equality.
EPS = 1e-9
SHOWN_ROWS = 3  # contaminated rows a failing contamination rule names
_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": lambda x, t: x >= t - EPS,
    ">": lambda x, t: x > t + EPS,
    "<=": lambda x, t: x <= t + EPS,
    "<": lambda x, t: x < t - EPS,
    "==": lambda x, t: abs(x - t) <= EPS,
}
_COMPARISON = re.compile(r"(?P<lhs>[^\s<>=!]+)\s*(?P<op>>=|<=|==|>|<)\s*(?P<rhs>.*)")
_RHS_BASE = re.compile(rf"base(?:\s*(?P<sign>[+-])\s*(?P<delta>{UNSIGNED_FLOAT}))?")
_REGRESSION = re.compile(r"no\s+significant\s+regression\s+on\s+(?P<name>\S+)", re.IGNORECASE)
_AT_LENGTH = re.compile(r"(?P<suite>[^@\s]+)@(?P<length>[1-9]\d*)")
_NON_INFERIOR = re.compile(rf"non-inferior\s+on\s+(?P<name>\S+)\s+within\s+(?P<margin>{UNSIGNED_FLOAT})", re.IGNORECASE)
_FORMS = (
    "'<suite>.<metric> <op> <number | base | base +/- number>' (a suite may be '<suite>@<length>'), "
    "'no significant regression on <suite-or-track-or-suite.metric>', 'non-inferior on <suite-or-track> within <margin>' "
    "or 'contamination <op> <count>'"
)


class GateRuleError(UserError):
    """A gate rule that cannot be parsed, with the rule and the reason."""


@dataclass(frozen=True)
class SuiteOutcome:
    """What the gate knows about one suite of the candidate.

    candidate / base: metric name -> mean (base is None when the base lacks the suite).
    comparison: paired candidate-minus-base comparison of the primary metric, if any.
    metric_comparisons: the same for other metrics, by name (where both runs kept their scores).
    lengths: the same outcome over only the tasks at each length the task ids name (`<suite>@<length>`).
    """

    suite: str
    track: str
    candidate: Mapping[str, float]
    base: Mapping[str, float] | None = None
    comparison: Comparison | None = None
    contamination_hits: int = 0
    primary_metric: str | None = None
    metric_comparisons: Mapping[str, Comparison] = field(default_factory=dict)
    lengths: Mapping[int, SuiteOutcome] = field(default_factory=dict)
    contaminated_rows: Sequence[str] = ()
    """The training rows behind `contamination_hits` (`file#id` or `file:line`), as the eval found them."""


@dataclass(frozen=True)
class RuleCheck:
    """One rule's verdict and the numbers behind it."""

    rule: str
    passed: bool
    detail: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GateResult:
    """All rules' verdicts; the gate passes when every rule does.

    candidate: what was judged (`judged_identity`): the model, its weights' hash and each
    suite's hash, so a promotion can refuse weights or suites other than these (evals.verdict).
    """

    passed: bool
    rules: list[RuleCheck] = field(default_factory=list)
    candidate: dict[str, Any] | None = None

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"passed": self.passed, "rules": [r.to_dict() for r in self.rules]}
        if self.candidate is not None:
            out["candidate"] = self.candidate
        return out


def judged_identity(cand: EvalResults) -> dict[str, Any]:
    """The candidate a verdict is about: model, weights hash (None unless every suite ran on the
    same hashed weights) and, per suite, its hash with the file and task limit it came from."""
    hashes = {s.model_hash for s in cand.suites}
    return {
        "model": cand.model,
        "model_hash": hashes.pop() if len(hashes) == 1 else None,
        "suites": [{"suite": s.suite, "hash": s.suite_hash, "source": s.source, "limit": s.limit} for s in cand.suites],
    }


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def suite_of(selector: str) -> str:
    """The suite a `<suite>@<length>` selector reads; any other name as it is."""
    m = _AT_LENGTH.fullmatch(selector)
    return m["suite"] if m else selector


def _named(rule: str, selector: str, outcomes: Mapping[str, SuiteOutcome]) -> SuiteOutcome | None:
    """The outcome of suite `selector`, or of `<suite>@<length>`: that suite's tasks at the length.

    Raises:
        GateRuleError: the suite is there, but its task ids do not name that length.
    """
    m = _AT_LENGTH.fullmatch(selector)
    if m is None:
        return outcomes.get(selector)
    outcome, length = outcomes.get(m["suite"]), int(m["length"])
    if outcome is None:
        return None
    if length not in outcome.lengths:
        raise GateRuleError(f"rule {rule!r}: {no_tasks_at(outcome.suite, length, sorted(outcome.lengths))}")
    return outcome.lengths[length]


@dataclass(frozen=True)
class MetricRule:
    """`<suite>.<metric> <op> <threshold>`, the threshold absolute or relative to the base."""

    text: str
    suite: str
    metric: str
    op: str
    value: float  # the threshold, or the offset added to the base value
    relative: bool

    def check(self, outcomes: Mapping[str, SuiteOutcome]) -> RuleCheck:
        outcome = _named(self.text, self.suite, outcomes)
        if outcome is None:
            return RuleCheck(self.text, False, f"suite {self.suite!r} is not in the candidate results")
        if self.metric not in outcome.candidate:
            have = ", ".join(sorted(outcome.candidate))
            return RuleCheck(self.text, False, f"suite {self.suite!r} has no metric {self.metric!r} (has: {have})")
        value = outcome.candidate[self.metric]
        threshold, why = self.value, ""
        if self.relative:
            if outcome.base is None or self.metric not in outcome.base:
                return RuleCheck(self.text, False, f"no base result for {self.suite}.{self.metric} to compare with")
            threshold = outcome.base[self.metric] + self.value
            why = f" (base {_fmt(outcome.base[self.metric])} {'+' if self.value >= 0 else '-'} {_fmt(abs(self.value))})"
        passed = _OPS[self.op](value, threshold)
        return RuleCheck(self.text, passed, f"candidate {_fmt(value)}, required {self.op} {_fmt(threshold)}{why}")


def _suite_part(name: str) -> str:
    """The suite (or track) part of a paired rule's name: all of it, or what precedes `.<metric>`."""
    return name.rpartition(".")[0] if "." in name else name


def _chosen(rule: str, name: str, outcomes: Mapping[str, SuiteOutcome]) -> list[tuple[SuiteOutcome, str | None]]:
    """The suites a rule names, each with the metric it reads (None: the primary): every suite
    of suite or track `name`, else `<suite>.<metric>`, `<suite>@<length>` or both."""
    chosen: list[tuple[SuiteOutcome, str | None]] = [(o, None) for o in outcomes.values() if name in (o.suite, o.track)]
    if chosen:
        return chosen
    suite = _suite_part(name)
    o = _named(rule, suite, outcomes)
    if o is None:
        return []
    metric = name[len(suite) + 1 :]
    return [(o, None if metric in ("", o.primary_metric) else metric)]


def _paired_check(
    text: str,
    name: str,
    outcomes: Mapping[str, SuiteOutcome],
    passes: Callable[[Any], bool],
    with_p: bool,
    failed: str,
    passed: str,
) -> RuleCheck:
    """A rule over the paired comparisons of every suite named `name` (or of track `name`, or
    of one metric: `<suite>.<metric>`)."""
    chosen = _chosen(text, name, outcomes)
    if not chosen:
        return RuleCheck(text, False, f"no suite, track or suite.metric named {name!r} in the candidate results")
    problems, seen = [], []
    for o, metric in chosen:
        c = o.comparison if metric is None else o.metric_comparisons.get(metric)
        label = o.suite if metric is None else f"{o.suite}.{metric}"
        if c is None:
            problems.append(f"{label}: no paired comparison with the base")
            continue
        line = f"{label} {c.delta:+.4g} [{_fmt(c.low)}, {_fmt(c.high)}]" + (f" p={c.p_value:.3g}" if with_p else "")
        (seen if passes(c) else problems).append(line)
    if problems:
        return RuleCheck(text, False, f"{failed}: " + "; ".join(problems))
    return RuleCheck(text, True, f"{passed}: " + "; ".join(seen))


@dataclass(frozen=True)
class RegressionRule:
    """`no significant regression on <name>`: no suite of that name or track got worse."""

    text: str
    name: str

    def check(self, outcomes: Mapping[str, SuiteOutcome]) -> RuleCheck:
        return _paired_check(
            self.text,
            self.name,
            outcomes,
            lambda c: not (c.significant and c.delta < 0),
            True,
            "regressed or unchecked",
            "no significant regression",
        )


@dataclass(frozen=True)
class NonInferiorityRule:
    """`non-inferior on <name> within <margin>`: every suite of that name or track has a paired
    comparison whose interval's lower end is >= -margin (worse by less than the margin, shown by the CI)."""

    text: str
    name: str
    margin: float

    def check(self, outcomes: Mapping[str, SuiteOutcome]) -> RuleCheck:
        return _paired_check(
            self.text,
            self.name,
            outcomes,
            lambda c: c.low >= -self.margin - EPS,
            False,
            f"lower bound below -{_fmt(self.margin)} or unchecked",
            f"non-inferior within {_fmt(self.margin)}",
        )


@dataclass(frozen=True)
class ContaminationRule:
    """`contamination <op> <count>` over the candidate suites' contamination hits."""

    text: str
    op: str
    value: float

    def check(self, outcomes: Mapping[str, SuiteOutcome]) -> RuleCheck:
        total = sum(o.contamination_hits for o in outcomes.values())
        by_suite = ", ".join(f"{o.suite}: {o.contamination_hits}" for o in outcomes.values() if o.contamination_hits)
        detail = f"{total} contaminated training rows" + (f" ({by_suite})" if by_suite else "")
        passed = _OPS[self.op](total, self.value)
        rows = list(dict.fromkeys(r for o in outcomes.values() for r in o.contaminated_rows))
        shown = f"; first: {', '.join(rows[:SHOWN_ROWS])}" if rows else ""
        if len(rows) > SHOWN_ROWS:
            shown += f" (+{len(rows) - SHOWN_ROWS} more)"
        return RuleCheck(self.text, passed, f"{detail}, required {self.op} {_fmt(self.value)}{shown}")


Rule = Union[MetricRule, RegressionRule, NonInferiorityRule, ContaminationRule]


def parse_rule(text: str) -> Rule:
    """Parse one rule string. Raises `GateRuleError` naming the rule and what is wrong."""
    if not isinstance(text, str):
        raise GateRuleError(f"rule {text!r}: must be a string, got {type(text).__name__}")
    rule = " ".join(text.split())
    if not rule:
        raise GateRuleError("empty rule")

    def bad(why: str) -> GateRuleError:
        return GateRuleError(f"rule {rule!r}: {why}")

    def check_length(suite: str) -> None:
        if "@" in suite and not _AT_LENGTH.fullmatch(suite):
            raise bad(f"{suite!r}: a length is selected as '<suite>@<tokens>', e.g. longctx-passkey@4096")

    if rule.lower().startswith("no "):
        m = _REGRESSION.fullmatch(rule)
        if m is None:
            raise bad("expected 'no significant regression on <suite-or-track-or-suite.metric>'")
        check_length(_suite_part(m["name"]))
        return RegressionRule(rule, m["name"])
    if rule.lower().startswith("non-inferior"):
        m = _NON_INFERIOR.fullmatch(rule)
        if m is None:
            raise bad("expected 'non-inferior on <suite-or-track> within <margin>' (margin a number >= 0)")
        check_length(_suite_part(m["name"]))
        return NonInferiorityRule(rule, m["name"], float(m["margin"]))
    m = _COMPARISON.fullmatch(rule)
    if m is None:
        raise bad(f"no comparison operator (>=, >, <=, <, ==) after a name; expected {_FORMS}")
    lhs, op, rhs = m["lhs"], m["op"], m["rhs"].strip()
    if not rhs:
        raise bad(f"nothing after {op!r}")
    if lhs == "contamination":
        if not re.fullmatch(FLOAT_LITERAL, rhs) or float(rhs) < 0:
            raise bad(f"contamination is compared with a count, got {rhs!r}")
        return ContaminationRule(rule, op, float(rhs))
    suite, dot, metric = lhs.rpartition(".")
    if not dot or not suite or not metric:
        raise bad(f"{lhs!r} is not '<suite>.<metric>' or 'contamination'")
    check_length(suite)
    if re.fullmatch(FLOAT_LITERAL, rhs):
        return MetricRule(rule, suite, metric, op, float(rhs), relative=False)
    base = _RHS_BASE.fullmatch(rhs)
    if base is None:
        raise bad(f"right-hand side {rhs!r} is not a number, 'base', or 'base + / - <number>'")
    delta = float(base["delta"]) if base["delta"] else 0.0
    return MetricRule(rule, suite, metric, op, -delta if base["sign"] == "-" else delta, relative=True)


def parse_rules(rules: Sequence[str], *, source: str = "gate") -> list[Rule]:
    """Parse a list of rule strings; errors say which rule (1-based) of `source` failed."""
    if isinstance(rules, str) or not rules:
        raise GateRuleError(f"{source}: a gate needs a non-empty list of rules")
    parsed = []
    for i, text in enumerate(rules, 1):
        try:
            parsed.append(parse_rule(text))
        except GateRuleError as exc:
            raise GateRuleError(f"{source}: rule {i}: {exc}") from None
    return parsed


def load_rules(path: str | Path) -> list[Rule]:
    """Read gate rules from YAML: a list of strings, or a mapping with one key `rules`.

    Errors name `path:line` of the offending rule.
    """
    path = Path(path)
    if not path.is_file():
        raise InputNotFound(f"gate file not found: {path}")
    try:
        root = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise GateRuleError(f"{path}{line}: invalid YAML ({getattr(exc, 'problem', exc)})") from None
    if isinstance(root, yaml.MappingNode):
        keys = [k.value for k, _ in root.value]
        if keys != ["rules"]:
            raise GateRuleError(f"{path}:{root.start_mark.line + 1}: expected only the key 'rules', got {keys}")
        root = root.value[0][1]
    if not isinstance(root, yaml.SequenceNode) or not root.value:
        raise GateRuleError(f"{path}: expected a non-empty list of rules")
    rules = []
    for node in root.value:
        where = f"{path}:{node.start_mark.line + 1}"
        if not isinstance(node, yaml.ScalarNode) or node.tag != "tag:yaml.org,2002:str":
            raise GateRuleError(f"{where}: each rule must be a string")
        try:
            rules.append(parse_rule(node.value))
        except GateRuleError as exc:
            raise GateRuleError(f"{where}: {exc}") from None
    return rules


def evaluate(rules: Sequence[Rule], outcomes: Sequence[SuiteOutcome]) -> GateResult:
    """Check every rule against the candidate's suites; the gate passes if all rules do.

    Raises:
        GateRuleError: a rule names `<suite>@<length>` for a length the suite's task ids do not name.
    """
    if not rules:
        raise GateRuleError("a gate needs at least one rule")
    by_suite: dict[str, SuiteOutcome] = {}
    for o in outcomes:
        if o.suite in by_suite:
            raise UserError(f"suite {o.suite!r} appears twice in the gate inputs")
        by_suite[o.suite] = o
    checks = [rule.check(by_suite) for rule in rules]
    return GateResult(all(c.passed for c in checks), checks)


def outcomes_from_results(
    base: EvalResults,
    cand: EvalResults,
    comparisons: Sequence[SuiteComparison],
    metric_comparisons: Sequence[SuiteComparison] = (),
) -> list[SuiteOutcome]:
    """Gate inputs from two results files and their paired comparisons (see results.compare
    and results.compare_metrics)."""
    base_metrics = {s.suite: {k: m.mean for k, m in s.metrics.items()} for s in base.suites}
    by_suite = {c.suite: c.comparison for c in comparisons}
    others: dict[str, dict[str, Comparison]] = {}
    for c in metric_comparisons:
        others.setdefault(c.suite, {})[c.metric] = c.comparison
    return [
        SuiteOutcome(
            suite=s.suite,
            track=s.track,
            candidate={k: m.mean for k, m in s.metrics.items()},
            base=base_metrics.get(s.suite),
            comparison=by_suite.get(s.suite),
            contamination_hits=s.contamination_hits,
            contaminated_rows=s.contaminated_rows,
            primary_metric=s.primary_metric,
            metric_comparisons=others.get(s.suite, {}),
        )
        for s in cand.suites
    ]


def _compared(base: EvalResults, cand: EvalResults, seed: int) -> list[SuiteOutcome]:
    """Gate inputs of two results, with the paired bootstrap of every shared suite and metric."""
    return outcomes_from_results(base, cand, compare(base, cand, seed=seed), compare_metrics(base, cand, seed=seed))


def _outcomes(base: EvalResults, cand: EvalResults, seed: int = 0) -> list[SuiteOutcome]:
    """Gate inputs of two results; a suite whose task ids name lengths also gets its outcome at
    each length (`SuiteOutcome.lengths`), compared over the same task ids restricted to it."""
    per_length: dict[str, dict[int, SuiteOutcome]] = {}
    for o in _compared(base.by_length(), cand.by_length(), seed):
        suite, _, length = o.suite.rpartition("@")
        per_length.setdefault(suite, {})[int(length)] = o
    return [replace(o, lengths=per_length.get(o.suite, {})) for o in _compared(base, cand, seed)]


def run_gate(rules: Sequence[Rule], base: EvalResults, cand: EvalResults, *, seed: int = 0) -> GateResult:
    """Compare candidate with base (paired bootstrap per shared suite and metric, and per length
    where task ids name lengths) and check the rules."""
    verdict = evaluate(rules, _outcomes(base, cand, seed))
    return GateResult(verdict.passed, verdict.rules, judged_identity(cand))
