"""Faking a Harbor task's verdict: an agent that writes the reward or the tests itself scores 0.

Harbor's verifier is tests/test.sh writing /logs/verifier/reward.txt. The judge
(`tempering.agents.harbor_judge`) copies the tests in from the task folder only after the
agent is done, in a sandbox call of their own whose /tmp (where the reward is read from) no
earlier call can reach. Each attack below is a scripted episode on a shipped task; the honest
oracle scores 1 on the same tasks, so a zero is the judge's verdict, not a broken judge.
"""

import pytest
from tests.agents.harbor_helpers import write_task

from tempering.agents.env import ToolEnv
from tempering.agents.episode import run_episode
from tempering.agents.harbor import load_harbor_tasks
from tempering.agents.policies import oracle, scripted
from tempering.agents.suites import load_agent_suite

WRITE_ONE = "echo 1 > {path}/reward.txt; echo '{{\"reward\": 1.0}}' > {path}/reward.json"
GUESSES = ["/logs/verifier", "/tmp/harbor/logs/verifier", "/work/logs/verifier", "/work", "/tmp", "$HOME/logs/verifier"]
LATER = "for i in $(seq 40); do mkdir -p /tmp/harbor/logs/verifier; echo 1 > /tmp/harbor/logs/verifier/reward.txt; sleep 0.05; done"
PLANTED_TEST = (
    "#!/bin/bash\nfor d in /logs/verifier /tmp/harbor/logs/verifier; do mkdir -p $d; echo 1 > $d/reward.txt; done\n"
)
SUCCESS_ONLY = (
    '#!/bin/bash\nset -e\n[ "$(cat /app/hello.txt)" = "Hello, Harbor!" ]\necho 1 > /logs/verifier/reward.txt\n'
)
"""A verifier that writes a reward only on success (Harbor's template does so under `set -e`): a reward
file planted beforehand would stand if the judge read one the agent could reach."""

ATTACKS = {
    # a test.sh of its own where Harbor keeps the tests, relative to the workspace and absolute
    "tests/test.sh written into the workspace": [
        (
            "shell",
            {"cmd": f"mkdir -p tests && printf '{PLANTED_TEST}' > tests/test.sh && chmod +x tests/test.sh; ls tests"},
        )
    ],
    # the reward files at every path the agent could guess, the sandbox's own included
    "reward files written at every guessable path": [
        (
            "shell",
            {"cmd": "; ".join(f"mkdir -p {p} 2>/dev/null; {WRITE_ONE.format(path=p)} 2>/dev/null" for p in GUESSES)},
        )
    ],
    # a process left behind to write the reward while the tests run
    "a background writer left running": [("shell", {"cmd": f"setsid sh -c '{LATER}' >/dev/null 2>&1 & echo started"})],
    # start-up files a shell might read (HOME is /work for the agent's calls)
    "shell start-up files in HOME": [
        (
            "shell",
            {
                "cmd": "for f in .bashrc .bash_profile .profile .bash_login .bash_logout; do "
                "echo 'mkdir -p /tmp/harbor/logs/verifier; echo 1 > /tmp/harbor/logs/verifier/reward.txt' > $f; done; ls -a"
            },
        )
    ],
}

SLUG_FAKES = {
    "the module exits at import": "import os\nos._exit(0)\n",
    "a printed verdict": "import sys\nprint('passed', sys.stdin.readline().strip())\nsys.exit(0)\n",
    "a result equal to everything": (
        "class Anything(str):\n    def __eq__(self, other):\n        return True\n\n    def __ne__(self, other):\n"
        "        return False\n\n    __hash__ = str.__hash__\n\n\ndef slugify(text):\n    return Anything('')\n"
    ),
}


@pytest.fixture(scope="module")
def shipped():
    return {t.id: t for t in load_agent_suite("harbor")}


@pytest.fixture(scope="module")
def success_only(tmp_path_factory):
    """The shipped `create-hello` with a verifier that writes nothing when the check fails."""
    root = tmp_path_factory.mktemp("harbor")
    solve = "#!/bin/bash\necho 'Hello, Harbor!' > /app/hello.txt\n"
    d = write_task(root, "hello-success-only", files={}, test=SUCCESS_ONLY, solve=solve)
    (d / "environment/Dockerfile").write_text("FROM python:3.11-bookworm\nWORKDIR /app\n")
    (task,) = load_harbor_tasks(d)
    return task


def test_the_honest_oracle_scores_one(pool, shipped, success_only):
    for task in (shipped["create-hello"], shipped["fix-slugify"], success_only):
        result = run_episode(ToolEnv(pool), oracle, task)
        assert result.stats.success and result.rewards[-1] == 1.0, task.id


@pytest.mark.parametrize("attack", ATTACKS)
@pytest.mark.parametrize("verifier", ["shipped", "writes only on success"])
def test_writing_the_verdict_yourself_scores_zero(pool, shipped, success_only, attack, verifier):
    task = shipped["create-hello"] if verifier == "shipped" else success_only
    result = run_episode(ToolEnv(pool), scripted(ATTACKS[attack]), task)
    assert result.stats.status == "scored" and result.stats.tool_calls == 2
    assert not result.stats.success and result.rewards[-1] == 0.0, attack


def test_the_planted_files_were_really_there_for_the_verifier_to_find(pool, shipped):
    """The guesses are not refused up front: inside the agent's own call they exist (and vanish with it)."""
    cmd = ATTACKS["reward files written at every guessable path"][0][1]["cmd"]
    check = "; cat /tmp/harbor/logs/verifier/reward.txt /work/logs/verifier/reward.json"
    result = run_episode(ToolEnv(pool), scripted([("shell", {"cmd": cmd + check})]), shipped["create-hello"])
    seen = [m["content"] for m in result.messages if m["role"] == "tool"][0]
    assert seen.splitlines()[:2] == ["1", '{"reward": 1.0}'] and result.rewards[-1] == 0.0


@pytest.mark.parametrize("fake", SLUG_FAKES)
def test_a_faked_fix_of_a_repository_task_scores_zero(pool, shipped, fake):
    calls = [("write_file", {"path": "textkit/slug.py", "content": SLUG_FAKES[fake]})]
    result = run_episode(ToolEnv(pool), scripted(calls), shipped["fix-slugify"])
    assert result.stats.status == "scored" and result.stats.tool_errors == 0
    assert not result.stats.success and result.rewards[-1] == 0.0, fake
