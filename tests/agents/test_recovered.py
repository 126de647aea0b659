"""Recovered episodes (error -> feedback -> fix) exported as SFT rows with provenance, from a run's
stored episodes; the CLI; bad rows are one line."""

import json

import pytest
from typer.testing import CliRunner

from tempering.agents.policies import oracle, recover
from tempering.agents.recovered import export_recovered
from tempering.agents.render import AgentRenderer
from tempering.agents.rollout import EpisodeSettings
from tempering.agents.tasks import builtin_tasks, select
from tempering.agents.training import AgentRolloutSource
from tempering.cli import app
from tempering.config import GRPOSettings
from tempering.data.io import load_rows
from tempering.data.render import render_with_mask
from tests.agents.scripted_engine import PolicyEngine
from tests.test_cli_errors import one_line_error


@pytest.fixture
def run_dir(tmp_path, smol_tokenizer):
    """A run's trajectories.jsonl from two rollout batches: task 0 recovers (a malformed call, then
    the expert), every other task is solved at once (no error: not exported)."""
    tasks = select(builtin_tasks("tool_arith"), "train", [1])[:2]

    def policy(task, messages):
        return (recover if task.id == tasks[0].id else oracle)(task, messages)

    run = tmp_path / "runs" / "demo"
    run.mkdir(parents=True)
    grpo = GRPOSettings(prompts_per_step=2, group_size=2, max_new_tokens=80, dynamic_sampling=False)
    source = AgentRolloutSource(
        tasks,
        PolicyEngine(smol_tokenizer, policy, tasks),
        AgentRenderer(smol_tokenizer),
        None,
        grpo,
        EpisodeSettings(),
        1,
        0,
        store=run / "trajectories.jsonl",
    )
    source.next_batch()
    source.next_batch()
    return run, tasks


def test_recovered_episodes_become_sft_rows_with_provenance(run_dir, smol_tokenizer):
    run, tasks = run_dir
    path, rows, episodes = export_recovered(run)
    assert (path, rows, episodes) == (run / "recovered.jsonl", 4, 8)  # 2 rollouts x 2 episodes of task 0
    exported = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["provenance"]["rollout"] for r in exported] == [1, 1, 2, 2]
    first = exported[0]
    assert first["id"] == f"demo/r1/{tasks[0].id}/0"
    assert first["provenance"] == {
        "run": "demo",
        "rollout": 1,
        "step": 1,
        "task_id": tasks[0].id,
        "tier": 1,
        "sample": 0,
        "errors": 1,
        "invalid_calls": 1,
        "tool_errors": 0,
        "wrong_answers": 0,
    }
    roles = [m["role"] for m in first["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert first["messages"][3]["content"].startswith("error:")  # the feedback the model read
    # the malformed call stays as context with weight 0; the fix and the answer are trained on
    assert [m.get("weight") for m in first["messages"] if m["role"] == "assistant"] == [0, None, None]
    loaded = load_rows([str(path)])  # plain SFT data: loads and renders with the loss on assistant turns
    assert len(loaded.records) == 4 and not loaded.errors
    style = AgentRenderer(smol_tokenizer).style
    masked = render_with_mask(smol_tokenizer, first["messages"], style)
    unweighted = [{k: v for k, v in m.items() if k != "weight"} for m in first["messages"]]
    plain = render_with_mask(smol_tokenizer, unweighted, style)
    assert masked.input_ids == plain.input_ids
    trained = [t for t, y in zip(masked.input_ids, masked.labels) if y != -100]
    every = [t for t, y in zip(plain.input_ids, plain.labels) if y != -100]
    wrong = smol_tokenizer(first["messages"][2]["content"], add_special_tokens=False)["input_ids"]
    assert len(every) - len(trained) == len(wrong) + 1  # the erroneous turn and its end-of-turn token


def test_export_recovered_cli_prints_one_line_and_bad_rows_are_one_line(run_dir, tmp_path):
    run, _ = run_dir
    res = CliRunner().invoke(app, ["agent", "export-recovered", str(run), "--out", str(tmp_path / "r.jsonl")])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output.strip().splitlines()[-1]) == {
        "recovered": str(tmp_path / "r.jsonl"),
        "rows": 4,
        "episodes": 8,
    }
    with open(run / "trajectories.jsonl", "a") as f:
        f.write("{not json\n")
    line = one_line_error(CliRunner().invoke(app, ["agent", "export-recovered", str(run)]))
    assert "trajectories.jsonl:9" in line and "not a JSON episode row" in line
    line = one_line_error(CliRunner().invoke(app, ["agent", "export-recovered", str(tmp_path)]))
    assert "no trajectories.jsonl" in line


def test_one_sft_round_on_an_agent_stages_recovered_episodes_plans_in_a_pipeline(tmp_path):
    import yaml

    from tempering.pipeline.plan import PipelineError, load_plan

    agent = {"kind": "agent", "tasks": {"suites": ["tool_arith"]}, "train": {"steps": 2}}
    sft = {"kind": "sft", "model": "${agent.final}", "data": {"train": ["${agent.recovered}"]}, "train": {"steps": 2}}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"out": str(tmp_path / "runs"), "stages": {"agent": agent, "recovery": sft}}))
    assert [(s.name, s.kind) for s in load_plan(path).stages] == [("agent", "agent"), ("recovery", "sft")]
    sft["data"]["train"] = ["${agent.recovered_rows}"]
    path.write_text(yaml.safe_dump({"out": str(tmp_path / "runs"), "stages": {"agent": agent, "recovery": sft}}))
    with pytest.raises(PipelineError, match="no output 'recovered_rows'.*recovered"):
        load_plan(path)
