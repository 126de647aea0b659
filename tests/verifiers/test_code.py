"""The `code` verifier: HumanEval canonical solutions score 1, hand-derived partial credit,
the judge's plain-data codec and assert instrumentation, verdict signatures, speed."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from typer.testing import CliRunner

from tempering.cli import app
from tempering.sandbox import ExecResult
from tempering.sources.humaneval import humaneval_canonical, humaneval_tasks
from tempering.types import Reward, Task
from tempering.verifiers import VerifierError, score
from tempering.verifiers.code import CodeSpec, parse_verdict, reward_from_run, run_judge
from tempering.verifiers.code_judge import (
    RECORDER,
    VERDICT_MAGIC,
    CandidateError,
    HarnessError,
    Recorder,
    candidate_exception,
    decode,
    encode,
    instrument_tests,
)
from tempering.verifiers.code_static import assemble_program, cheat_flags, parse_program

ADD_TESTS = """
def check(candidate):
    assert candidate(1, 2) == 3
    assert candidate(0, 0) == 0
    assert candidate(-1, 1) == 0
    assert candidate(-2, -3) == -5
    assert True, "constant asserts test nothing and do not count"
"""


def code_task(tests: str = ADD_TESTS, entry_point: str = "add", **spec) -> Task:
    prompt = f"def {entry_point}(a, b):\n"
    verifier = {"type": "code", "entry_point": entry_point, "prompt": prompt, "tests": tests, **spec}
    return Task(id="t", prompt=prompt, verifier=verifier, track="code")


@pytest.fixture(scope="module")
def tasks() -> dict[str, Task]:
    return {t.id: t for t in humaneval_tasks()}


# --- scoring through the CLI and `score` --------------------------------------------------


@pytest.mark.parametrize("task_id", ["HumanEval/0", "HumanEval/32", "HumanEval/38", "HumanEval/162"])
def test_canonical_solutions_score_one_through_the_cli(tmp_path, tasks, task_id):
    # 32 and 38 call prompt helpers (poly, encode_cyclic) in loops; 162 imports hashlib
    (tmp_path / "task.json").write_text(tasks[task_id].model_dump_json())
    (tmp_path / "completion.txt").write_text(humaneval_canonical(task_id))
    res = CliRunner().invoke(
        app, ["verify", "--task", str(tmp_path / "task.json"), "--completion", str(tmp_path / "completion.txt")]
    )
    assert res.exit_code == 0, res.output
    reward = Reward.model_validate_json(res.stdout.strip().splitlines()[-1])
    assert reward.value == 1.0 and reward.flags == [], reward


@pytest.mark.slow
def test_all_164_canonical_solutions_score_one(tasks, ctx):
    started = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        rewards = dict(zip(tasks, pool.map(lambda t: score(t, humaneval_canonical(t.id), ctx), tasks.values())))
    elapsed = time.perf_counter() - started
    bad = {tid: r for tid, r in rewards.items() if r.value != 1.0 or r.flags}
    assert len(rewards) == 164 and not bad, bad
    print(f"164 canonical solutions scored in {elapsed:.1f}s")


def test_canonical_solutions_raise_no_static_flag(tasks):
    for task in tasks.values():
        spec = task.verifier
        program = assemble_program(spec["prompt"], humaneval_canonical(task.id), spec["entry_point"])
        assert cheat_flags(parse_program(program), program, spec["prompt"], spec["entry_point"]) == [], task.id


def test_wrong_solution_fails(tasks, ctx):
    # has_close_elements: 3 of its 7 asserts expect False
    reward = score(tasks["HumanEval/0"], "    return False\n", ctx)
    assert reward.value == pytest.approx(3 / 7) and reward.components["asserts_total"] == 7


def test_syntax_error_scores_zero(tasks, ctx):
    reward = score(tasks["HumanEval/0"], "    return (\n", ctx)
    assert reward.value == 0.0 and reward.flags == ["syntax_error"]


def test_partial_credit_is_the_share_of_asserts(ctx):
    # abs(a) + b: right for a >= 0 (asserts 1, 2), wrong for a < 0 (3: 2 != 0, 4: -1 != -5)
    reward = score(code_task(), "    return abs(a) + b\n", ctx)
    assert reward.value == 0.5
    assert reward.components == {"pass_fraction": 0.5, "asserts_passed": 2.0, "asserts_total": 4.0}


def test_crash_before_any_assert_scores_zero(ctx):
    reward = score(code_task(), "    return a + b\n\nraise RuntimeError('at import')\n", ctx)
    assert reward.value == 0.0 and "load_error" in reward.flags
    assert "RuntimeError: at import" in reward.detail


def test_a_crash_fails_only_its_own_statement(ctx):
    tests = """
