"""The judge of Harbor tasks: the task's tests/test.sh run against the episode's final /work.

    verdict = run_harbor_tests(session, tests={"test.sh": "..."}, script="test.sh", timeout_s=60)
    verdict.reward        # Harbor's reward (float, partial credit kept); None: no valid reward

Harbor's convention (harbor 0.25, `verifier/verifier.py`): after the agent, the task's tests/
folder is uploaded to /tests, reward files are removed, /tests/test.sh runs from the working
directory, and the reward is read from /logs/verifier/reward.json (a flat JSON object of
numbers; the trial's reward is its "reward" key) if it exists, else /logs/verifier/reward.txt
(one float); empty, non-numeric or non-finite is an error.

Here the run is one sandbox call of its own, after the agent's last turn (`harbor_runner.py`):

- The tests come from the task directory as loaded, on stdin; they are written under
  /tmp/harbor/tests, never into /work, so an agent that edits or plants `tests/test.sh` in
  its workspace changes nothing.
- The reward is read from /tmp/harbor/logs/verifier, made by the runner in a /tmp that is a
  tmpfs of this call alone (the runner fails if anything is there): no reward file the
  agent wrote in its own calls, at any path, survives into the verdict. Harbor's absolute
  paths (/tests, /solution, /logs, the image's WORKDIR) are rewritten to these when the
  task loads (`harbor.py: map_paths`).
- The verdict is the runner's own report line, tagged with a nonce sent on stdin; the exit
  status of test.sh is not the reward (Harbor's is not either).

Not isolated (as under Harbor, where it runs as root): code the test script itself runs (the
agent's program, a test suite importing the agent's module) runs as the same user as the
script, so it can write the reward file during the test run. Tests that run the agent's code
should run it in a way it cannot reach the verdict (the shipped tasks compare outputs, or run
Python under `-I` with the workspace last on sys.path).
"""

from __future__ import annotations

import json
import math
import secrets
from pathlib import Path
from typing import Mapping, NamedTuple

from tempering.sandbox.base import ExecResult, Limits, SandboxSession

RUNNER_ARGV = ("python3", "-I", "-S", "-B", "-c")
RUNNER = (Path(__file__).parent / "harbor_runner.py").read_text()
ROOT = "/tmp/harbor"
"""Where Harbor's root folders live in a sandbox call (a tmpfs of that call alone)."""
HARBOR_ROOTS = {"/tests": f"{ROOT}/tests", "/solution": f"{ROOT}/solution", "/logs": f"{ROOT}/logs"}
"""Harbor's absolute folders -> where they are in the sandbox."""


class HarborVerdict(NamedTuple):
    reward: float | None
    """Harbor's reward; None when the run left no valid one (`problem` says why)."""
    problem: str
    log: str
    """The tail of test.sh's output (logs/verifier/test-stdout.txt)."""
    run: ExecResult


def run_harbor_tests(
    session: SandboxSession,
    *,
    tests: Mapping[str, str],
    script: str = "test.sh",
    env: Mapping[str, str] | None = None,
    timeout_s: float = 60.0,
    limits: Limits | None = None,
) -> HarborVerdict:
    """Run the task's tests folder (`tests`: relative path -> text, `script` among them) against
    the session's /work and read the reward as Harbor does.

    `timeout_s` bounds test.sh inside the call; the call itself is bounded by `limits` (the
    session's when None), which ends it without a report when shorter.
    """
    nonce = secrets.token_hex(16)
    payload = {"nonce": nonce, "files": dict(tests), "script": script, "env": dict(env or {}), "timeout_s": timeout_s}
    if limits is not None:
        limits = limits.replace(wall_s=max(limits.wall_s, timeout_s + 5), cpu_s=max(limits.cpu_s, timeout_s + 5))
    run = session.exec([*RUNNER_ARGV, RUNNER], stdin=json.dumps(payload).encode(), limits=limits)
    report = _report(run.stdout, nonce)
    if report is None:
        why = f"the verifier left no report ({run.status}{': ' + run.error if run.error else ''})"
        return HarborVerdict(None, why, run.stderr[-2000:], run)
    log = str(report.get("log", ""))
    if report.get("exit") == "timeout":
        return HarborVerdict(None, f"{script} ran past its {timeout_s:g} s", log, run)
    reward, problem = parse_reward(report.get("reward_json"), report.get("reward_txt"))
    return HarborVerdict(reward, problem, log, run)


def parse_reward(reward_json: object, reward_txt: object) -> tuple[float | None, str]:
    """(reward, "") from the raw texts of reward.json and reward.txt (None: absent), or (None, why).

    reward.json wins when present: a JSON object whose values are all finite numbers, the reward
    its "reward" key. Else reward.txt: one finite float.
    """
    if isinstance(reward_json, str):
        if not reward_json.strip():
            return None, "reward.json is empty"
        try:
            rewards = json.loads(reward_json)
        except ValueError:
            return None, "reward.json is not JSON"
        if not isinstance(rewards, dict):
            return None, "reward.json is not a JSON object of rewards"
        bad = [k for k, v in rewards.items() if not _finite(v)]
        if bad:
            return None, f"reward.json: {bad[0]!r} is not a finite number"
        if "reward" not in rewards:
            return None, "reward.json has no 'reward' key"
        return float(rewards["reward"]), ""
    if isinstance(reward_txt, str):
        if not reward_txt.strip():
            return None, "reward.txt is empty"
        try:
            value = float(reward_txt.strip())
        except ValueError:
            return None, f"reward.txt is not a number: {reward_txt.strip()[:40]!r}"
        return (value, "") if math.isfinite(value) else (None, f"reward.txt is not finite: {value}")
    return None, "no reward file (reward.txt or reward.json in /logs/verifier)"


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _report(stdout: str, nonce: str) -> dict | None:
    tagged = [line for line in stdout.splitlines() if line.startswith(nonce + " ")]
    if not tagged:
        return None
    try:
        report = json.loads(tagged[-1][len(nonce) + 1 :])
    except ValueError:
        return None
    return report if isinstance(report, dict) else None
