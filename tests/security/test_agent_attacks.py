"""The sandbox attacks, driven by an agent through its tools (`ToolEnv.step`).

Each attack is a scripted episode: the assistant turns a model could write (tool calls in
the `<tool_call>` form), run through the same environment as training episodes. The
battery's `host_guard` checks the host after every test; these tests add what is special
to agents: each episode's session has its own uid and /work, so one episode never sees
another's files or processes, and nothing of an episode survives it.
"""

import os
import threading

from tempering.agents.env import ToolEnv
from tempering.agents.episode import run_episode
from tempering.agents.tasks import AgentTask
from tempering.agents.tools import MAX_OBSERVATION_CHARS
from tempering.data.toolcalls import format_tool_call

TOOLS = ["shell", "python", "read_file", "write_file", "submit"]


def task(**kw) -> AgentTask:
    return AgentTask(
        **{
            "id": "attack",
            "env": "workspace",
            "prompt": "do the work",
            "tools": TOOLS,
            "files": {"notes.txt": "hello\n"},
            "goal": {"type": "file", "path": "notes.txt", "equals": "hello"},
            "max_steps": 20,
            **kw,
        }
    )


def scripted(turns):
    """A policy playing `turns` (each a list of (tool, arguments)), then submitting."""

    def act(t, messages):
        k = sum(m["role"] == "assistant" for m in messages)
        calls = turns[k] if k < len(turns) else [("submit", {"answer": "done"})]
        return "\n".join(format_tool_call(name, args) for name, args in calls)

    return act


def outputs(result):
    return [m["content"] for m in result.messages if m["role"] == "tool"]


def uid_processes(uid):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                found.append(pid)
        except OSError:
            pass
    return found


def test_agent_cannot_read_host_files(pool, canary_dir):
    secret = os.path.join(canary_dir, "secret.txt")
    result = run_episode(
        ToolEnv(pool),
        scripted(
            [
                [("read_file", {"path": secret}), ("read_file", {"path": "../../etc/shadow"})],
                [("shell", {"cmd": f"cat {secret} /etc/shadow /work/main/pyproject.toml; echo end"})],
                [("shell", {"cmd": f"ln -s {secret} leak.txt; ln -s {canary_dir} d"})],
                [("read_file", {"path": "leak.txt"}), ("read_file", {"path": "d/secret.txt"})],
                [("python", {"code": f"print(open({secret!r}).read())"})],
            ]
        ),
        task(),
    )
    seen = "\n".join(outputs(result))
    assert "CANARY" not in seen and "root:" not in seen
    assert result.stats.status == "scored" and result.stats.tool_errors >= 5


def test_agent_cannot_write_outside_its_work_dir(pool, canary_dir):
    result = run_episode(
        ToolEnv(pool),
        scripted(
            [
                [("shell", {"cmd": f"echo pwned > {canary_dir}/planted; echo x > /evil; echo done"})],
                [("shell", {"cmd": f"mkdir sub; ln -s {canary_dir} sub/d"})],
                [
                    ("write_file", {"path": "sub/d/planted.txt", "content": "through a link"}),
                    ("write_file", {"path": "/etc/evil", "content": "x"}),
                    ("write_file", {"path": "../escape", "content": "x"}),
                ],
            ]
        ),
        task(),
    )
    assert not os.path.exists(os.path.join(canary_dir, "planted.txt")) and not os.path.exists("/evil")
    errors = [o for o in outputs(result) if o.startswith("error:")]
    assert len(errors) == 3 and result.stats.status == "scored"  # host_guard: the canary dir is unchanged


def test_agent_cannot_reach_the_host_network(pool):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    s.setblocking(False)
    port = s.getsockname()[1]
    try:
        result = run_episode(
            ToolEnv(pool),
            scripted(
                [
                    [
                        (
                            "python",
                            {
                                "code": f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), 1)\n"
                                "    print('CONNECTED')\nexcept OSError as e:\n    print('blocked')\n"
                            },
                        )
                    ],
                    [("shell", {"cmd": f"echo hi > /dev/tcp/127.0.0.1/{port} && echo CONNECTED; echo end"})],
                ]
            ),
            task(),
        )
        assert not any("CONNECTED" in o for o in outputs(result)) and "blocked" in outputs(result)[0]
        try:
            s.accept()
            raise AssertionError("the host listener accepted a connection from an agent")
        except BlockingIOError:
            pass
    finally:
        s.close()


