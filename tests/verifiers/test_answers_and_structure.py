"""Verifiers on hand-written completions; `temper verify` prints the Reward last."""

import json

import pytest
from typer.testing import CliRunner

from tempering.cli import app
from tempering.numbers import parse_number
from tempering.types import Task
from tempering.verifiers import UnknownVerifier, score
from tempering.verifiers.answers import extract_final_answer


def task(verifier, **kw):
    return Task(id="t", prompt="q", verifier=verifier, **kw)


@pytest.mark.parametrize(
    "text,answer",
    [
        ("so \\boxed{\\frac{1}{2}} and then \\boxed{42}", "42"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("Thinking...\nThe answer is 17.\nDone", "17"),
        ("answer: blue", "blue"),
        ("  122 \n", "122"),
    ],
)
def test_final_answer_rule(text, answer):
    assert extract_final_answer(text) == answer


def test_numeric():
    t = task({"type": "numeric", "answer": "122"})
    assert score(t, "59+63 = 122").value == 1.0
    assert score(t, "The answer is 122.0").value == 1.0
    assert score(t, "59+63 is 189.").value == 0.0
    assert score(t, "no idea").value == 0.0
    assert score(task({"type": "numeric", "answer": "1,000"}), "1000").value == 1.0
    assert parse_number("x = -3/4") == parse_number("-0.75")
    assert score(task({"type": "numeric", "answer": "3.14159", "rel_tol": 1e-3}), "about 3.1416").value == 1.0


def test_exact_and_regex():
    assert score(task({"type": "exact", "answer": "Paris"}), "The answer is  paris.").value == 1.0
    assert score(task({"type": "exact", "answer": "Paris"}), "Lyon").value == 0.0
    assert score(task({"type": "regex", "pattern": r"[A-D]"}), "answer: C").value == 1.0
    assert score(task({"type": "regex", "pattern": r"[A-D]"}), "answer: CD").value == 0.0


def test_math_verify_offline():
    t = task({"type": "math", "answer": "\\frac{1}{2}"})
    assert score(t, "so the result is \\boxed{0.5}").value == 1.0
    assert score(t, "\\boxed{\\frac{2}{4}}").value == 1.0
    assert score(t, "\\boxed{\\frac{1}{3}}").value == 0.0
    assert score(task({"type": "math", "answer": "\\{1,2\\}"}), "\\boxed{\\{2,1\\}}").value == 1.0


def test_format_tags_and_schema():
    spec = {"type": "format", "tags": ["think", "answer"], "json_schema": {"type": "object", "required": ["x"]}}
    assert score(task(spec), '<think>hm</think><answer>{"x": 1}</answer>').value == 1.0
    bad = score(task(spec), '<answer>{"y": 1}</answer><think>late</think>')
    assert bad.value == 0.0 and bad.detail is not None
    assert "missing <answer>" in bad.detail and "missing 'x'" in bad.detail


TOOLS = {"shell": {"type": "object", "required": ["cmd"], "properties": {"cmd": {"type": "string"}}}}


def test_tool_call_schema():
    spec = {"type": "tool_call", "tools": TOOLS}
    good = '<tool_call>{"name": "shell", "arguments": {"cmd": "ls"}}</tool_call>'
    assert score(task(spec), good).value == 1.0
    r = score(
        task(spec), good + '<tool_call>{"name": "shell", "arguments": {"cmd": 3}}</tool_call><tool_call>{x}</tool_call>'
    )
    assert r.value == pytest.approx(1 / 3) and r.components == {"valid_calls": 1.0, "invalid_calls": 2.0}
    assert score(task(spec), "no calls").value == 0.0


def test_composite_logs_each_component():
    spec = {
        "type": "composite",
        "parts": [
            {"name": "plan", "weight": 0.5, "verifier": {"type": "regex", "pattern": "(?i)plan", "on": "completion"}},
            {"name": "bad_calls", "per_invalid_call": -0.1, "verifier": {"type": "tool_call", "tools": TOOLS}},
            {"name": "goal", "weight": 2.0, "verifier": {"type": "numeric", "answer": "7"}},
        ],
    }
    text = 'Plan: count.\n<tool_call>{"name": "rm", "arguments": {}}</tool_call>\nThe answer is 7'
    r = score(task(spec), text)
    assert r.components == {"plan": 0.5, "bad_calls": pytest.approx(-0.1), "goal": 2.0}
    assert r.value == pytest.approx(2.4)


def test_unknown_verifier_and_bad_tasks():
    with pytest.raises(UnknownVerifier, match="unknown verifier type 'nope'"):
        score(task({"type": "nope"}), "x")
    with pytest.raises(ValueError, match="exactly one of 'prompt' or 'messages'"):
        Task(id="t", verifier={"type": "exact", "answer": "a"})


def test_verify_cli_prints_reward_last(tmp_path):
    (tmp_path / "task.json").write_text(
        json.dumps(
            {
                "id": "add-0001",
                "prompt": "What is 59+63? Answer with just the number.",
                "verifier": {"type": "numeric", "answer": "122"},
                "track": "reasoning",
                "difficulty": None,
                "source": "builtin:arithmetic",
            }
        )
    )
    (tmp_path / "c.txt").write_text("122")
    res = CliRunner().invoke(
        app, ["verify", "--task", str(tmp_path / "task.json"), "--completion", str(tmp_path / "c.txt")]
    )
    assert res.exit_code == 0, res.output
    reward = json.loads(res.stdout.strip().splitlines()[-1])
    assert reward["value"] == 1.0 and reward["components"] == {"correct": 1.0}


def test_numeric_close_gives_graded_credit_and_can_require_a_bare_number(ctx):
    from tempering.verifiers.base import score_spec

    spec = {"type": "numeric_close", "answer": "155"}
    assert score_spec(spec, "155", ctx).value == 1.0
    assert score_spec(spec, "67 + 88 = 154", ctx).value == pytest.approx(0.9)  # 1 - 1/10
    assert score_spec(spec, "160", ctx).value == pytest.approx(0.5)  # 1 - 5/10
    assert score_spec(spec, "43", ctx).value == 0.0  # far: no credit
    assert score_spec({**spec, "scale": 20}, "145", ctx).value == pytest.approx(0.5)
    bare = {**spec, "bare_only": True}
    assert score_spec(bare, " 154\n", ctx).value == pytest.approx(0.9)
    assert score_spec(bare, "67 + 88 = 154", ctx).value == 0.0
    assert score_spec(spec, "no number", ctx).value == 0.0


def test_the_documented_extraction_task_scores_each_field_as_the_docs_say():
    """The `format` section of docs/verifiers.md: its example task, scored as its text says."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "verifiers.md").read_text()
    section = doc.split("## `format`: tags and JSON", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```json\n(.*?)```", section, re.DOTALL)
    t = Task.model_validate(json.loads(block))  # the task loads: every spec passes its check
    right = score(t, '<answer>{"vendor": "Acme GmbH", "total": 1234.50, "currency": "EUR"}</answer>')
    assert right.value == 1.0 and right.components == {"shape": 0.25, "vendor": 0.25, "total": 0.25, "currency": 0.25}
    text_total = score(t, '<answer>{"vendor": "Acme GmbH", "total": "1,234.50", "currency": "EUR"}</answer>')
    assert text_total.value == 0.5 and text_total.components["shape"] == text_total.components["total"] == 0.0
    assert score(t, "Acme GmbH, 1234.50 EUR").value == 0.0


@pytest.mark.parametrize(
    "spec,named",
    [
        ({"json_schema": {"type": "array", "items": {"type": "string"}}}, "items would not be checked"),
        ({"json_schema": {"type": "object", "properties": {"a": {"pattern": "x"}}}}, "properties.a: pattern"),
        ({"json_schema": {"type": "float"}}, "json_schema.type 'float' is not one of"),
        ({"tags": "answer"}, "tags must be a list"),
        ({"schema": {"type": "object"}}, "unknown field(s) schema"),
    ],
)
def test_a_format_rule_it_would_not_check_is_refused_at_load(spec, named):
    from tempering.verifiers.base import spec_problem

    problem = spec_problem({"type": "format", **spec})
    assert problem is not None and named in problem, problem


def test_format_enum_uses_json_equality():
    spec = {"type": "format", "json_schema": {"type": "object", "properties": {"n": {"enum": [1]}}}}
    assert score(task(spec), '{"n": 1.0}').value == 1.0
    assert score(task(spec), '{"n": true}').value == 0.0  # Python's True == 1; JSON's true is not 1
    assert score(task({"type": "format", "tags": ["a+b"]}), "<a+b>x</a+b>").value == 1.0  # a tag is literal
