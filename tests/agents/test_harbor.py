"""Harbor task folders as agent tasks: the loader, its one-line refusals, and the shipped tasks.

The judge's own behaviour (reward files, timeouts, partial credit) is in test_harbor_judge.py;
what an agent cannot do to its verdict in tests/security/test_harbor_attacks.py.
"""

import pytest

from tempering.agents.env import ToolEnv
from tempering.agents.episode import run_episode, run_episodes
from tempering.agents.harbor import load_harbor_tasks, map_paths, shipped_task_dirs
from tempering.agents.harbor_dockerfile import HarborTaskError
from tempering.agents.policies import noop, oracle
from tempering.agents.suites import load_agent_suite
from tempering.data.toolcalls import format_tool_call
from tempering.evals.agent_suites import heldout_tasks
from tests.agents.harbor_helpers import TOML, write_task


def test_at_least_30_tasks_ship_in_harbors_layout():
    dirs = shipped_task_dirs()
    assert len(dirs) >= 30
    for d in dirs:
        for part in ("instruction.md", "task.toml", "environment/Dockerfile", "tests/test.sh", "solution/solve.sh"):
            assert (d / part).is_file(), f"{d.name}: {part}"
        assert (d / "environment/Dockerfile").read_text().startswith("FROM python:3.11-bookworm\n")
        assert "/logs/verifier/reward." in (d / "tests/test.sh").read_text()
    tasks = load_agent_suite("harbor")
    assert {t.family for t in tasks} >= {"files", "text", "shell", "git", "python"}
    assert {t.split for t in tasks} == {"train", "heldout"} and {t.tier for t in tasks} == {1, 2, 3}


def test_every_shipped_oracle_scores_1_and_doing_nothing_scores_0(pool):
    tasks = load_agent_suite("harbor")
    n = len(tasks)
    results = run_episodes(pool, lambda i: oracle if i < n else noop, tasks + tasks, workers=4)
    oracle_rewards = {r.task.id: r.rewards[-1] for r in results[:n]}
    noop_rewards = {r.task.id: r.rewards[-1] for r in results[n:]}
    assert all(r.stats.status == "scored" for r in results), [r.stats.error for r in results if r.stats.error]
    assert {k: v for k, v in oracle_rewards.items() if v != 1.0} == {}
    assert {k: v for k, v in noop_rewards.items() if v != 0.0} == {}
    assert all(r.stats.success for r in results[:n]) and not any(r.stats.success for r in results[n:])


def test_a_task_loads_with_harbors_paths_moved_into_the_sandbox(tmp_path):
    d = write_task(
        tmp_path,
        instruction="Read /app/seed.txt and write `done` to /app/out.txt.",
        extra={"tests/expected.txt": "done\n"},
        test='#!/bin/bash\ncd /app && [ "$(cat out.txt)" = "$(cat /tests/expected.txt)" ] && echo 1 > /logs/verifier/reward.txt\n',
    )
    (task,) = load_harbor_tasks(d)
    assert task.id == "demo" and task.env == "harbor" and task.family == "demo"
    assert (task.tier, task.split) == (2, "heldout")  # medium -> tier 2; a Harbor task is held out unless it says
    assert task.prompt == "Read /work/seed.txt and write `done` to /work/out.txt."
    assert task.files == {"seed.txt": "seed\n"}
    goal = task.goal
    assert (
        goal["type"] == "harbor_tests"
        and goal["timeout_s"] == 30.0
        and sorted(goal["tests"]) == ["expected.txt", "test.sh"]
    )
    assert goal["tests"]["test.sh"] == (
        '#!/bin/bash\ncd /work && [ "$(cat out.txt)" = "$(cat /tmp/harbor/tests/expected.txt)" ] '
        "&& echo 1 > /tmp/harbor/logs/verifier/reward.txt\n"
    )
    assert task.solution == [
        [{"name": "shell", "arguments": {"cmd": "#!/bin/bash\necho done > /work/out.txt\n"}}],
        [{"name": "submit", "arguments": {"answer": "done"}}],
    ]


def test_map_paths_rewrites_only_whole_path_starts():
    text = '/app/x "/app" /app. /apps /data/app $HOME/app /tests/t.py /testsuite /logs/verifier/reward.txt ./tests'
    assert map_paths(text, "/app") == (
        '/work/x "/work" /work. /apps /data/app $HOME/app /tmp/harbor/tests/t.py /testsuite '
        "/tmp/harbor/logs/verifier/reward.txt ./tests"
    )
    assert map_paths("cd /srv/app/src && ls /srv/app", "/srv/app") == "cd /work/src && ls /work"


def test_a_solution_folder_with_more_than_solve_sh_is_written_out_before_it_runs(pool, tmp_path):
    d = write_task(
        tmp_path,
        solve='#!/bin/bash\ncp "/solution/answer.txt" /app/out.txt\n',
        extra={"solution/answer.txt": "done\n"},
    )
    (task,) = load_harbor_tasks(d)
    assert "base64 -d > /tmp/harbor/solution/answer.txt" in task.solution[0][0]["arguments"]["cmd"]
    assert run_episode(ToolEnv(pool), oracle, task).rewards[-1] == 1.0