def test_bombs_and_floods_end_the_call_not_the_episode(pool):
    result = run_episode(
        ToolEnv(pool),
        scripted(
            [
                [("shell", {"cmd": ":(){ :|:& };: ; sleep 30"})],
                [("python", {"code": "a = []\nwhile True:\n    a.append(bytearray(4 * 1024 * 1024))\n"})],
                [("shell", {"cmd": "yes flood | head -c 200000"})],
                [
                    (
                        "shell",
                        {"cmd": "setsid nohup bash -c 'trap \"\" TERM HUP; sleep 60' >/dev/null 2>&1 & echo started"},
                    )
                ],
                [("shell", {"cmd": "echo still here; cat notes.txt"})],
            ]
        ),
        task(),
    )
    out = outputs(result)
    assert "timeout" in out[0] and "memory_limit" in out[1]
    assert len(out[2]) <= MAX_OBSERVATION_CHARS + 160 and "more characters cut" in out[2]
    assert out[2].endswith("output_limit: output passed 65536 bytes]")  # the cut never hides how it ended
    assert out[4] == "still here\nhello"  # the episode went on, its /work intact
    assert result.stats.success and result.stats.sandbox_timeouts >= 1 and result.stats.status == "scored"


def test_agent_rewriting_the_tests_does_not_pass_the_goal(pool):
    tests = (
        "import unittest\nfrom m import f\n\nclass T(unittest.TestCase):\n    def test(self):\n"
        "        self.assertEqual(f(), 2)\n\nunittest.main()\n"
    )
    t = task(
        files={"m.py": "def f():\n    return 1\n", "test_m.py": tests},
        protected=["test_m.py"],
        goal={"type": "tests", "files": {"test_m.py": tests}},
    )
    result = run_episode(
        ToolEnv(pool),
        scripted(
            [
                [("write_file", {"path": "test_m.py", "content": "print('all tests pass')\n"})],
                [("shell", {"cmd": "python3 test_m.py"})],
            ]
        ),
        t,
    )
    assert outputs(result)[1] == "all tests pass"  # the hack works in the episode ...
    assert not result.stats.success and not result.stats.intact  # ... and not on the goal


def test_episodes_never_see_each_others_files_or_processes(pool):
    """Two episodes at once: A keeps a secret file and a running process; B looks everywhere."""
    marker = "tempering-episode-a-7731"
    a_started = threading.Event()
    found = {}

    def episode_a(t, messages):
        k = sum(m["role"] == "assistant" for m in messages)
        if k == 0:
            return format_tool_call("shell", {"cmd": f"echo {marker} > secret.txt; id -u"})
        if k == 1:
            a_started.set()
            cmd = (
                f"bash -c 'exec -a {marker} sleep 2' & sleep 0.2; "
                "for p in /proc/[0-9]*; do cat $p/cmdline; echo; done | grep -c '^tempering-episode-a'; wait"
            )
            return format_tool_call("shell", {"cmd": cmd})
        return format_tool_call("submit", {"answer": "done"})

    def run_a():
        found["a"] = run_episode(ToolEnv(pool), episode_a, task())

    thread = threading.Thread(target=run_a)
    thread.start()
    assert a_started.wait(30)
    import time

    time.sleep(0.5)  # A's second call (the process) is running now
    probe = (
        "id -u; ls -a /; ls /run /tmp /work; cat /proc/*/cmdline 2>/dev/null | tr '\\0' ' '; "
        "find / -maxdepth 4 -path /proc -prune -o -name 'secret*' -print 2>/dev/null | head; "
        "ls /run/tempering-sandbox 2>&1; echo end"
    )
    result_b = run_episode(ToolEnv(pool), scripted([[("shell", {"cmd": probe})]]), task())
    assert thread.is_alive()  # B looked while A's process was running
    thread.join(30)
    out_b = outputs(result_b)[0]
    out_a = outputs(found["a"])
    assert marker not in out_b and "secret.txt" not in out_b and "\nend\n" in out_b, out_b
    assert out_a[1].strip() == "1"  # A itself sees its process
    uid_a, uid_b = out_a[0].strip(), out_b.split()[0]
    assert uid_a != uid_b  # each session runs under its own uid
    assert uid_processes(int(uid_a)) == [] and uid_processes(int(uid_b)) == []  # nothing outlives an episode
