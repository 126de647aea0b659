"""GRPO's held-out monitor is an eval suite: `temper grpo` and `temper eval run` give identical
per-task results for the same model, tasks and seed; without held-out tasks, a seeded split
of the training tasks is held out."""

import json

import pytest
import yaml
from typer.testing import CliRunner

from tempering.cli import app
from tempering.config import GRPOConfig
from tempering.recipes.grpo import heldout_tasks, split_heldout
from tempering.types import Task
from tests.evals.conftest import env, recall_dir, recall_model, recall_tasks, write_jsonl  # noqa: F401 (fixtures)

runner = CliRunner()


def _samples(path):
    return sorted(
        (r["task_id"], r["sample"], r["completion"], r["reward"], r["status"])
        for r in map(json.loads, path.read_text().splitlines())
    )


def test_grpo_heldout_and_eval_run_give_identical_per_task_results(recall_model, recall_dir, env):
    _, _, rows = recall_model
    held = write_jsonl(env / "held.jsonl", rows[:12])
    train = write_jsonl(env / "train.jsonl", recall_tasks(8, seed=9, exclude={r["prompt"] for r in rows}))
    sampling = {"temperature": 1.0, "max_new_tokens": 3}  # sampled, so equal results need equal seeding
    cfg = {
        "model": str(recall_dir),
        "lora": {"r": 4, "alpha": 8, "last_layers": 1},
        "tasks": {"source": str(train)},
        "heldout": {"tasks": {"source": str(held)}, **sampling},
        "grpo": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 3},
        "train": {"steps": 1, "eval_every": 1, "seed": 0, "precision": "fp32", "checkpoint": {"every": 1}},
        "out": str(env / "runs"),
        "name": "g",
    }
    (env / "grpo.yaml").write_text(yaml.safe_dump(cfg))
    res = runner.invoke(app, ["grpo", str(env / "grpo.yaml")])
    assert res.exit_code == 0, res.output
    suite = {
        "name": "tasks",
        "tasks": {"source": str(held)},
        "templates": ["{prompt}"],
        "sampling": {**sampling, "n": 1},
        "metrics": ["mean_reward", "accuracy"],
    }
    (env / "heldout.yaml").write_text(yaml.safe_dump(suite))
    res = runner.invoke(
        app,
        [
            "eval",
            "run",
            str(env / "heldout.yaml"),
            "--model",
            str(recall_dir),
            "--out",
            str(env / "eval"),
            "--precision",
            "fp32",
            "--first-seed",
            "0",
            "--no-cache",
        ],
    )
    assert res.exit_code == 0, res.output

    step0 = env / "runs" / "g" / "heldout" / "step-000000"  # before the first update: the same weights
    monitored = json.loads((step0 / "results.json").read_text())["suites"][0]
    evaluated = json.loads((env / "eval" / "results.json").read_text())["suites"][0]
    assert monitored["task_scores"] == evaluated["task_scores"] and len(evaluated["task_scores"]) == 12
    assert monitored["metrics"] == evaluated["metrics"] and monitored["suite_hash"] == evaluated["suite_hash"]
    assert _samples(step0 / "samples.jsonl") == _samples(env / "eval" / "samples.jsonl")
    summary = json.loads((env / "runs" / "g" / "summary.json").read_text())
    assert summary["heldout_before"]["reward"] == pytest.approx(evaluated["metrics"]["mean_reward"]["mean"])
    assert (env / "runs" / "g" / "heldout" / "step-000001" / "samples.jsonl").is_file()


def _tasks(n):
    return [Task(id=f"t{i}", prompt=f"q {i}", verifier={"type": "numeric", "answer": str(i)}) for i in range(n)]


