"""The agent environment's sandbox process SIGKILLed from outside mid-step: the episode ends
as `env_error` (the environment failed, not the model), never as a tool result the model is
blamed for, and the environment opens the next episode normally."""

import os
import signal
import threading
import time

import psutil

from tempering.agents.env import ToolEnv
from tempering.data.toolcalls import format_tool_call
from tests.agents.test_env import ws


def kill_sandbox_when_running(stop: threading.Event) -> None:
    """SIGKILL the outermost sandbox process (bwrap) under this test process once the program runs
    inside it (a descendant that is not bwrap: set-up is over). Set-up is judged by the program
    being there, not by the process's age: psutil's create_time can be off by most of a second."""
    while not stop.is_set():
        for child in psutil.Process(os.getpid()).children(recursive=True):
            try:
                outer = child.name() == "bwrap" and child.parent().name() != "bwrap"
                if outer and any(p.name() != "bwrap" for p in child.children(recursive=True)):
                    os.kill(child.pid, signal.SIGKILL)
                    return
            except psutil.Error:
                continue
        time.sleep(0.01)


def test_a_sandbox_killed_mid_step_ends_the_episode_as_env_error(pool):
    env = ToolEnv(pool)
    env.reset(ws())
    stop = threading.Event()
    killer = threading.Thread(target=kill_sandbox_when_running, args=(stop,))
    killer.start()
    try:
        _, reward, done, info = env.step(format_tool_call("shell", {"cmd": "sleep 4; echo 7 > n.txt"}))
    finally:
        stop.set()
        killer.join()
    assert done and info["status"] == "env_error" and reward == 0.0, info
    assert "killed" in info["error"]
    env.reset(ws())  # the pool is still usable: the next episode runs
    *_, info = env.step(format_tool_call("shell", {"cmd": "echo 7 > n.txt"}))
    assert info.get("status", "ok") != "env_error"
    env.close()
