"""`temper grpo` on a `verifiers` environment (the one written with the library's classes in
tests/sources/test_verifiers_envs.py): its rubric is the reward, each reward function is logged."""

import json

import pytest
import yaml
from typer.testing import CliRunner

from tempering.cli import app
from tests.sources.test_verifiers_envs import SOURCE, WEIGHTS


def grpo(tmp_path, model: str, max_new_tokens: int, heldout: bool) -> dict:
    cfg = {
        "model": model,
        "lora": {"r": 4, "alpha": 8},
        "tasks": {"source": SOURCE, "n": 8},
        "grpo": {
            "prompts_per_step": 2,
            "group_size": 4,
            "max_new_tokens": max_new_tokens,
            "max_refills": 0,
            "truncation": "keep",
        },
        "train": {"steps": 2, "optim": {"lr": 1e-3}},
        "out": str(tmp_path / "runs"),
        "name": "vf",
    }
    cfg["heldout"] = {"tasks": {"source": SOURCE, "split": "heldout", "n": 2}, "max_new_tokens": 4} if heldout else None
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = CliRunner().invoke(app, ["grpo", str(path)])
    assert res.exit_code == 0, res.output
    run = tmp_path / "runs" / "vf"
    steps = [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "reward_mean" in r]
    return {"steps": steps, "summary": json.loads((run / "summary.json").read_text())}


def assert_rubric_logged(steps: list[dict]) -> None:
    """Every step logs each reward function's mean, and the reward mean is their weighted sum
    (truncated answers keep their reward here, so every sample counts)."""
    assert len(steps) == 2
    for step in steps:
        for name in [*WEIGHTS, "num_turns", "correct"]:
            assert f"component/{name}" in step, (name, sorted(step))
        weighted = sum(w * step[f"component/{name}"] for name, w in WEIGHTS.items())
        assert step["reward_mean"] == pytest.approx(weighted)
        assert step["component/num_turns"] == 1.0


def test_grpo_trains_on_a_verifiers_environment_with_a_tiny_model(tmp_path, tiny_dir):
    run = grpo(tmp_path, str(tiny_dir), max_new_tokens=6, heldout=True)
    assert_rubric_logged(run["steps"])
    assert run["summary"]["heldout_after"]["reward"] >= 0 and run["summary"]["heldout_after"]["verifier_errors"] == 0


@pytest.mark.slow
def test_grpo_trains_on_a_verifiers_environment_with_the_default_model(tmp_path):
    run = grpo(tmp_path, "smollm2-135m-instruct", max_new_tokens=12, heldout=False)
    assert_rubric_logged(run["steps"])
    assert run["summary"]["steps"] == 2