REFUSALS = [
    ({"toml": TOML + "\n[oracle]\nx = 1\n"}, "task.toml: oracle: unknown key"),
    ({"toml": TOML + "speed = 2\n"}, "task.toml: verifier.speed: unknown key"),
    ({"toml": TOML + "[environment]\ndocker_image = 'ubuntu:24.04'\n"}, "environment.docker_image: a prebuilt image"),
    ({"toml": "steps = []\n"}, "task.toml: steps: multi-step tasks are not supported"),
    ({"toml": "[metadata]\ntier = 7\n"}, "metadata.tier 7 is not one of (1, 2, 3)"),
    ({"toml": "version = \n"}, "task.toml does not parse"),
    ({"remove": "tests/test.sh"}, "tests/test.sh is missing"),
    ({"remove": "task.toml"}, "task.toml is missing"),
    (
        {"dockerfile": "FROM ubuntu:24.04\nWORKDIR /app\nRUN apt-get install -y git\n"},
        "line 3: RUN cannot be reproduced",
    ),
    ({"dockerfile": "FROM python:3.11\nWORKDIR /app\nENV A=1\n"}, "line 3: ENV cannot be reproduced"),
    (
        {"dockerfile": "FROM python:3.11\nWORKDIR /app\nCOPY --from=builder /x /app/\n"},
        "COPY --from=builder copies from outside",
    ),
    (
        {"dockerfile": "FROM python:3.11\nWORKDIR /app\nCOPY files/seed.txt /etc/seed\n"},
        "COPY to /etc/seed is outside the working directory /app",
    ),
    ({"dockerfile": "FROM python:3.11\nCOPY files/ /app/\n"}, "sets no WORKDIR"),
    ({"dockerfile": "FROM a AS b\nFROM c\nWORKDIR /app\n"}, "line 2: only one plain FROM stage"),
    (
        {"dockerfile": "FROM python:3.11\nWORKDIR /app\nCOPY missing.txt /app/\n"},
        "COPY source 'missing.txt' is not in environment/",
    ),
    ({"dockerfile": None}, "environment/Dockerfile is missing"),
    ({"files": {"blob.bin": b"\xff\xfe\x00"}}, "blob.bin is not UTF-8 text"),
]


@pytest.mark.parametrize(("change", "message"), REFUSALS)
def test_what_cannot_be_reproduced_is_refused_in_one_line_naming_the_task(tmp_path, change, message):
    change = dict(change)
    remove = change.pop("remove", None)
    d = write_task(tmp_path, "my-task", **change)
    if remove:
        (d / remove).unlink()
    with pytest.raises(HarborTaskError) as err:
        load_harbor_tasks(tmp_path)
    text = str(err.value)
    assert "\n" not in text and text.startswith("harbor task my-task (") and message in text, text


def test_a_folder_without_instruction_or_tasks_is_refused_in_one_line(tmp_path):
    d = write_task(tmp_path, "no-text")
    (d / "instruction.md").unlink()
    with pytest.raises(HarborTaskError, match=r"^harbor task no-text \(.*\): instruction.md is missing$"):
        load_harbor_tasks(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(HarborTaskError, match="holds no task folder"):
        load_harbor_tasks(tmp_path / "empty")


def test_harbor_folders_are_agent_suites_for_eval_and_training(tmp_path):
    write_task(tmp_path, "held")
    write_task(tmp_path, "trained", toml=TOML.replace("[metadata]\n", '[metadata]\nsplit = "train"\n'))
    suite = load_agent_suite(f"harbor:{tmp_path}")  # what `temper agent` (tasks.suites) and eval load
    assert [(t.id, t.split) for t in suite] == [("held", "heldout"), ("trained", "train")]
    assert [t.id for t in heldout_tasks(f"agent:harbor:{tmp_path}")] == ["held"]  # `temper eval run agent:harbor:DIR`
    assert [t.id for t in load_harbor_tasks(tmp_path / "trained")] == ["trained"]  # one task folder alone


def test_the_shipped_partial_credit_task_pays_a_quarter_per_fixed_function(pool):
    task = next(t for t in load_agent_suite("harbor") if t.id == "fix-textutils")
    broken = task.files["textutils/core.py"]
    half = broken.replace("    return text[::-1]\n", '    return " ".join(reversed(text.split()))\n').replace(
        "    return text.capitalize()\n", '    return " ".join(w[:1].upper() + w[1:] for w in text.split())\n'
    )
    assert half != broken

    def fix_two(task, messages):
        if any(m["role"] == "assistant" for m in messages):
            return format_tool_call("submit", {"answer": "done"})
        return format_tool_call("write_file", {"path": "textutils/core.py", "content": half})

    result = run_episode(ToolEnv(pool), fix_two, task)
    assert result.rewards[-1] == 0.5 and not result.stats.success
