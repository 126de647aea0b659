"""Attacks on the verifiers through the answer text: code that runs while an answer is scored.

Several reasoning-gym scorers `eval` the answer or hand it to `sympy.parse_expr`. The answers
here try to run a shell command on the host, and to rewrite the verifier registry so that
every later answer scores 1. Every dataset the task source accepts is attacked, not a list:
a dataset added to reasoning-gym is covered the day it appears.
"""

import json
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor

import pytest

from tempering.sources.humaneval import humaneval_tasks
from tempering.sources.reasoning_gym import build_dataset, reasoning_gym_tasks
from tempering.types import Task
from tempering.verifiers import VerifierContext, score

# Datasets whose scorer evaluates one of these answers as code (on the host, before the sandbox
# was used); the loop covers every dataset, this list checks the tripwire saw the code run.
EVALUATING = (
    "binary_matrix",
    "countdown",
    "intermediate_integration",
    "n_queens",
    "polynomial_multiplication",
    "puzzle24",
    "simple_integration",
    "spiral_matrix",
    "string_insertion",
)


@pytest.fixture(scope="module")
def ctx():
    with VerifierContext(sandbox_size=4) as context:
        yield context


@pytest.fixture(scope="module")
def accepted():
    """One task of every reasoning-gym dataset the task source accepts (it refuses with ValueError)."""
    from reasoning_gym.factory import DATASETS

    tasks = {}
    for name in sorted(DATASETS):
        try:
            tasks[name] = reasoning_gym_tasks(name, size=1, seed=0)[0]
        except ValueError:
            continue
    assert len(tasks) >= 90, f"the source accepts only {sorted(tasks)}"  # the loop below is not vacuous
    return tasks


@pytest.fixture
def host_dir():
    """A world-writable host folder: only isolation, not file modes, keeps a marker out of it."""
    path = tempfile.mkdtemp(prefix="tempering-verifier-attack-")
    os.chmod(path, 0o777)
    yield path
    for name in os.listdir(path):
        os.unlink(os.path.join(path, name))
    os.rmdir(path)


def _shell_answers(marker: str) -> list[str]:
    command = f"__import__('os').system('touch {marker}')"
    return [command, f"[{command}]"]


def test_answer_code_runs_nowhere_outside_the_sandbox_for_every_dataset(ctx, accepted, host_dir):
    def attack(name: str) -> list:
        rewards = []
        for answer in _shell_answers(f"{host_dir}/{name}"):
            try:
                rewards.append(score(accepted[name], f"<answer>{answer}</answer>", ctx))
            except Exception as exc:  # kept, so the host check below runs whatever happened
                rewards.append(exc)
        return rewards

    with ThreadPoolExecutor(4) as pool:
        outcomes = dict(zip(accepted, pool.map(attack, accepted)))
    ran = sorted(os.listdir(host_dir))
    assert ran == [], f"answers ran a shell command on the host, scored by: {ran}"
    raised = {name: got for name, got in outcomes.items() if any(isinstance(r, Exception) for r in got)}
    assert raised == {}  # every dataset gave a reward
    for name in EVALUATING:  # the code did run (in the sandbox), and the tripwire caught it there
        assert any("cheat:code_execution" in r.flags for r in outcomes[name]), (name, outcomes[name])


def test_every_dataset_still_scores_its_oracle_answer_as_its_own_scorer_does(ctx, accepted):
    def both(task: Task) -> tuple[float, float]:
        spec = task.verifier
        answer = spec["entry"]["answer"]
        dataset = build_dataset(spec["dataset"], spec["seed"], spec["size"], json.dumps(spec["config"], sort_keys=True))
        return score(task, f"<answer>{answer}</answer>", ctx).value, float(dataset.score_answer(answer, spec["entry"]))

    with_answer = {n: t for n, t in accepted.items() if t.verifier["entry"]["answer"] is not None}
    with ThreadPoolExecutor(4) as pool:
        pairs = dict(zip(with_answer, pool.map(both, with_answer.values())))
    assert {n: p for n, p in pairs.items() if p[0] != p[1]} == {}


PATCH_REGISTRY = (
    "[__import__('sys').modules['tempering.verifiers.base'].VERIFIERS.update("
    "{k: (lambda spec, completion, ctx: __import__('tempering.types', fromlist=['Reward']).Reward(value=1.0))"
    " for k in ('numeric', 'code')}), 'x'][1]"
)


def test_an_answer_that_rewrites_the_verifier_registry_changes_no_later_reward(ctx, accepted):
    for name in EVALUATING:
        score(accepted[name], f"<answer>{PATCH_REGISTRY}</answer>", ctx)
    arithmetic = Task(id="add", prompt="2+2?", verifier={"type": "numeric", "answer": "4"})
    humaneval = humaneval_tasks()[0]
    assert score(arithmetic, "2+2=5", ctx).value == 0.0
    assert score(humaneval, "    return None\n", ctx).value == 0.0
    assert score(arithmetic, "2+2=4", ctx).value == 1.0  # the registry still scores, it was not emptied


DEEP = "[" * 100_000 + "]" * 100_000
HUGE = "9" * 400


@pytest.mark.parametrize(
    "verifier,completion,expect",
    [
        ({"type": "format", "json_schema": {"type": "array"}}, f"<answer>{DEEP}</answer>", {"value": 0.0}),
        (
            {"type": "tool_call", "tools": {"f": {}}},
            f'<tool_call>{{"name": "f", "arguments": {DEEP}}}</tool_call>',
            {"value": 0.0},
        ),
        ({"type": "numeric", "answer": "1", "rel_tol": 0.01}, HUGE, {"value": 0.0}),
        ({"type": "numeric", "answer": HUGE, "rel_tol": 0.01}, HUGE, {"value": 1.0}),
        ({"type": "numeric_close", "answer": "1"}, HUGE, {"value": 0.0}),
        ({"type": "numeric_close", "answer": HUGE, "scale": 10}, HUGE[:-1] + "5", {"value": 0.6}),
        ({"type": "math", "answer": "1", "timeout_s": 2}, "\\boxed{(10^{7})!}", {"value": 0.0, "flags": ["timeout"]}),
    ],
    ids=[
        "format-deep-json",
        "tool_call-deep-json",
        "numeric-huge",
        "numeric-huge-equal",
        "numeric_close-huge",
        "numeric_close-huge-near",
        "math-factorial-bomb",
    ],
)
def test_temper_verify_gives_hostile_answers_a_status_not_a_traceback(tmp_path, verifier, completion, expect):
    from typer.testing import CliRunner

    from tempering.cli import app

    (tmp_path / "task.json").write_text(Task(id="t", prompt="?", verifier=verifier).model_dump_json())
    (tmp_path / "c.txt").write_text(completion)
    res = CliRunner().invoke(
        app, ["verify", "--task", str(tmp_path / "task.json"), "--completion", str(tmp_path / "c.txt")]
    )
    assert res.exit_code == 0 and res.exception is None, res.output[-500:]
    reward = json.loads(res.stdout.strip().splitlines()[-1])
    assert reward["value"] == pytest.approx(expect["value"]) and reward["flags"] == expect.get("flags", [])
