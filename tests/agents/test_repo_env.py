"""The repository suite: small Python projects with a failing test suite the agent must make pass.

The scripted oracle, noop and random policies over the whole suite run in
`test_policies.py` (every built-in suite); the attacks in `tests/security/test_agent_goal_attacks.py`.
"""

import json
from threading import Barrier

import pytest

from tempering.agents.env import ToolEnv
from tempering.agents.episode import run_episode, run_episodes
from tempering.agents.policies import noop, oracle
from tempering.agents.tasks import TaskFileError, builtin_tasks, load_agent_tasks
from tempering.data.toolcalls import format_tool_call

LIB = "def double(x):\n    return x + x\n"
BROKEN = "def double(x):\n    return x * 3\n"
TEST = "import unittest\n\nfrom mylib.calc import double\n\n\nclass T(unittest.TestCase):\n    def test_double(self):\n        self.assertEqual(double(4), 8)\n"


@pytest.fixture(scope="module")
def repo():
    return builtin_tasks("repo")


def test_the_suite_has_families_tiers_and_held_out_families(repo):
    assert len(repo) >= 30
    train = {t.family for t in repo if t.split == "train"}
    heldout = {t.family for t in repo if t.split == "heldout"}
    assert len(train) >= 5 and len(heldout) >= 2 and not train & heldout
    for split in ("train", "heldout"):
        assert {t.tier for t in repo if t.split == split} == {1, 2, 3}


def test_a_repository_task_is_judged_by_hidden_copies_and_keeps_its_tests(repo):
    for task in repo:
        visible = sorted(p for p in task.files if p.startswith("tests/test_"))
        hidden, *intact = task.goal["checks"]
        assert hidden["type"] == "tests" and sorted(hidden["files"]) == [p.split("/")[-1] for p in visible]
        assert [c["path"] for c in intact] == visible and all(c["equals"] == task.files[c["path"]] for c in intact)
        assert task.protected == visible and task.fail_on_unsafe


def test_two_episodes_of_one_task_at_once_do_not_see_each_others_edits(pool, repo):
    """Both sessions are open together: one fixes the bug and leaves a note, the other looks."""
    task = next(t for t in repo if t.id == "repo-pager-off-by-one-1")
    fixer, looker = ToolEnv(pool), ToolEnv(pool)
    fixer.reset(task), looker.reset(task)
    fix = [c for turn in task.solution for c in turn if c["name"] == "edit_file"]
    fixer.step("\n".join(format_tool_call(c["name"], c["arguments"]) for c in fix))
    fixer.step(format_tool_call("shell", {"cmd": "echo mine > note.txt"}))
    seen, *_ = looker.step(format_tool_call("shell", {"cmd": "ls; grep -c 'start = number' pager/pages.py"}))
    assert "note.txt" not in seen[0]["content"] and seen[0]["content"].endswith("1")  # still the broken line
    _, reward_fixer, done, _ = fixer.step(format_tool_call("submit", {"answer": "done"}))
    _, reward_looker, _, _ = looker.step(format_tool_call("submit", {"answer": "done"}))
    assert done and (reward_fixer, reward_looker) == (1.0, 0.0)


def test_episodes_of_one_task_on_parallel_threads_score_their_own_work(pool, repo):
    task = next(t for t in repo if t.tier == 3)
    start = Barrier(4)

    def policy(i):
        def act(t, messages):
            if not messages[1:]:
                start.wait(timeout=30)  # all four episodes are open before any acts
            return (oracle if i % 2 == 0 else noop)(t, messages)

        return act

    results = run_episodes(pool, policy, [task] * 4, workers=4)
    assert [r.stats.success for r in results] == [True, False, True, False]


def write_jsonl(path, *rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def user_row(**over):
    """A user's repository task: the repository in a folder next to the JSONL."""
    row = {
        "id": "double",
        "env": "mine",
        "tier": 1,
        "prompt": "Make `python3 -m unittest discover -s tests` pass.",
        "tools": ["shell", "read_file", "write_file", "submit"],
        "fixtures": "myrepo",
        "goal": {"type": "repo_tests", "paths": ["tests/test_calc.py"]},
        "fail_on_unsafe": True,
        "solution": [[{"name": "write_file", "arguments": {"path": "mylib/calc.py", "content": LIB}}]],
    }
    return {**row, **over}


@pytest.fixture
def myrepo(tmp_path):
    (tmp_path / "myrepo" / "mylib").mkdir(parents=True)
    (tmp_path / "myrepo" / "tests").mkdir()
    (tmp_path / "myrepo" / "mylib" / "__init__.py").write_text("")
    (tmp_path / "myrepo" / "mylib" / "calc.py").write_text(BROKEN)
    (tmp_path / "myrepo" / "tests" / "test_calc.py").write_text(TEST)
    return tmp_path


def test_a_users_repository_folder_is_a_task_the_oracle_solves(pool, myrepo):
    (task,) = load_agent_tasks(write_jsonl(myrepo / "mine.jsonl", user_row()))
    assert task.protected == ["tests/test_calc.py"] and task.files["mylib/calc.py"] == BROKEN
    assert run_episode(ToolEnv(pool), oracle, task).stats.success
    assert not run_episode(ToolEnv(pool), noop, task).stats.success


BAD = [
    ({"goal": {"type": "repo_tests", "paths": []}}, "goal 'repo_tests' needs 'paths'"),
    (
        {"goal": {"type": "repo_tests", "paths": ["tests/test_gone.py"]}},
        "tests/test_gone.py is not a file of the repository",
    ),
    ({"goal": {"type": "repo_tests", "paths": ["mylib/calc.py"]}}, "mylib/calc.py defines no test"),
    (
        {"goal": {"type": "repo_tests", "paths": ["tests/test_calc.py", "old/test_calc.py"]}},
        "two test files share a file name",
    ),
    ({"goal": {"type": "repo_tests", "paths": ["../test_calc.py"]}}, "must be a relative path to a test file"),
    ({"tools": ["shell", "bash"]}, "unknown tools ['bash']"),
    ({"solution": [[{"name": "python", "arguments": {"code": "1"}}]]}, "solution turn 1: tool 'python' is not one of"),
    (
        {"solution": [[{"name": "write_file", "arguments": {"path": "a.py"}}]]},
        "solution turn 1: invalid arguments for write_file: 'content' is a required property",
    ),
    ({"tier": 0}, "tier 0 is outside the curriculum's tiers 1, 2, 3"),
    ({"tier": 4}, "tier 4 is outside the curriculum's tiers 1, 2, 3"),
]


@pytest.mark.parametrize(("change", "message"), BAD, ids=[m for _, m in BAD])
def test_a_bad_task_is_a_one_line_error_naming_file_and_line(myrepo, change, message):
    path = write_jsonl(myrepo / "mine.jsonl", user_row(id="fine"), user_row(**change))
    with pytest.raises(TaskFileError) as err:
        load_agent_tasks(path)
    text = str(err.value)
    assert text.startswith(f"{path}:2: ") and message in text and "\n" not in text


def test_a_fixture_that_is_not_text_is_a_one_line_error(myrepo):
    (myrepo / "myrepo" / "logo.png").write_bytes(b"\x89PNG\xff\xfe")
    path = write_jsonl(myrepo / "mine.jsonl", user_row())
    with pytest.raises(TaskFileError, match=r"mine.jsonl:1: fixture .*logo.png is not UTF-8 text$"):
        load_agent_tasks(path)
