"""What the candidate sends back cannot crash the verdict or hold the judge.

A lone surrogate in an exception message must still give a Reward that serialises (through
`score` and through the real `temper verify` process); a reply that is huge or built to be
slow to decode (a set of colliding hashes) ends as the candidate's failure with its own flag,
and a signed verdict, instead of pinning the judge until the sandbox's wall limit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tempering.types import Reward, Task
from tempering.verifiers import score
from tempering.verifiers.code import CodeSpec, reward_from_run, run_judge
from tempering.verifiers.code_judge import MAX_REPLY_ELEMENTS, DecodeBudget, ReplyTooLarge, decode

SRC = Path(__file__).resolve().parents[2] / "src"


def add_task(**spec) -> Task:
    prompt = "def add(a, b):\n"
    tests = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(0, 0) == 0\n"
    verifier = {"type": "code", "entry_point": "add", "prompt": prompt, "tests": tests, **spec}
    return Task(id="t", prompt=prompt, verifier=verifier, track="code")


SURROGATE = "    raise ValueError('bad ' + chr(0xD800))\n"


def test_a_lone_surrogate_in_a_message_gives_a_reward_that_serialises(ctx):
    reward = score(add_task(), SURROGATE, ctx)
    back = Reward.model_validate_json(reward.model_dump_json())
    assert back.value == 0.0 and "ValueError: bad ?" in back.detail


def test_a_lone_surrogate_does_not_crash_temper_verify(tmp_path):
    (tmp_path / "task.json").write_text(add_task().model_dump_json())
    (tmp_path / "completion.txt").write_text(SURROGATE)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "tempering.cli",
            "verify",
            "--task",
            str(tmp_path / "task.json"),
            "--completion",
            str(tmp_path / "completion.txt"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    reward = Reward.model_validate_json(res.stdout.strip().splitlines()[-1])
    assert reward.value == 0.0 and "ValueError" in reward.detail


def test_any_verifiers_text_is_made_writable_by_score(monkeypatch):
    """`score` is the one entry point, so a plug-in verifier quoting raw completion text is covered too."""
    from tempering.verifiers import VERIFIERS

    def echo(spec, completion, ctx):
        return Reward(value=0.0, flags=[f"saw:{completion}"], detail=f"saw {completion}")

    monkeypatch.setitem(VERIFIERS, "test_echo", echo)
    reward = score(Task(id="e", prompt="say", verifier={"type": "test_echo"}), "a" + chr(0xD800))
    back = Reward.model_validate_json(reward.model_dump_json())
    assert back.detail == "saw a?" and back.flags == ["saw:a?"]


def test_decode_stops_at_the_element_cap_and_the_deadline():
    later = time.monotonic() + 600
    with pytest.raises(ReplyTooLarge, match="more than"):
        decode(["list", [["none"]] * (MAX_REPLY_ELEMENTS + 1)], budget=DecodeBudget(later))
    with pytest.raises(ReplyTooLarge, match="too slow"):
        decode(["list", [["int", "1"]] * 10], budget=DecodeBudget(time.monotonic() - 1))
    at_cap = ["list", [["none"]] * (MAX_REPLY_ELEMENTS - 1)]  # the list itself is one value
    assert decode(at_cap, budget=DecodeBudget(later)) == [None] * (MAX_REPLY_ELEMENTS - 1)


def crafted_reply_program(reply_expr: str) -> str:
    """A candidate that builds its own 'ok' reply line at load time and writes it straight to the
    judge's pipe when called (only the judge alone sees this: the static checks flag `import os`)."""
    return (
        "import os, stat, time\n"
        f"LINE = ('[\"ok\", ' + {reply_expr} + ']\\n').encode()\n"
        "def add(a, b):\n"
        "    for fd in range(3, 64):\n"
        "        try:\n"
        "            if stat.S_ISFIFO(os.fstat(fd).st_mode):\n"
        "                os.write(fd, LINE)\n"
        "        except OSError:\n"
        "            pass\n"
        "    time.sleep(60)\n"
    )  # until the judge ends us


@pytest.mark.parametrize(
    "reply_expr",
    [
        # more values than the cap: 250k Nones in one list
        f"'[\"list\", [' + ', '.join(['[\"none\"]'] * {MAX_REPLY_ELEMENTS + 50_000}) + ']]'",
        # a set of 250k ints that share one hash: quadratic to build, hours of the judge's time
        "'[\"set\", [' + ', '.join('[\"int\", \"%x\"]' % (1 + k * ((1 << 61) - 1)) for k in range(250_000)) + ']]'",
    ],
    ids=["too_many_values", "colliding_hashes"],
)
def test_a_reply_expensive_to_decode_is_the_candidates_loss(ctx, reply_expr):
    one_call = "def check(candidate):\n    assert candidate(1, 2) == 3\n"
    spec = CodeSpec.model_validate(add_task(tests=one_call, call_timeout_s=3.0, budget_s=6.0).verifier)
    reward = reward_from_run(run_judge(spec, crafted_reply_program(reply_expr), ctx.sandbox()))
    assert reward.value == 0.0, reward
    assert "call_reply_too_large" in reward.flags, reward  # a verdict came back, not the sandbox's wall limit
    assert "no_verdict" not in reward.flags and "sandbox:timeout" not in reward.flags, reward
    assert "reply too large" in reward.detail, reward


def test_verdict_text_is_json_safe():
    """The verdict's own text fields never hold what `json.dumps(..., ensure_ascii=False)` cannot encode."""
    from tempering.verifiers.code_judge import clean_text

    text = clean_text("x" + chr(0xDC80) + "y" * 10, 5)
    assert text == "x?yyy" and json.dumps(text, ensure_ascii=False).encode("utf-8")
