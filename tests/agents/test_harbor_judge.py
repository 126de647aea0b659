"""The Harbor judge: tests/test.sh runs after the agent, from /work, and its reward file is the verdict."""

import pytest

from tempering.agents.env import ToolEnv
from tempering.agents.episode import run_episode
from tempering.agents.harbor import load_harbor_tasks
from tempering.agents.harbor_judge import parse_reward, run_harbor_tests
from tempering.agents.policies import noop, oracle
from tests.agents.harbor_helpers import write_task


@pytest.mark.parametrize(
    ("reward_json", "reward_txt", "want"),
    [
        (None, "0.25\n", (0.25, "")),
        (None, "1", (1.0, "")),
        ('{"reward": 0.5, "tests_passed": 3}', "1", (0.5, "")),  # reward.json wins, as in Harbor
        ('{"accuracy": 1.0}', None, (None, "reward.json has no 'reward' key")),
        ('{"reward": "1"}', None, (None, "reward.json: 'reward' is not a finite number")),
        ('{"reward": NaN}', None, (None, "reward.json: 'reward' is not a finite number")),
        ("1", None, (None, "reward.json is not a JSON object of rewards")),
        ("", "1", (None, "reward.json is empty")),
        (None, "", (None, "reward.txt is empty")),
        (None, "yes", (None, "reward.txt is not a number: 'yes'")),
        (None, "inf", (None, "reward.txt is not finite: inf")),
        (None, None, (None, "no reward file (reward.txt or reward.json in /logs/verifier)")),
    ],
)
def test_the_reward_is_read_by_harbors_rules(reward_json, reward_txt, want):
    assert parse_reward(reward_json, reward_txt) == want


def test_the_tests_run_from_the_workspace_with_the_task_tests_at_their_own_place(pool):
    test = (
        "#!/bin/bash\n"
        '[ "$PWD" = /work ] && [ "$(cat /tmp/harbor/tests/data/want.txt)" = "$(cat out.txt)" ] '
        "&& [ ! -e /work/data ] && echo 1 > /tmp/harbor/logs/verifier/reward.txt\n"
    )
    tests = {"test.sh": test, "data/want.txt": "yes\n"}
    with pool.session() as s:
        s.write_file("out.txt", "no\n")
        first = run_harbor_tests(s, tests=tests)
        assert (first.reward, first.problem) == (None, "no reward file (reward.txt or reward.json in /logs/verifier)")
        s.write_file("out.txt", "yes\n")
        assert run_harbor_tests(s, tests=tests).reward == 1.0
        assert sorted(s.list_files()) == ["out.txt"]  # the tests were never written to /work


def test_a_script_without_a_shebang_runs_as_bash_and_its_output_is_kept(pool):
    with pool.session() as s:
        verdict = run_harbor_tests(
            s, tests={"test.sh": "echo checking; echo 0.5 > /tmp/harbor/logs/verifier/reward.txt\n"}
        )
    assert verdict.reward == 0.5 and "checking" in verdict.log


def test_a_test_past_its_timeout_leaves_no_reward(pool):
    with pool.session() as s:
        verdict = run_harbor_tests(
            s, tests={"test.sh": "#!/bin/bash\nsleep 3\necho 1 > /tmp/harbor/logs/verifier/reward.txt\n"}, timeout_s=0.5
        )
    assert (verdict.reward, verdict.problem) == (None, "test.sh ran past its 0.5 s")


@pytest.mark.parametrize(
    ("test", "reward"),
    [
        ("#!/bin/bash\necho 0.25 > /logs/verifier/reward.txt\n", 0.25),
        ('#!/bin/bash\necho \'{"reward": 0.5, "passed": 2}\' > /logs/verifier/reward.json\n', 0.5),
        ("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n", 1.0),
        ("#!/bin/bash\necho oops > /logs/verifier/reward.txt\n", 0.0),
    ],
)
def test_partial_credit_is_the_episodes_reward_and_only_full_credit_completes(pool, tmp_path, test, reward):
    (task,) = load_harbor_tasks(write_task(tmp_path, test=test))
    result = run_episode(ToolEnv(pool), noop, task)
    assert result.stats.status == "scored" and result.rewards[-1] == reward
    assert result.stats.success == (reward == 1.0)


def test_verifier_env_reaches_the_test_and_solution_env_reaches_the_oracle(pool, tmp_path):
    toml = '[verifier]\ntimeout_sec = 20\nenv = { WANT = "done" }\n\n[solution]\nenv = { WORD = "done" }\n'
    test = '#!/bin/bash\n[ "$(cat /app/out.txt)" = "$WANT" ] && echo 1 > /logs/verifier/reward.txt\n'
    (task,) = load_harbor_tasks(write_task(tmp_path, toml=toml, test=test, solve='echo "$WORD" > /app/out.txt\n'))
    assert run_episode(ToolEnv(pool), oracle, task).rewards[-1] == 1.0
    assert run_episode(ToolEnv(pool), noop, task).rewards[-1] == 0.0
