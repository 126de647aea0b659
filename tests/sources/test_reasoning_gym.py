"""reasoning-gym tasks: deterministic in the seed, answers only in the verifier spec."""

import json

import pytest

from tempering.sources.reasoning_gym import ANSWER_INSTRUCTION, EVAL_PRESETS, reasoning_gym_tasks


@pytest.mark.parametrize("name", sorted(EVAL_PRESETS))
def test_tasks_are_deterministic_in_the_seed(name):
    first = reasoning_gym_tasks(name, size=20, seed=7, **EVAL_PRESETS[name])
    again = reasoning_gym_tasks(name, size=20, seed=7, **EVAL_PRESETS[name])
    other = reasoning_gym_tasks(name, size=20, seed=8, **EVAL_PRESETS[name])
    assert [t.model_dump() for t in first] == [t.model_dump() for t in again]
    assert [t.prompt for t in first] != [t.prompt for t in other]
    assert len({t.id for t in first}) == 20


@pytest.mark.parametrize("name", sorted(EVAL_PRESETS))
def test_spec_is_json_and_the_prompt_holds_no_answer(name):
    import reasoning_gym

    tasks = reasoning_gym_tasks(name, size=30, seed=3, **EVAL_PRESETS[name])
    entries = reasoning_gym.create_dataset(name, size=30, seed=3, **EVAL_PRESETS[name])
    for task, entry in zip(tasks, entries):
        spec = task.verifier
        assert json.loads(json.dumps(spec)) == spec
        assert spec["entry"]["answer"] == entry["answer"]
        assert spec["config"] == EVAL_PRESETS[name]
        # The prompt is the question plus the format instruction, nothing else.
        assert task.prompt == entry["question"] + ANSWER_INSTRUCTION
        assert "metadata" not in task.prompt and "<answer>" + entry["answer"] not in task.prompt
        assert task.source == f"reasoning_gym:{name}" and task.track == "reasoning"


def test_word_answers_are_not_in_the_prompt():
    # Reversed words are not in the question (palindromes aside): the answer is not leaked.
    for task in reasoning_gym_tasks("spell_backward", size=30, seed=1, min_word_len=5, max_word_len=8):
        answer = task.verifier["entry"]["answer"]
        if answer != answer[::-1]:
            assert answer not in task.prompt


def test_instruction_can_be_dropped():
    task = reasoning_gym_tasks("chain_sum", size=1, seed=0, instruction=None)[0]
    assert "<answer>" not in task.prompt and task.prompt.endswith("=")


@pytest.mark.parametrize(
    "name,config,message",
    [
        ("chain_sum", {"no_such_field": 1}, "bad reasoning-gym config"),
        ("chain_sum", {"min_terms": 3, "max_terms": 2}, "bad reasoning-gym config"),
        ("no_such_dataset", {}, "not registered"),
        ("arc_agi", {}, "not supported"),  # its tuple grids do not survive JSON
    ],
)
def test_bad_requests_fail_loudly(name, config, message):
    with pytest.raises(ValueError, match=message):
        reasoning_gym_tasks(name, size=2, seed=0, **config)


def test_size_must_be_positive():
    with pytest.raises(ValueError, match="size must be >= 1"):
        reasoning_gym_tasks("chain_sum", size=0, seed=0)


def test_a_training_task_source_takes_the_generator_config_as_a_suite_does():
    # The rg-chain-sum suite's tasks, and a data.synth stage's `tasks:` with the same fields.
    from tempering.config import TaskSourceSettings
    from tempering.evals.suite import load_suite
    from tempering.sources.tasks import load_tasks

    suite_tasks = load_suite("rg-chain-sum").tasks[0].load()
    training = load_tasks(
        TaskSourceSettings(source="reasoning_gym:chain_sum", n=100, seed=0, config=EVAL_PRESETS["chain_sum"])
    )
    assert [t.model_dump() for t in training] == [t.model_dump() for t in suite_tasks]
    other_seed = load_tasks(
        TaskSourceSettings(source="reasoning_gym:chain_sum", n=100, seed=1, config=EVAL_PRESETS["chain_sum"])
    )
    assert all(t.verifier["config"] == EVAL_PRESETS["chain_sum"] for t in other_seed)
    assert {t.id for t in other_seed}.isdisjoint(t.id for t in suite_tasks)


def test_config_on_a_source_that_reads_none_is_an_error():
    from tempering.config import TaskSourceSettings
    from tempering.sources.tasks import load_tasks

    with pytest.raises(ValueError, match="'config' is not a setting of task source 'builtin:arithmetic'"):
        load_tasks(TaskSourceSettings(source="builtin:arithmetic", n=3, config={"max_terms": 3}))
