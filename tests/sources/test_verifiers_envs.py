"""`verifiers` environments (written here with the library's own classes) as a task source: their
rows become Tasks, their rubric scores Tempering's completions, a Tempering eval runs on them, and
the scores equal what the library's own rubric API computes on the same completions.

This module is also the environment: `verifiers:tests.sources.test_verifiers_envs` loads it
through the library's `load_environment(env_id, **env_args)`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from importlib.metadata import version
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

ENV_ID = "tests.sources.test_verifiers_envs"
SOURCE = f"verifiers:{ENV_ID}"
SYSTEM = "Reply with the sum only, inside <answer></answer> tags."
WEIGHTS = {"exact_answer": 1.0, "brevity": 0.5, "format_reward_func": 0.2}


def arithmetic_rows(n: int, offset: int = 0) -> list[dict]:
    return [{"question": f"What is {a} + {a + 3}?", "answer": str(2 * a + 3)} for a in range(offset, offset + n)]


def exact_answer(completion, answer, parser) -> float:
    return 1.0 if (parser.parse_answer(completion) or "").strip() == answer else 0.0


def brevity(completion) -> float:
    return 1.0 / (1 + len((completion[-1].content or "").split()))


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def load_environment(kind: str = "arith", n: int = 12):
    """The environments these tests load: `arith` (the one that works) and four bad ones."""
    import verifiers as vf
    from datasets import Dataset

    parser = vf.XMLParser(["answer"], answer_field="answer")
    rubric = vf.Rubric(
        funcs=[exact_answer, brevity, parser.get_format_reward_func()],
        weights=list(WEIGHTS.values()),
        parser=parser,
    )
    train, held = Dataset.from_list(arithmetic_rows(n)), Dataset.from_list(arithmetic_rows(4, offset=50))
    if kind == "arith":
        return vf.SingleTurnEnv(
            dataset=train, eval_dataset=held, system_prompt=SYSTEM, parser=parser, rubric=rubric, pass_threshold=1.0
        )
    if kind == "tool":
        return vf.ToolEnv(tools=[add], dataset=train, rubric=rubric, max_turns=3)
    if kind == "no_prompt":
        return vf.SingleTurnEnv(dataset=Dataset.from_list([{"text": "2 + 2", "answer": "4"}]), rubric=rubric)
    if kind == "group":
        return vf.SingleTurnEnv(dataset=train, rubric=vf.Rubric(funcs=[lambda completions: [0.0] * len(completions)]))
    return {"not": "an environment"}


def tasks(split: str = "train", n: int = 12, **env_args):
    from tempering.config import TaskSourceSettings
    from tempering.sources.tasks import load_tasks

    return load_tasks(TaskSourceSettings(source=SOURCE, split=split, n=n, env_args=env_args))


def test_rows_become_tasks_with_the_prompt_the_library_builds_and_the_answer_only_in_the_spec():
    train, held = tasks(n=5), tasks("heldout")
    assert [t.id for t in train] == [f"vf-{ENV_ID}-train-{i}" for i in range(5)]
    assert len(held) == 4 and not {t.id for t in train} & {t.id for t in held}
    first = train[0]
    assert first.chat() == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 0 + 3?"}]
    assert first.verifier["row"]["answer"] == "3" and "3?" not in json.dumps(first.chat()).replace("0 + 3?", "")
    assert first.source == SOURCE and first.verifier["type"] == "verifiers"
    # the rubric's code is in the spec: this file and the library version, hashed
    code = hashlib.sha256(Path(__file__).read_bytes() + version("verifiers").encode()).hexdigest()[:16]
    assert {t.verifier["code"] for t in [*train, *held]} == {code}


def test_the_rubric_scores_each_reward_function_as_a_component_and_their_weighted_sum():
    from tempering.verifiers import VerifierContext, score

    task = tasks(n=1)[0]  # 0 + 3 = 3
    with VerifierContext(sandbox_size=1) as ctx:
        right = score(task, "<answer>3</answer>", ctx)
        digit = score(task, "it is 4", ctx)
        none = score(task, "no idea", ctx)
    assert (right.components["exact_answer"], right.components["brevity"]) == (1.0, 1 / 2)
    assert (digit.components["exact_answer"], digit.components["brevity"]) == (0.0, 1 / 4)
    assert (none.components["exact_answer"], none.components["brevity"]) == (0.0, 1 / 3)
    for r in (right, digit, none):
        assert r.value == pytest.approx(sum(w * r.components[name] for name, w in WEIGHTS.items()))
        assert r.components["num_turns"] == 1.0  # the library's own weight-0 metric
    # pass_threshold=1.0: only the exact answer passes (1.0 + 0.5 + format >= 1)
    assert right.passed and not digit.passed and not none.passed


def library_chat_client(text: str):
    """The library's own OpenAI chat client, its reply `text` canned (no server): its checks and parsing run as is."""
    import verifiers as vf
    from openai.types.chat import ChatCompletion

    class Canned(vf.OpenAIChatCompletionsClient):
        async def get_native_response(self, prompt, model, sampling_args, tools=None, **kwargs):
            message = {"role": "assistant", "content": text}
            choice = {"index": 0, "finish_reason": "stop", "message": message}
            return ChatCompletion.model_validate(
                {"id": "c", "object": "chat.completion", "created": 0, "model": model, "choices": [choice]}
            )

        async def close(self) -> None:
            return None

    return Canned(cast(Any, None))  # no OpenAI client: the canned reply never leaves the process