def check(candidate):
    assert candidate(1, 0) == 1
    value = candidate(-1, 0)        # raises: this statement aborts
    assert value == -1              # fails (value was never set)
    for i in range(3):
        assert candidate(i, 0) == i # one site, held every time
"""
    reward = score(code_task(tests), "    if a < 0:\n        raise ValueError(a)\n    return a + b\n", ctx)
    assert reward.value == pytest.approx(2 / 3)


def test_an_assert_in_a_loop_fails_if_any_iteration_fails(ctx):
    tests = "def check(candidate):\n    assert candidate(5, 0) == 5\n    for i in range(4):\n        assert candidate(i, 0) == i\n"
    assert score(code_task(tests), "    return a if a != 2 else 0\n", ctx).value == 0.5


def test_top_level_asserts_without_check(ctx):
    tests = "assert add(1, 2) == 3\nassert add(2, 2) == 5\n"
    assert score(code_task(tests), "    return a + b\n", ctx).value == 0.5


def test_tests_may_expect_the_candidates_exception_type(ctx):
    tests = """
def check(candidate):
    try:
        candidate(-1, 0)
        raised = False
    except ValueError:
        raised = True
    assert raised
    assert candidate(1, 1) == 2
"""
    assert score(code_task(tests), "    if a < 0:\n        raise ValueError(a)\n    return a + b\n", ctx).value == 1.0


def test_heldout_tests_never_touch_the_value(ctx):
    heldout = "def check(candidate):\n    assert candidate(2, 2) == 4\n    assert candidate(-2, 0) == -2\n"
    reward = score(code_task(heldout_tests=heldout), "    return a + b if a >= 0 or b != 0 else 0\n", ctx)
    assert reward.value == 1.0 and reward.components["heldout_pass_fraction"] == 0.5


def test_chat_completion_with_a_code_fence(tasks, ctx):
    completion = (
        "Sure! Here is the function:\n\n```python\nfrom typing import List\n\n"
        "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
        "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n"
        "```\nIt compares every pair."
    )
    assert score(tasks["HumanEval/0"], completion, ctx).value == 1.0


def test_tests_that_name_the_function_get_the_reference_not_the_candidate(tasks, ctx):
    # HumanEval/33's first three asserts read `candidate(l) == sort_third(l)`: with the name bound
    # to the candidate, any answer (here `[]`) agrees with itself on them
    reward = score(tasks["HumanEval/33"], "    return []\n", ctx)
    assert (reward.value, reward.components["asserts_total"]) == (0.0, 7.0), reward
    assert score(tasks["HumanEval/33"], humaneval_canonical("HumanEval/33"), ctx).value == 1.0
    identity = score(tasks["HumanEval/33"], "    return list(l)\n", ctx)  # right only where l[::3] is sorted
    assert identity.components["asserts_passed"] == 1.0, identity


def test_check_calling_the_function_by_name_without_a_reference_is_a_broken_task(ctx):
    tests = "def check(candidate):\n    assert candidate(1, 2) == add(1, 2)\n    assert candidate(0, 0) == 0\n"
    with pytest.raises(VerifierError, match="call `add` by name inside check"):
        score(code_task(tests), "    return 7\n", ctx)
    reward = score(code_task(tests, reference="    return a + b\n"), "    return 7\n", ctx)
    assert reward.value == 0.0 and reward.components["asserts_total"] == 2.0
    assert score(code_task(tests, reference="    return a + b\n"), "    return a + b\n", ctx).value == 1.0
    with pytest.raises(VerifierError, match="reference solution needs tests shaped"):
        score(code_task("assert add(1, 2) == 3\n", reference="    return a + b\n"), "    return a + b\n", ctx)


SENTINEL_COMPLETION = "    return '\\x00not-an-answer'\n"
"""A candidate that is wrong everywhere and agrees only with itself."""


def sentinel_counts_by_the_book(task: Task) -> tuple[int, int]:
    """(asserts passed, asserts) for the sentinel candidate with the tests run here, in-process,
    where the candidate is reachable only as `check`'s argument and every other name (the
    function's own included) comes from the prompt plus the canonical solution."""
    spec = task.verifier
    code, sites, _ = instrument_tests(spec["tests"])
    namespace = {"__name__": "__oracle__", RECORDER: Recorder(sites)}
    exec(compile(spec["prompt"] + humaneval_canonical(task.id), "<canonical>", "exec"), namespace)
    exec(code, namespace)
    namespace["check"](lambda *args, **kwargs: "\x00not-an-answer")
    return namespace[RECORDER].passed(), sites


