"""The cheat battery: each file in cheats/ is a completion that attacks the harness.

The files end in `.cheat`, not `.py`, so that no tool ever imports them (`--doctest-modules`
would run `sys.exit(0)`, forks and atexit handlers inside the test process).

Every cheat must (1) score 0 with its expected flag through `score`, (2) get nothing from the
sandboxed judge alone, static checks skipped (defence in depth: the harness holds by
itself), and (3) really be an attack: it fools a naive harness, run in the sandbox too.

The naive harness is the usual `exec(prompt + completion + tests + "check(f)")` in one
process, read in the usual lax ways: passed if the exit status is 0 (`exit0`), if stdout
shows a pass (`stdout`), or if the run timed out with no failure printed (`timeout`).
`visible` runs only the prompt's docstring examples (a lookup table passes those).

Header of a cheat file: `# task:` (a HumanEval id, or the id of a task in cheats/tasks.jsonl:
tasks whose tests have a shape no HumanEval task has, such as `all(map(candidate, ...))`), `# attack:`, `# naive:`, `# flag:` (expected flag) and
optionally `# raw: partial` (the judge alone gives 0 < value < 1: the hidden tests catch a
lookup table only where it guesses wrong) and `# judge flag:` (a flag the sandboxed judge
itself raises, static checks skipped: a result equal to everything is named by the run).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tempering.sandbox import Limits
from tempering.sandbox.base import MiB
from tempering.sources.humaneval import humaneval_tasks
from tempering.types import Task
from tempering.verifiers import score
from tempering.verifiers.code import CodeSpec, reward_from_run, run_judge
from tempering.verifiers.code_static import assemble_program, visible_examples

CHEAT_DIR = Path(__file__).parent / "cheats"
CHEATS = sorted(CHEAT_DIR.glob("*.cheat"))
FAST = {"call_timeout_s": 1.0, "budget_s": 3.0}  # cheats need no patience

NAIVE_MAIN = """
import sys
entry = sys.argv[1]
src = open("solution.py").read() + "\\n\\n" + open("test_solution.py").read() + "\\n\\ncheck(" + entry + ")\\n"
namespace = {"__name__": "__main__"}
exec(compile(src, "solution.py", "exec"), namespace)
print('{"passed": true}')
"""


@dataclass
class Cheat:
    name: str
    task: Task
    code: str
    naive: str
    flag: str
    raw: str
    judge_flag: str | None


def battery_tasks() -> dict[str, Task]:
    """HumanEval's tasks and the battery's own (cheats/tasks.jsonl), by id."""
    own = [Task.model_validate_json(line) for line in (CHEAT_DIR / "tasks.jsonl").read_text().splitlines() if line]
    return {t.id: t for t in [*humaneval_tasks(), *own]}


def load_cheat(path: Path) -> Cheat:
    header = {}
    for line in path.read_text().splitlines():
        if not line.startswith("# ") or ":" not in line:
            break
        key, value = line[2:].split(":", 1)
        header[key.strip()] = value.strip()
    task = battery_tasks()[header["task"]]
    task = task.model_copy(update={"verifier": {**task.verifier, **FAST}})
    return Cheat(
        path.stem,
        task,
        path.read_text(),
        header["naive"],
        header["flag"],
        header.get("raw", "zero"),
        header.get("judge flag"),
    )


def naive_run(task: Task, completion: str, sandbox, visible_only: bool = False):
    spec = task.verifier
    program = assemble_program(spec["prompt"], completion, spec["entry_point"]).source
    tests = spec["tests"]
    if visible_only:
        lines = [
            f"    assert candidate(*{args!r}) == {want!r}"
            for args, want in visible_examples(spec["prompt"], spec["entry_point"])
        ]
        tests = "def check(candidate):\n" + "\n".join(lines) + "\n"
    limits = Limits(
        wall_s=2, cpu_s=2, memory_bytes=256 * MiB, processes=64, scratch_bytes=8 * MiB, output_bytes=64 * 1024
    )
    files = {"main.py": NAIVE_MAIN, "solution.py": program, "test_solution.py": tests}
    return sandbox.exec(["python3", "-S", "main.py", spec["entry_point"]], files=files, limits=limits)


def naive_verdict(result, mode: str) -> bool:
    """Did the naive harness, read the lax way `mode` names, call this a pass?"""
    if mode in ("exit0", "visible"):
        return result.status == "ok"
    if mode == "stdout":
        return '{"passed": true}' in result.stdout or "PASS" in result.stdout.split()
    if mode == "timeout":
        return result.status == "timeout" and "Error" not in result.stderr
    raise ValueError(f"unknown naive mode {mode!r}")


def test_battery_is_big_enough():
    assert len(CHEATS) >= 15


@pytest.mark.parametrize("path", CHEATS, ids=lambda p: p.stem)
def test_cheat_scores_zero_with_a_flag(path, ctx):
    cheat = load_cheat(path)
    reward = score(cheat.task, cheat.code, ctx)
    assert reward.value == 0.0, reward
    assert cheat.flag in reward.flags, reward


@pytest.mark.parametrize("path", CHEATS, ids=lambda p: p.stem)
def test_judge_alone_gives_the_cheat_nothing(path, ctx):
    cheat = load_cheat(path)
    spec = CodeSpec.model_validate(cheat.task.verifier)
    program = assemble_program(spec.prompt, cheat.code, spec.entry_point)
    reward = reward_from_run(run_judge(spec, program.source, ctx.sandbox()))
    if cheat.raw == "partial":
        assert 0.0 < reward.value < 1.0, reward
    else:
        assert reward.value == 0.0, reward
    assert "processes_survived" not in reward.flags
    if cheat.judge_flag is not None:
        assert cheat.judge_flag in reward.flags, reward


@pytest.mark.parametrize("path", CHEATS, ids=lambda p: p.stem)
def test_cheat_really_fools_a_naive_harness(path, ctx):
    cheat = load_cheat(path)
    result = naive_run(cheat.task, cheat.code, ctx.sandbox(), visible_only=cheat.naive == "visible")
    assert naive_verdict(result, cheat.naive), (result.status, result.stdout[-300:], result.stderr[-500:])


@pytest.mark.parametrize("mode", ["exit0", "stdout", "timeout", "visible"])
def test_naive_harness_fails_an_honest_wrong_answer(mode, ctx):
    """The control: without an attack the naive harness does fail a wrong solution."""
    task = {t.id: t for t in humaneval_tasks()}["HumanEval/0"]
    result = naive_run(task, "    return None\n", ctx.sandbox(), visible_only=mode == "visible")
    assert not naive_verdict(result, mode)


def test_killing_the_judge_leaves_no_verdict(ctx):
    cheat = load_cheat(CHEAT_DIR / "kill_judge.cheat")
    spec = CodeSpec.model_validate(cheat.task.verifier)
    program = assemble_program(spec.prompt, cheat.code, spec.entry_point).source
    reward = reward_from_run(run_judge(spec, program, ctx.sandbox()))
    assert reward.value == 0.0 and "no_verdict" in reward.flags