@pytest.mark.parametrize("text", ["", "<answer>3</answer>", "it is 4", " "], ids=["empty", "right", "wrong", "space"])
def test_a_reply_scores_as_the_librarys_own_rollout_scores_it(text):
    """Parity with `env.run_rollout` through the library's chat client: an empty reply is aborted there
    (EmptyModelResponseError, no turn, reward 0), so it scores 0 here too, as the model's answer
    (not a verifier error)."""
    from tempering.sources.verifiers_envs import load_environment as load_env
    from tempering.verifiers import VerifierContext, score

    task = tasks(n=1)[0]  # 0 + 3 = 3
    library = asyncio.run(load_env(ENV_ID).run_rollout(task.verifier["row"], library_chat_client(text), "m", {}))
    with VerifierContext(sandbox_size=1) as ctx:
        ours = score(task, text, ctx)
    assert ours.value == pytest.approx(library["reward"], abs=1e-12)
    assert {k: v for k, v in ours.components.items() if k != "correct"} == pytest.approx(library["metrics"])
    assert ours.passed == (text == "<answer>3</answer>")
    if text == "":
        assert library["error"]["error"] == "EmptyModelResponseError" and library["metrics"]["num_turns"] == 0
        assert ours.value == 0.0 and ours.components["num_turns"] == 0 and "empty reply" in (ours.detail or "")


@pytest.mark.parametrize(
    "source,env_args,named",
    [
        ("verifiers:no_such_env_module", {}, "no module named 'no_such_env_module'"),
        (SOURCE, {"kind": "not_env"}, "not a verifiers Environment"),
        (SOURCE, {"kind": "tool"}, "ToolEnv is multi-turn"),
        (SOURCE, {"kind": "no_prompt"}, "no 'question' column"),
        (SOURCE, {"kind": "group"}, "group-level reward functions"),
        (SOURCE, {"colour": "red"}, "unexpected keyword argument 'colour'"),
    ],
)
def test_unusable_environments_are_one_line_errors(source, env_args, named):
    from tempering.config import TaskSourceSettings
    from tempering.sources.tasks import load_tasks

    with pytest.raises(ValueError) as info:
        load_tasks(TaskSourceSettings(source=source, env_args=env_args))
    message = str(info.value)
    assert named in message and "\n" not in message and message.startswith("verifiers:"), message