@pytest.mark.slow
def test_no_humaneval_expected_value_comes_from_the_candidate(tasks, ctx):
    # over all 164: the judge's counts for a candidate that is wrong everywhere equal the counts
    # of the tests run by the book, so no name but `candidate` reaches the candidate
    with ThreadPoolExecutor(4) as pool:
        rewards = dict(zip(tasks, pool.map(lambda t: score(t, SENTINEL_COMPLETION, ctx), tasks.values())))
    judged = {
        tid: (int(r.components["asserts_passed"]), int(r.components["asserts_total"])) for tid, r in rewards.items()
    }
    expected = {tid: sentinel_counts_by_the_book(task) for tid, task in tasks.items()}
    assert len(judged) == 164
    assert {tid: (judged[tid], expected[tid]) for tid in tasks if judged[tid] != expected[tid]} == {}


def test_a_correct_solution_keeping_a_table_of_the_examples_scores_one(tasks, ctx):
    table = "    known = {((1.0, 2.0, 3.0), 0.5): False, ((1.0, 2.8, 3.0, 4.0, 5.0, 2.0), 0.3): True}\n"
    correct = (
        table + "    if (tuple(numbers), threshold) in known:\n        return known[(tuple(numbers), threshold)]\n"
        "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])\n"
    )
    reward = score(tasks["HumanEval/0"], correct, ctx)
    assert reward.value == 1.0 and reward.flags == [], reward
    wrong = table + "    return known.get((tuple(numbers), threshold), False)\n"  # the table, then a guess
    reward = score(tasks["HumanEval/0"], wrong, ctx)
    assert reward.value == 0.0 and "cheat:hardcoded_examples" in reward.flags, reward
    assert reward.components["asserts_passed"] > 0  # the run happened; the failed tests confirm the table


def test_a_slow_call_fails_alone(ctx):
    tests = "def check(candidate):\n    assert candidate(1, 1) == 2\n    assert candidate(2, 2) == 4\n    assert candidate(3, 3) == 6\n"
    completion = "    while a == 2:\n        pass\n    return a + b\n"
    reward = score(code_task(tests, call_timeout_s=0.5), completion, ctx)
    assert reward.value == pytest.approx(2 / 3) and "call_timeout" in reward.flags


def test_results_cross_as_plain_data_only(ctx):
    tests = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert type(candidate(1, 2)) is int\n"
    completion = "    class Three(int):\n        pass\n    return Three(a + b)\n"  # a subclass arrives as its base
    assert score(code_task(tests), completion, ctx).value == 1.0
    reward = score(code_task(tests), "    return iter([a + b])\n", ctx)
    assert reward.value == 0.0 and "cannot cross" in reward.detail


