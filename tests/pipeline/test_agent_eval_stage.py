"""A pipeline `eval` stage runs agent suites (`agent:<suite>`) through the same `evaluate_config`
as `temper eval run`, and a gate reads their metrics like any other suite's."""

import json
from pathlib import Path

import pytest

from tempering.pipeline.plan import PipelineError, load_plan
from tempering.pipeline.runner import RECORD
from tempering.runs.registry import Registry
from tests.recipes.test_loop import invoke, last_json, write_pipeline


@pytest.fixture(scope="module")
def tiny_agent_model(tmp_path_factory, smol_tokenizer):
    from tests.conftest import tiny_llama

    path = tmp_path_factory.mktemp("tiny")
    model = tiny_llama(vocab=49152, seed=3)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    model.save_pretrained(path)
    smol_tokenizer.save_pretrained(path)
    return str(path)


def agent_eval(model: str, *suites: str) -> dict:
    return {"kind": "eval", "model": model, "suites": list(suites), "limit": 1, "threads": 1, "precision": "fp32"}


def test_the_plan_accepts_agent_suites_and_names_an_unknown_one(tmp_path, tiny_agent_model):
    plan = load_plan(write_pipeline(tmp_path, {"e": agent_eval(tiny_agent_model, "agent:workspace", "arithmetic")}))
    assert plan.stages[0].keys["suites"] == ["agent:workspace", "arithmetic"]
    with pytest.raises(PipelineError, match=r"stage 'e'.*nope"):
        load_plan(write_pipeline(tmp_path, {"e": agent_eval(tiny_agent_model, "agent:nope")}))
    with pytest.raises(PipelineError, match=r"stage 'e'.*missing\.jsonl"):
        load_plan(write_pipeline(tmp_path, {"e": agent_eval(tiny_agent_model, "agent:missing.jsonl")}))


def test_a_harbor_folder_is_resolved_against_the_pipeline_file(tmp_path, tiny_agent_model):
    from tests.agents.harbor_helpers import write_task

    write_task(tmp_path / "tasks")
    plan = load_plan(write_pipeline(tmp_path, {"e": agent_eval(tiny_agent_model, "agent:harbor:tasks")}))
    assert plan.stages[0].keys["suites"] == [f"agent:harbor:{tmp_path / 'tasks'}"]
    with pytest.raises(PipelineError, match=r"stage 'e'.*gone"):
        load_plan(write_pipeline(tmp_path, {"e": agent_eval(tiny_agent_model, "agent:harbor:gone")}))


def test_a_pipeline_gates_on_an_agent_suite(tmp_path, monkeypatch, tiny_agent_model):
    """Two gates on the same agent metric: the one the figures meet passes, the other rejects."""
    monkeypatch.setenv("TEMPERING_CACHE", str(tmp_path / "cache"))
    met, unmet = "agent:tool_arith.completion >= base", "agent:tool_arith.completion >= base + 0.5"
    gate = {"kind": "gate", "base": "${baseline.results}", "candidate": "${after.results}"}
    stages = {
        "baseline": agent_eval(tiny_agent_model, "agent:tool_arith"),
        "after": agent_eval(tiny_agent_model, "agent:tool_arith"),
        "met": {**gate, "rules": [met]},
        "unmet": {**gate, "rules": [unmet]},
    }
    res = invoke(write_pipeline(tmp_path, stages))
    out = last_json(res.output)
    assert out["status"] == "rejected" and res.exit_code == 1, res.output
    assert (out["stages"]["met"]["status"], out["stages"]["unmet"]["status"]) == ("done", "rejected")
    for name, rule, passed in (("met", met, True), ("unmet", unmet, False)):
        verdict = json.loads(Path(out["stages"][name]["outputs"]["verdict"]).read_text())
        assert [(r["rule"], r["passed"]) for r in verdict["rules"]] == [(rule, passed)]
    # recorded like any suite: results.json, the stage's summary, the gate's eval in the registry
    results = json.loads(Path(out["stages"]["after"]["outputs"]["results"]).read_text())
    (suite,) = results["suites"]
    assert suite["suite"] == "agent:tool_arith" and suite["track"] == "agent" and len(suite["task_scores"]) == 1
    record = json.loads((Path(out["stages"]["after"]["run_dir"]) / RECORD).read_text())
    assert "completion" in record["summary"]["suites"]["agent:tool_arith"]
    with Registry(tmp_path / "runs" / "registry.sqlite") as reg:
        gated = [e for e in reg.evals() if e["gate"] is not None]
    assert len(gated) == 2 and all("agent:tool_arith" in e["metrics"] for e in gated)


def test_an_agent_task_file_is_resolved_against_the_pipeline_and_hashed_by_its_tasks(tmp_path, tiny_agent_model):
    from tempering.pipeline.runner import dry_run

    row = {"id": "a", "env": "x", "prompt": "p", "tools": ["submit"], "goal": {"type": "answer", "value": "1"}}
    (tmp_path / "tasks").mkdir()
    tasks = tmp_path / "tasks" / "t.jsonl"
    tasks.write_text(json.dumps({**row, "split": "heldout"}) + "\n")
    path = write_pipeline(tmp_path, {"e": agent_eval(tiny_agent_model, "agent:tasks/t.jsonl")})
    plan = load_plan(path)
    assert plan.stages[0].keys["suites"] == [f"agent:{tasks}"]
    before = dry_run(plan)[0]["hash"]
    assert dry_run(load_plan(path))[0]["hash"] == before
    tasks.write_text(json.dumps({**row, "split": "heldout", "goal": {"type": "answer", "value": "2"}}) + "\n")
    assert dry_run(load_plan(path))[0]["hash"] != before  # an edited task is a new stage


@pytest.mark.parametrize(
    "key, value", [("quantize", "int8"), ("scale", {}), ("rope_scaling", {"type": "linear", "factor": 2.0})]
)
def test_keys_the_agent_runner_does_not_honour_are_refused_not_ignored(tmp_path, tiny_agent_model, key, value):
    """Both paths validate the same EvalConfig: the plan refuses the stage before any work."""
    stage = {**agent_eval(tiny_agent_model, "agent:tool_arith"), key: value}
    with pytest.raises(
        PipelineError, match=rf"stage 'e'.*{key} with agent suites \(agent:tool_arith\) is not supported"
    ):
        load_plan(write_pipeline(tmp_path, {"e": stage}))