def test_heldout_split_is_seeded_disjoint_and_capped():
    tasks = _tasks(50)
    train, held = split_heldout(tasks, size=100, seed=0)
    assert len(held) == 10 and len(train) == 40  # at most a fifth is held out
    assert not {t.id for t in held} & {t.id for t in train}
    assert split_heldout(tasks, size=100, seed=0) == (train, held)
    assert {t.id for t in split_heldout(tasks, size=100, seed=1)[1]} != {t.id for t in held}
    assert len(split_heldout(tasks, size=3, seed=0)[1]) == 3
    dup = [*tasks, Task(id="dup", prompt=held[0].prompt, verifier={"type": "numeric", "answer": "0"})]
    train, held = split_heldout(dup, size=10, seed=0)
    assert held[0].prompt not in {t.prompt for t in train}  # disjoint by prompt, not only by id
    with pytest.raises(ValueError, match="too few"):
        split_heldout(_tasks(4), size=10, seed=0)


def test_grpo_without_heldout_tasks_holds_out_a_recorded_split_of_its_training_tasks(tmp_path):
    cfg = GRPOConfig.model_validate(
        {"tasks": {"source": "builtin:arithmetic", "n": 40}, "train": {"steps": 1}, "heldout": {"split_size": 5}}
    )
    assert cfg.heldout.tasks is None  # no built-in arithmetic held-out set by default
    tasks = _tasks(40)
    train, held = heldout_tasks(cfg, tasks, tmp_path)
    assert len(held) == 5 and len(train) == 35 and not {t.id for t in held} & {t.id for t in train}
    record = json.loads((tmp_path / "heldout" / "split.json").read_text())
    assert record["heldout_ids"] == [t.id for t in held] and record["seed"] == cfg.train.seed


def test_configured_heldout_chat_tasks_overlap_training_only_when_their_messages_do(tmp_path):
    """Tasks given as `messages` (no `prompt`) are compared by their conversation, not by a None prompt."""

    def chat_task(i: int, text: str) -> Task:
        return Task(id=f"c{i}", messages=[{"role": "user", "content": text}], verifier={"type": "exact", "answer": "x"})

    held_file = write_jsonl(tmp_path / "held.jsonl", [chat_task(9, "held out").model_dump(exclude_none=True)])
    cfg = GRPOConfig.model_validate(
        {
            "tasks": {"source": "builtin:arithmetic"},
            "train": {"steps": 1},
            "heldout": {"tasks": {"source": str(held_file)}},
        }
    )
    train, held = heldout_tasks(cfg, [chat_task(0, "train a"), chat_task(1, "train b")], tmp_path)
    assert [t.id for t in held] == ["c9"] and len(train) == 2
    with pytest.raises(ValueError, match="1 held-out prompts also appear"):
        heldout_tasks(cfg, [chat_task(0, "held out")], tmp_path)


def test_heldout_eval_reports_its_wait_for_the_engine_apart_from_its_whole_time(tmp_path, monkeypatch):
    """An asynchronous sampler holds the engine until its batch is sampled: the eval's `eval_wait_s`
    is that wait (sampling time a clock without evaluations must still count), `eval_s` the whole.
    A fake clock: the borrow takes 3 s to grant, the suite 5 s."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    import tempering.recipes.grpo as grpo

    now = [100.0]
    monkeypatch.setattr(grpo, "time", SimpleNamespace(perf_counter=lambda: now[0]))

    def suite_run(*args, **kwargs):
        now[0] += 5.0
        return {"reward": 0.5, "accuracy": 0.25}

    monkeypatch.setattr(grpo, "heldout_eval", suite_run)

    @contextmanager
    def borrow():
        now[0] += 3.0  # the sampler finishes its batch
        yield

    cfg = GRPOConfig.model_validate(
        {
            "model": "smollm2-135m-instruct",
            "tasks": {"source": "builtin:arithmetic", "ops": "+", "n": 20},
            "heldout": {"tasks": {"source": "builtin:arithmetic", "ops": "+", "n": 4, "split": "heldout"}},
            "train": {"steps": 1},
        }
    )
    monitor = grpo.GRPOHeldout(cfg, engine=None, tasks=[], run_dir=tmp_path, borrow=borrow)  # type: ignore[arg-type]
    values = monitor.measure(7, SimpleNamespace(event=lambda *a, **k: None))  # type: ignore[arg-type]
    assert values["heldout/tasks/eval_wait_s"] == 3.0
    assert values["heldout/tasks/eval_s"] == 8.0
    assert values["heldout/tasks/accuracy"] == 0.25