def test_a_sandbox_failure_is_not_the_models_fault():
    class BrokenPool:
        def exec(self, *args, **kwargs):
            return ExecResult("sandbox_error", error="bwrap did not start")

    spec = CodeSpec.model_validate(code_task().verifier)
    with pytest.raises(VerifierError, match="not the model's fault"):
        run_judge(spec, "def add(a, b):\n    return a + b\n", BrokenPool())


def test_broken_tests_are_not_the_models_fault(ctx):
    with pytest.raises(VerifierError, match="tests are broken"):
        score(code_task("def check(candidate):\n    pass\n"), "    return a + b\n", ctx)
    with pytest.raises(VerifierError, match="not plain data"):
        score(code_task("def check(candidate):\n    assert candidate(lambda: 1, 2) == 3\n"), "    return 3\n", ctx)


def test_spec_is_validated(ctx):
    with pytest.raises(ValueError, match="entry_point"):
        score(code_task(entry_point="not an identifier"), "pass", ctx)
    with pytest.raises(ValueError, match="extra"):
        score(code_task(timeout=3), "    return a + b\n", ctx)


# --- pure parts --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -7,
        2**200,
        1.5,
        float("inf"),
        -0.0,
        1e-310,
        2 + 3j,
        "",
        'ünï\n"',
        b"\x00\xff",
        [1, [2, (3,)]],
        (1, "a"),
        {"k": [1], 2: None},
        {1, 2},
        frozenset({"x"}),
        {(1, 2): {3.5}},
    ],
)
def test_codec_round_trip(value):
    back = decode(json.loads(json.dumps(encode(value))))
    assert back == value and type(back) is type(value)


def test_codec_turns_subclasses_into_their_base_and_refuses_other_objects():
    class Sneaky(int):
        def __eq__(self, other):
            return True

    assert type(decode(encode(Sneaky(5)))) is int and decode(encode(Sneaky(5))) == 5
    with pytest.raises(TypeError, match="cannot cross"):
        encode(object())
    nested = []
    nested.append(nested)
    with pytest.raises((ValueError, RecursionError)):
        encode(nested)


@pytest.mark.parametrize(
    "bad",
    [
        [],
        ["int", 5],
        ["bool", 1],
        ["nope"],
        ["dict", [[["list", []], ["none"]]]],
        ["list", "abc"],
        "str",
        ["str", "a", "b"],
    ],
)
def test_decode_is_strict(bad):
    with pytest.raises((ValueError, TypeError)):
        decode(bad)


def test_instrument_counts_sites_and_drops_constant_asserts():
    _, sites, has_check = instrument_tests(ADD_TESTS)
    assert sites == 4 and has_check
    with pytest.raises(HarnessError):
        instrument_tests("def check(candidate):\n    assert True\n")
    with pytest.raises(HarnessError):
        instrument_tests("def check(candidate:\n")


def test_candidate_exceptions_keep_their_builtin_type_only():
    exc = candidate_exception("ValueError", "bad")
    assert isinstance(exc, ValueError) and isinstance(exc, CandidateError)
    assert type(candidate_exception("SystemExit", "0")) is CandidateError  # never a BaseException in the judge
    assert type(candidate_exception("MyError", "x")) is CandidateError


@pytest.mark.parametrize(
    "name",
    ["StopIteration", "StopAsyncIteration", "GeneratorExit", "Exception", "OSError", "Warning", "BaseExceptionGroup"],
)
def test_control_flow_exceptions_never_reach_the_tests_as_themselves(name):
    """A StopIteration re-raised in trusted code ends the tests' map()/filter() early."""
    exc = candidate_exception(name, "")
    assert type(exc) is CandidateError and f"{name}: " in str(exc)


