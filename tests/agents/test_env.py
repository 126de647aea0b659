"""`ToolEnv`: the step protocol, counted errors, retry rewards, step limits, env failures."""

import pytest

from tempering.agents.env import ToolEnv
from tempering.agents.policies import MALFORMED
from tempering.agents.tasks import AgentTask
from tempering.data.toolcalls import format_tool_call
from tempering.sandbox import SandboxPool
from tempering.sandbox.backends import BwrapBackend


def arith(**kw) -> AgentTask:
    return AgentTask(
        **{
            "id": "a",
            "env": "tool_arith",
            "prompt": "What is 6 * 7?",
            "tools": ["calculator", "submit"],
            "goal": {"type": "answer", "value": "42"},
            **kw,
        }
    )


def ws(**kw) -> AgentTask:
    return AgentTask(
        **{
            "id": "w",
            "env": "workspace",
            "prompt": "Write 7 to n.txt.",
            "tools": ["shell", "read_file", "write_file", "submit"],
            "files": {"keep.txt": "k\n"},
            "protected": ["keep.txt"],
            "goal": {"type": "file", "path": "n.txt", "equals": "7"},
            **kw,
        }
    )


def test_reset_returns_the_prompt_and_submit_ends_with_the_outcome():
    env = ToolEnv()
    assert env.reset(arith()) == [{"role": "user", "content": "What is 6 * 7?"}]
    obs, reward, done, info = env.step(format_tool_call("calculator", {"expression": "6 * 7"}))
    assert obs == [{"role": "tool", "name": "calculator", "content": "42"}] and reward == 0.0 and not done
    obs, reward, done, info = env.step(format_tool_call("submit", {"answer": "42"}))
    assert done and reward == 1.0 and info["success"] and info["steps"] == 2 and info["tool_calls"] == 2
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("again")


def test_malformed_unknown_and_badly_typed_calls_are_counted_and_answered():
    env = ToolEnv(invalid_call_penalty=0.1)
    env.reset(arith())
    text = "\n".join(
        [MALFORMED, format_tool_call("shell", {"cmd": "ls"}), format_tool_call("calculator", {"expr": "1"})]
    )
    obs, reward, done, info = env.step(text)
    assert not done and len(obs) == 3 and all(m["content"].startswith("error:") for m in obs)
    assert "invalid JSON" in obs[0]["content"] and "unknown tool 'shell'" in obs[1]["content"]
    assert "'expression' is a required property" in obs[2]["content"]
    assert reward == pytest.approx(-0.3) and env.stats.invalid_calls == 3
    obs, reward, done, info = env.step("The answer is 42.")  # no call: the text is the answer
    assert done and reward == 1.0 and info["recovered"] and info["invalid_calls"] == 3


def test_retry_rewards_fall_with_each_attempt():
    task = arith(attempts=3, attempt_rewards=[1.0, 0.5, 0.25])
    for answers, rewards, success in [
        (["42"], [1.0], True),
        (["41", "42"], [0.0, 0.5], True),
        (["1", "2", "42"], [0.0, 0.0, 0.25], True),
        (["1", "2", "3"], [0, 0, 0], False),
    ]:
        env = ToolEnv()
        env.reset(task)
        got = []
        for a in answers:
            obs, reward, done, info = env.step(format_tool_call("submit", {"answer": a}))
            got.append(reward)
        assert done and got == rewards and info["success"] == success
        if len(answers) > 1:
            assert info["wrong_answers"] == (len(answers) - 1 if success else 2)
    env = ToolEnv()
    env.reset(task)
    obs, *_ = env.step("It is 41")
    assert obs == [{"role": "user", "content": "That is not correct. Try again (2 attempts left)."}]


def test_step_limit_ends_the_episode_unsolved():
    env = ToolEnv()
    env.reset(arith(max_steps=2))
    assert not env.step(MALFORMED).done
    obs, reward, done, info = env.step(MALFORMED)
    assert done and reward == 0.0 and not info["success"] and info["invalid_calls"] == 2


def test_scratch_persists_across_steps_and_goal_reads_the_final_state(pool):
    env = ToolEnv(pool)
    env.reset(ws())
    env.step(format_tool_call("shell", {"cmd": "echo 7 > n.txt"}))
    obs, *_ = env.step(format_tool_call("read_file", {"path": "n.txt"}))
    assert obs[0]["content"] == "7\n"
    *_, done, info = env.step(format_tool_call("submit", {"answer": "done"}))
    assert done and info["success"] and info["intact"] and env.ctx.session is None  # session closed


def test_touching_a_protected_file_is_not_intact(pool):
    env = ToolEnv(pool)
    env.reset(ws())
    text = format_tool_call("shell", {"cmd": "echo 7 > n.txt; echo x >> keep.txt"})
    env.step(text)
    *_, info = env.step("done")
    assert info["success"] and not info["intact"]


def test_a_sandbox_that_cannot_open_is_an_env_error_not_a_model_failure():
    broken = SandboxPool(backend=BwrapBackend(binary="false"), size=1)  # its self-check fails: it refuses
    env = ToolEnv(broken)
    from tempering.agents.episode import run_episode
    from tempering.agents.policies import oracle

    result = run_episode(env, oracle, ws())
    assert result.stats.status == "env_error" and "cannot open" in result.stats.error and not result.stats.success


def test_a_sandbox_failing_mid_episode_is_an_env_error():
    broken = SandboxPool(backend=BwrapBackend(binary="false"), size=1)
    broken._check_report = "skipped"  # as tests/sandbox does: reach a run whose backend exits before any sandbox
    try:
        env = ToolEnv(broken)
        env.reset(ws())
        obs, reward, done, info = env.step(format_tool_call("shell", {"cmd": "echo 7 > n.txt"}))
        assert done and info["status"] == "env_error" and "sandbox error" in info["error"] and reward == 0.0
    finally:
        broken.close()
