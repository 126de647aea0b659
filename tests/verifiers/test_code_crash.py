"""A reward worker's sandbox run SIGKILLed from outside while it judges code: the verdict is
`verifier_error` (the sample is dropped and counted, never a model failure with reward 0 and a
negative advantage), and the worker judges the next completion normally."""

import threading

from tempering.rollout.rollout import ThreadRewardWorkers
from tests.agents.test_env_crash import kill_sandbox_when_running
from tests.verifiers.test_code import code_task


def test_a_judge_run_killed_from_outside_is_a_verifier_error(ctx):
    with ThreadRewardWorkers(1, ctx) as workers:
        # the sandbox opened and self-checked first, so the kill below hits the judge run
        assert workers.submit(code_task(), "    return a + b\n").result(60).status == "scored"
        stop = threading.Event()
        killer = threading.Thread(target=kill_sandbox_when_running, args=(stop,))
        killer.start()
        try:
            slow = "    import time\n    time.sleep(3)\n    return a + b\n"
            verdict = workers.submit(code_task(), slow).result(60)
        finally:
            stop.set()
            killer.join()
        assert verdict.status == "verifier_error", verdict
        assert "killed" in (verdict.reward.detail or "")
        again = workers.submit(code_task(), "    return a + b\n").result(60)
    assert again.status == "scored" and again.reward.value == 1.0