def test_env_args_on_another_source_is_a_config_error():
    from pydantic import ValidationError

    from tempering.config import TaskSourceSettings

    with pytest.raises(ValidationError, match="'env_args' is not a setting of task source 'builtin:arithmetic'"):
        TaskSourceSettings(source="builtin:arithmetic", env_args={"n": 3})


def test_an_unresolvable_environment_stops_grpo_before_any_work(tmp_path):
    from typer.testing import CliRunner

    from tempering.cli import app

    cfg = tmp_path / "grpo.yaml"
    spec = {"tasks": {"source": "verifiers:no_such_env_module"}, "train": {"steps": 1}, "out": str(tmp_path / "r")}
    cfg.write_text(yaml.safe_dump(spec))
    res = CliRunner().invoke(app, ["grpo", str(cfg)])
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and "no_such_env_module" in lines[0], res.output
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------ a Tempering eval, checked by the library
@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, smol_tokenizer):
    from tests.conftest import tiny_llama

    path = tmp_path_factory.mktemp("tiny")
    model = tiny_llama(vocab=49152, seed=3)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    model.save_pretrained(path)
    smol_tokenizer.save_pretrained(path)
    return path


def library_states(env, rows_by_id, records):
    """The library's own state for each record: its `init_state` of the row, one trajectory step, the completion."""
    import verifiers as vf
    from verifiers.types import AssistantMessage, TrajectoryStep

    from tempering.verifiers.verifiers_rubric import sampled_completion

    async def one(record):
        row = rows_by_id[record["task_id"]]
        state = await env.init_state(row, sampled_completion(""), "m", {})
        completion = [AssistantMessage(content=record["completion"])]
        state["trajectory"].append(
            TrajectoryStep(
                prompt=state["prompt"],
                completion=completion,
                response=None,
                tokens=None,
                reward=None,
                advantage=None,
                is_truncated=False,
                trajectory_id=state["trajectory_id"],
                extras={},
            )
        )
        state["completion"] = completion
        return state

    async def all_states():
        return [await one(r) for r in records]

    assert isinstance(env, vf.SingleTurnEnv)
    return asyncio.run(all_states())


def test_a_tempering_eval_scores_what_the_librarys_rubric_scores_on_the_same_completions(tmp_path, tiny_dir):
    from tempering.config import EvalConfig
    from tempering.evals.evaluate import evaluate_config
    from tempering.sources.verifiers_envs import load_environment as load_env

    suite = tmp_path / "vf-arith.yaml"
    suite.write_text(
        yaml.safe_dump(
            {
                "name": "vf-arith",
                "tasks": [{"source": SOURCE, "split": "heldout", "n": 4}],
                "sampling": {"temperature": 1.0, "max_new_tokens": 12, "n": 3},
                "metrics": ["mean_reward", "accuracy"],
            }
        )
    )
    out = tmp_path / "eval"
    results = evaluate_config(EvalConfig(suites=[str(suite)], model=str(tiny_dir), out=str(out), cache=False))
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 12 and all(r["status"] == "scored" for r in records), [r["detail"] for r in records]

    env = load_env(ENV_ID)
    rows_by_id = {t.id: t.verifier["row"] for t in tasks("heldout")}
    # per item: the rubric's score_rollout on the library's own state of each completion
    states = library_states(env, rows_by_id, records)
    for record, state in zip(records, states):
        asyncio.run(env.rubric.score_rollout(state))
        assert record["reward"] == pytest.approx(state["reward"], abs=1e-12), record["completion"]
        assert {k: v for k, v in record["components"].items() if k != "correct"} == pytest.approx(state["metrics"])
        assert record["passed"] == (state["reward"] >= env.pass_threshold)
    # in aggregate: the rubric's group scoring of the same completions, against the suite's metric
    group = library_states(env, rows_by_id, records)
    asyncio.run(env.rubric.score_group(group))
    library_mean = sum(s["reward"] for s in group) / len(group)
    assert results.suites[0].metrics["mean_reward"].mean == pytest.approx(library_mean, abs=1e-12)
    assert len({r["reward"] for r in records}) > 1  # the random model's answers are not all scored alike