def test_verdict_needs_the_runs_key_and_nonce():
    key, nonce = b"k" * 32, "n1"
    body = json.dumps({"nonce": nonce, "tests": {"passed": 1, "sites": 1}})
    good = f"{VERDICT_MAGIC} {hmac.new(key, body.encode(), hashlib.sha256).hexdigest()} {body}"
    forged = f"{VERDICT_MAGIC} {'0' * 64} {body}"
    assert parse_verdict(f"noise\n{good}\n", key, nonce) == (json.loads(body), 0)
    assert parse_verdict(f"{forged}\n", key, nonce) == (None, 1)
    assert parse_verdict(f"{forged}\n{good}\n", key, nonce) == (json.loads(body), 1)
    assert parse_verdict(f"{good}\n", b"x" * 32, nonce) == (None, 1)  # another run's key
    assert parse_verdict(f"{good}\n", key, "n2") == (None, 1)  # another run's nonce


def test_program_assembly():
    prompt = 'import math\n\ndef f(x):\n    """doc"""\n'
    body = assemble_program(prompt, "    return math.sqrt(x)\n", "f")
    assert body.source == prompt + "    return math.sqrt(x)\n" and body.completion_line == 5
    fenced = assemble_program(prompt, "Here:\n```python\ndef f(x):\n    return x\n```\n", "f")
    assert fenced.source.endswith("\n\n\ndef f(x):\n    return x\n") and fenced.source.startswith("import math")


def static_flags(completion: str, prompt: str = "def f(x):\n", entry_point: str = "f") -> list[str]:
    program = assemble_program(prompt, completion, entry_point)
    return cheat_flags(parse_program(program), program, prompt, entry_point)


@pytest.mark.parametrize(
    "completion",
    [
        "    import math, hashlib, re, collections, itertools, functools, heapq, string, random\n    return x\n",
        "    import sys\n    sys.setrecursionlimit(10000)\n    return min(x, sys.maxsize)\n",
        "    return eval(x)\n",
        "    return x.replace('  ', '__')\n",
        "    return '_'.join(x.split()) + '-' * 2\n",
        "    sep = '_'\n    return sep.join([x, x]).upper()[::-1]\n",
        "    return ('a' * 10**9) + chr(10**7)\n",  # folding refuses big values instead of building them
        "    self._io = x\n    return self._code\n",
        "    return x\n\nif __name__ == '__main__':\n    import sys\n    assert f(1) == 1\n    print('All tests passed!')\n"
        "    sys.exit(0)\n",
    ],
)
def test_ordinary_code_is_not_flagged(completion):
    assert static_flags(completion) == []


