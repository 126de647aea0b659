"""One episode's worst turn cannot end a rollout of many, nor leave anything on the host.

A rollout (`agent_rollout`, a scripted engine as the policy) runs honest episodes beside
episodes whose agent replaces the hidden test by a directory, fills /work's inodes,
nests a tool call thousands deep, puts a NUL byte in a shell command, or whose task
files do not fit the scratch, or whose goal names a file outside /work. The honest episodes finish with their normal rewards; each
bad one gets an error observation or `env_error` for itself alone; no session, scratch
mount or cgroup is left behind.
"""

import pytest
from tests.agents.scripted_engine import PolicyEngine
from tests.hoststate import leftovers, session_cgroups_of_this_process

from tempering.agents.policies import oracle
from tempering.agents.render import AgentRenderer
from tempering.agents.rollout import EpisodeSettings, agent_rollout
from tempering.agents.tasks import builtin_tasks
from tempering.config import SamplingSettings
from tempering.data.toolcalls import format_tool_call

DEPTH = 5000  # past the interpreter's recursion limit (1000), where json.loads raises RecursionError


def call(name, **arguments):
    return format_tool_call(name, arguments)


FIX_MUL = "def mul(a, b):\n    return a * b\n"
BAD_TURNS = {
    # the bug fixed, and the visible test replaced by a directory the hidden copy would be written over
    "hidden test replaced by a directory": [
        call("write_file", path="mod_mul.py", content=FIX_MUL)
        + "\n"
        + call("shell", cmd="rm test_mul.py && mkdir -p test_mul.py/sub && echo x > test_mul.py/sub/f")
    ],
    "inodes filled": [
        call("shell", cmd="i=0; while : > f$i 2>/dev/null; do i=$((i+1)); done; echo $i"),
        call("python", code="print('hello')"),
    ],
    "tool call nested deep": [
        '<tool_call>{"name": "shell", "arguments": {"cmd": ' + "[" * DEPTH + "]" * DEPTH + "}}</tool_call>"
    ],
    "NUL in a shell command": [call("shell", cmd="echo a\x00; echo b")],
}


@pytest.fixture(scope="module")
def tasks():
    workspace = {t.id: t for t in builtin_tasks("workspace")}
    good = [workspace["ws-t2-fix-bug-0"], workspace["ws-t3-config-0"], builtin_tasks("tool_arith")[0]]
    base = workspace["ws-t2-fix-bug-1"]
    bad = [
        base.model_copy(update={"id": f"bad-{k}", "prompt": f"[{name}] {base.prompt}"})
        for k, name in enumerate(BAD_TURNS)
    ]
    too_big = base.model_copy(
        update={"id": "bad-too-big", "prompt": f"[too big] {base.prompt}", "files": {"big.txt": "x" * (9 << 20)}}
    )
    # a goal the sandbox refuses only when it is checked (model_copy skips the check at load):
    # a ValueError, not an EnvFailure, from deep inside the goal check
    outside = base.model_copy(
        update={
            "id": "bad-goal-path",
            "prompt": f"[goal path] {base.prompt}",
            "goal": {"type": "file", "path": "../outside", "equals": ""},
        }
    )
    return good, bad, [too_big, outside]


def policy(task, messages):
    turn = len(messages)
    if not task.id.startswith("bad-"):
        return oracle(task, messages)
    turns = BAD_TURNS.get(task.prompt[1 : task.prompt.index("]")], [])
    return turns[turn] if turn < len(turns) else call("submit", answer="done")


def test_bad_turns_end_their_own_episode_only_and_leave_nothing(pool, smol_tokenizer, tasks, cgroups_before):
    good, bad, broken = tasks
    everything = [*good, *bad, *broken]
    engine = PolicyEngine(smol_tokenizer, policy, everything)
    batch = agent_rollout(
        everything,
        engine,
        AgentRenderer(smol_tokenizer),
        pool,
        SamplingSettings(max_new_tokens=8192),
        EpisodeSettings(max_context_tokens=16384, env_workers=4),
    )
    episodes = {group[0].task.id: group[0] for group in batch.groups}
    for task in good:
        ep = episodes[task.id]
        assert ep.stats.success and ep.trajectory.rewards[-1].value == 1.0, (task.id, ep.stats)
    tool_text = {k: [m["content"] for m in ep.trajectory.messages if m["role"] == "tool"] for k, ep in episodes.items()}
    # the hidden tests never touch /work: the fix is judged on them as if nothing were in the way
    directory = episodes["bad-0"]
    assert directory.stats.status == "scored" and directory.stats.success and not directory.stats.intact
    assert directory.trajectory.rewards[-1].value == 1.0
    # the full /work is the model's doing: its next call is answered with an error, the episode goes on
    assert episodes["bad-1"].stats.status == "scored"
    assert tool_text["bad-1"][1].startswith("error: cannot write the program") and episodes["bad-1"].stats.steps == 3
    assert "nested too deeply" in tool_text["bad-2"][0] and episodes["bad-2"].stats.invalid_calls == 1
    assert "NUL byte" in tool_text["bad-3"][0] and episodes["bad-3"].stats.invalid_calls == 1
    for k in ("bad-1", "bad-2", "bad-3"):
        assert episodes[k].trajectory.rewards[-1].value == 0.0 and episodes[k].trajectory.status == "scored", k
    big = episodes["bad-too-big"]
    assert big.trajectory.status == "env_error" and "cannot open the episode's sandbox" in big.stats.error
    outside = episodes["bad-goal-path"]  # unforeseen: ends this episode alone, with the reason
    assert outside.trajectory.status == "env_error" and outside.stats.error.startswith("ValueError: ")
    assert outside.trajectory.rewards[-1].flags == ["env_error"]
    _assert_nothing_left(pool, cgroups_before)


def test_an_engine_failure_mid_rollout_closes_every_open_session(pool, smol_tokenizer, tasks, cgroups_before):
    good, _, _ = tasks

    def breaks_on_the_second_turn(task, messages):
        if messages:
            raise RuntimeError("the engine went away")
        return oracle(task, messages)

    engine = PolicyEngine(smol_tokenizer, breaks_on_the_second_turn, good[:2])
    with pytest.raises(RuntimeError, match="the engine went away"):
        agent_rollout(good[:2], engine, AgentRenderer(smol_tokenizer), pool, SamplingSettings(max_new_tokens=400))
    _assert_nothing_left(pool, cgroups_before)


@pytest.fixture
def cgroups_before(pool):
    """Session cgroups this process already holds (other tests' live pools), so only this test's count."""
    return set(session_cgroups_of_this_process(pool.uids))


def _assert_nothing_left(pool, before):
    assert pool.health()["open_sessions"] == 0
    assert set(session_cgroups_of_this_process(pool.uids)) - before == set()
    assert leftovers(pool.uids) == {"processes": [], "cgroups": [], "scratch_mounts": []}
