"""The agent recipe on the one training sequence: refused on a private suite's prompts before anything is
recorded, as every other trainer does (the guard step of the one training sequence)."""

import json

import pytest

from tempering.agents.config import AgentConfig
from tempering.evals.leakage import PrivateSuiteOverlap
from tempering.recipes.agent import run_agent
from tests.evals.conftest import write_jsonl, write_suite
from tests.evals.test_leakage import EVAL
from tests.recipes.conftest import tiny_dir  # noqa: F401  (fixture)


def test_agent_training_on_a_private_suites_prompt_is_refused_before_a_run_is_recorded(tmp_path, monkeypatch):
    suites = tmp_path / "suites"
    suites.mkdir()
    write_suite(suites, "holdout", write_jsonl(suites / "holdout.jsonl", EVAL), private=True)
    monkeypatch.setenv("TEMPERING_SUITES", str(suites))
    task = {
        "id": "leak-train-000",
        "env": "leaky",
        "split": "train",
        "prompt": "Use the calculator. " + EVAL[12]["prompt"],
        "tools": ["calculator", "submit"],
        "goal": {"type": "answer", "value": "1"},
        "max_steps": 4,
    }
    tasks = tmp_path / "leaky.jsonl"
    tasks.write_text(
        json.dumps(task) + "\n" + json.dumps({**task, "id": "leak-heldout-000", "split": "heldout"}) + "\n"
    )
    cfg = AgentConfig.model_validate(
        {"tasks": {"suites": [str(tasks)]}, "train": {"steps": 1}, "out": str(tmp_path / "runs")}
    )
    with pytest.raises(PrivateSuiteOverlap, match="holdout"):
        run_agent(cfg)
    assert not (tmp_path / "runs").exists()


def test_agent_training_runs_end_to_end_through_the_sequence_on_a_tiny_model(tmp_path, tiny_dir):
    """Held-out pass, expert SFT, one RL step, held-out pass again; one recorded run with the
    summary keys every trainer has (steps, guard, before/after) and the agent's own (gains)."""
    cfg = AgentConfig.model_validate(
        {
            "model": str(tiny_dir),
            "tasks": {"suites": ["tool_arith"], "eval_limit": 2},
            "episode": {"max_context_tokens": 256},
            "sft": {"steps": 1, "batch_size": 2, "max_length": 256},
            "rl": {"max_new_tokens": 8, "prompts_per_step": 1, "group_size": 2},
            "train": {"steps": 1},
            "eval": {"max_new_tokens": 8},
            "out": str(tmp_path / "runs"),
            "name": "tiny-agent",
        }
    )
    summary = run_agent(cfg)
    assert summary["steps"] == 1 and summary["sft"]["steps"] == 1
    assert set(summary["before"]) == set(summary["after"]) == set(summary["gain"]) == {"tool_arith"}
    assert summary["after_sft"]["tool_arith"]["all"]["completion_rate"] >= 0.0
    assert (tmp_path / "runs" / "tiny-agent" / "trajectories.jsonl").is_file()
    assert run_agent(cfg) == summary  # a finished run returns its recorded summary


def test_the_held_out_pass_records_per_task_success_and_destructive_calls():
    """`evaluate_agent` keeps, per task, whether it succeeded and whether `safe_actions` flagged a
    call: the paired destructive-action rate of docs/safety.md is read from these."""
    from types import SimpleNamespace

    from tempering.agents.env import EpisodeStats
    from tempering.agents.rollout import AgentBatch
    from tempering.recipes.agent import evaluate_agent

    def episode(tid, success, unsafe):
        stats = EpisodeStats(steps=2, success=success, unsafe_actions=unsafe)
        return SimpleNamespace(task=SimpleNamespace(id=tid, tier=1), stats=stats)

    batch = AgentBatch(groups=[[episode("a", True, 0)], [episode("b", True, 2)], [episode("c", False, 1)]])
    out = evaluate_agent(batch)  # type: ignore[arg-type]
    assert out["success"] == {"a": True, "b": True, "c": False}
    assert out["unsafe"] == {"a": False, "b": True, "c": True}
    assert out["all"]["safe_rate"] == 1 / 3 and out["all"]["completion_rate"] == 2 / 3


def test_agent_rl_measures_its_eval_suites_every_eval_every_steps_and_keeps_the_best(tmp_path, tiny_dir):
    """`train.eval_every` reaches agent RL: each eval suite's held-out pass is an `eval` event named
    `heldout/<suite>/<metric>`, and `keep_best` watches it (a tie is no improvement: the first stays)."""
    from tempering.tracking.events import read_events

    cfg = AgentConfig.model_validate(
        {
            "model": str(tiny_dir),
            "tasks": {"suites": ["tool_arith"], "eval_limit": 2},
            "episode": {"max_context_tokens": 256},
            "rl": {"max_new_tokens": 8, "prompts_per_step": 1, "group_size": 2},
            "train": {"steps": 2, "eval_every": 1, "keep_best": "heldout/tool_arith/completion_rate"},
            "eval": {"max_new_tokens": 8},
            "out": str(tmp_path / "runs"),
            "name": "agent-best",
        }
    )
    summary = run_agent(cfg)
    run = tmp_path / "runs" / "agent-best"
    evals = read_events(run / "metrics.jsonl", "eval")
    assert [e["step"] for e in evals] == [1, 2]
    rates = [e["heldout/tool_arith/completion_rate"] for e in evals]
    best_step = 2 if rates[1] > rates[0] else 1
    assert summary["best"] == {"step": best_step, "value": rates[best_step - 1]}
    assert (run / "best").is_dir()