@pytest.mark.parametrize(
    "completion,flag",
    [
        ("    import os\n    return x\n", "cheat:import:os"),
        ("    from os import _exit\n    return x\n", "cheat:import:os"),
        ("    import sys as s\n    s.exit(0)\n", "cheat:sys_internals"),
        ("    from sys import _getframe\n    return x\n", "cheat:sys_internals"),
        ("    import sys\n    getattr(sys, 'ex' + 'it')(0)\n", "cheat:sys_internals"),
        ("    return ().__class__.__bases__[0].__subclasses__()\n", "cheat:introspection"),
        ("    return getattr(x, '__globals__')\n", "cheat:dunder_string"),
        ("    return open('/work/tests.py').read()\n", "cheat:call:open"),
        ("    return vars()\n", "cheat:call:vars"),
        ("    raise KeyboardInterrupt\n", "cheat:exit_exception"),
        ("    print('PASSED')\n", "cheat:fake_output"),
        # ways around the checks above
        (
            "    return x\n\nfrom __main__ import __name__\nif __name__ == '__main__':\n    import os\n",
            "cheat:name_rebind",
        ),
        ("    return x\n\nfrom __main__ import __name__\n", "cheat:import:__main__"),
        ("    try:\n        pass\n    except Exception as __name__:\n        pass\n", "cheat:name_rebind"),
        ("    import random\n    random._os._exit(0)\n", "cheat:module_alias"),
        ("    import logging\n    logging.sys.exit(0)\n", "cheat:module_alias"),
        ("    import random\n    return getattr(random, '_' + 'os')\n", "cheat:module_alias"),
        ("    import sys\n    sys.__dict__['mod' + 'ules']['os']._exit(0)\n", "cheat:sys_internals"),
        ("    d = '_' * 2\n    return getattr((), d + 'class' + d)\n", "cheat:dunder_string"),
        ("    return getattr(x, ''.join(['_', '_', 'class', '_', '_']))\n", "cheat:dunder_string"),
        ("    return getattr(x, chr(95) * 2 + 'class' + chr(95) * 2)\n", "cheat:dunder_string"),
        ("    u = '_'\n    return getattr(x, f'{u}{u}class{u}{u}')\n", "cheat:dunder_string"),
        ("    return getattr(x, '__ssalc__'[::-1])\n", "cheat:dunder_string"),
        (
            "    d = '_' * 2\n    return getattr(x, " + "str(" * 40 + "d + 'class' + d" + ")" * 40 + ")\n",
            "cheat:dunder_string",
        ),
        ("    return getattr(x, bytes([95, 95, 99, 108, 97, 115, 115, 95, 95]).decode())\n", "cheat:dunder_string"),
        ("    return x\n\n__name__ = '__main__'\nif __name__ == '__main__':\n    import os\n", "cheat:name_rebind"),
        ("    class T:\n        __eq__ = lambda s, o: True\n    return T()\n", "cheat:comparison_override"),
    ],
)
def test_cheat_patterns_are_flagged(completion, flag):
    assert flag in static_flags(completion)


def test_main_guarded_demo_code_still_scores(tasks, ctx):
    completion = humaneval_canonical("HumanEval/0") + (
        "\n\nif __name__ == '__main__':\n    print(has_close_elements([1.0, 2.0, 3.0], 0.5))\n"
        "    print('All tests passed')\n"
    )
    reward = score(tasks["HumanEval/0"], completion, ctx)
    assert reward.value == 1.0 and reward.flags == []


@pytest.mark.parametrize(
    "junk",
    [
        '["load_error", 5, 6]',
        '["ok", ["int", 7]]',
        '{"a": 1}',
        "[[[[[[[[[[[[[[[[[[[[",
        '["raise", ["x"], null]',
        '["ok", ["dict", [[["list", []], ["none"]]]]]',
    ],
)
def test_junk_on_the_reply_pipe_is_the_candidates_loss(junk, ctx):
    """The worker process is the candidate's: whatever it writes to the judge is checked."""
    program = (
        "import os, stat\n"
        "for fd in range(3, 64):\n"
        "    try:\n"
        "        if stat.S_ISFIFO(os.fstat(fd).st_mode):\n"
        f"            os.write(fd, {junk!r}.encode() + b'\\n')\n"
        "    except OSError:\n"
        "        pass\n"
        "def add(a, b):\n    return a + b\n"
    )
    reward = reward_from_run(run_judge(CodeSpec.model_validate(code_task().verifier), program, ctx.sandbox()))
    assert reward.value < 1.0 and not any(f.startswith("sandbox:") for f in reward.flags), reward


def test_an_if_chain_over_the_visible_examples_is_flagged(tasks):
    spec = tasks["HumanEval/72"].verifier  # will_it_fly: examples ([1, 2], 5) -> False, ([3, 2, 3], 1) -> False, ...
    completion = (
        "    if q == [1, 2] and w == 5:\n        return False\n"
        "    if q == [3, 2, 3] and w == 1:\n        return False\n    return True\n"
    )
    assert "cheat:hardcoded_examples" in static_flags(completion, spec["prompt"], spec["entry_point"])
    honest = "    return q == q[::-1] and sum(q) <= w\n"
    assert static_flags(honest, spec["prompt"], spec["entry_point"]) == []
