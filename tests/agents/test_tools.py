"""Agent tools: the calculator's arithmetic, argument schemas, and sandboxed file tools."""

import pytest

from tempering.agents.tools import TOOLS, ToolContext, calculate, check_arguments


@pytest.mark.parametrize(
    "expr,value",
    [
        ("1234 * 5678", 7006652),
        ("(12 + 30) * 2 - 4", 80),
        ("7 / 2", 3.5),
        ("2 ** 10", 1024),
        ("-3 + 10 % 4", -1),
        ("17 // 5", 3),
    ],
)
def test_calculator_values(expr, value):
    assert calculate(expr) == value


@pytest.mark.parametrize(
    "expr,why",
    [
        ("__import__('os')", "unsupported"),
        ("1 / 0", "division by zero"),
        ("9 ** 99999", "power too large"),
        ("1 +", "not an arithmetic"),
        ("x * 2", "unsupported"),
    ],
)
def test_calculator_refuses(expr, why):
    with pytest.raises(ValueError, match=why):
        calculate(expr)


@pytest.mark.parametrize(
    "expr,hints",
    [
        ("7,848 × 33", ["no thousands separators", "* for ×"]),
        ("66,503 ÷ 73", ["no thousands separators", "/ for ÷"]),
        ("40^2 - 3374", ["** for powers"]),
    ],
)
def test_calculator_errors_name_the_written_notation_to_rewrite(expr, hints):
    # `^` would parse (as XOR) and `7,848` as a tuple: the hint, not Python's reading, is reported
    with pytest.raises(ValueError) as err:
        calculate(expr)
    assert all(h in str(err.value) for h in hints) and "+ - * / // % **" in str(err.value)


def test_notation_tasks_fail_when_copied_and_pass_when_rewritten():
    # tool_notation's premise: the prompt's expression is an error in the calculator, the expert's is the answer
    from tempering.agents.tasks import builtin_tasks

    tasks = builtin_tasks("tool_notation")
    assert {t.family for t in tasks if t.split == "heldout"} == {t.family for t in tasks if t.split == "train"}
    for task in tasks:
        shown = task.prompt.removeprefix("What is ").removesuffix("?")
        with pytest.raises(ValueError, match="not an arithmetic expression"):
            calculate(shown)
        typed = task.solution[0][0]["arguments"]["expression"]
        assert str(calculate(typed)).removesuffix(".0") == task.goal["value"]


def test_calculator_tool_reports_errors_as_tool_errors():
    ctx = ToolContext(session=None)
    assert TOOLS["calculator"].run({"expression": "6 * 7"}, ctx).text == "42"
    assert TOOLS["calculator"].run({"expression": "10 / 4"}, ctx).text == "2.5"
    bad = TOOLS["calculator"].run({"expression": "open('x')"}, ctx)
    assert bad.error and bad.text.startswith("error:")


def test_arguments_checked_against_schema():
    assert check_arguments(TOOLS["shell"], {"cmd": "ls"}) is None
    assert "'cmd' is a required property" in check_arguments(TOOLS["shell"], {})
    assert "is not of type 'string'" in check_arguments(TOOLS["shell"], {"cmd": 3})
    assert "Additional properties" in check_arguments(TOOLS["shell"], {"cmd": "ls", "sudo": "yes"})


def test_schema_is_openai_function_form():
    s = TOOLS["write_file"].schema
    assert s["type"] == "function" and s["function"]["name"] == "write_file"
    assert s["function"]["parameters"]["required"] == ["path", "content"]


def test_file_tools_stay_in_the_session(pool):
    with pool.session() as session:
        ctx = ToolContext(session=session)
        assert not TOOLS["write_file"].run({"path": "d/a.txt", "content": "hello\n"}, ctx).error
        assert TOOLS["read_file"].run({"path": "/work/d/a.txt"}, ctx).text == "hello\n"
        assert TOOLS["shell"].run({"cmd": "wc -l < d/a.txt"}, ctx).text == "1"
        for path in ("../etc/passwd", "/etc/passwd"):
            out = TOOLS["read_file"].run({"path": path}, ctx)
            assert out.error and "relative" in out.text
        missing = TOOLS["read_file"].run({"path": "nope.txt"}, ctx)
        assert missing.error and "no such file" in missing.text
        failed = TOOLS["shell"].run({"cmd": "exit 3"}, ctx)
        assert failed.error and "[exit code 3; nonzero_exit]" in failed.text
        assert TOOLS["python"].run({"code": "print(sum(range(5)))"}, ctx).text == "10"
        assert ctx.sandbox_s > 0


def test_edit_file_replaces_one_unique_piece_of_text(pool):
    with pool.session() as session:
        ctx = ToolContext(session=session)
        session.write_file("m.py", "x = 1\ny = 1\n")

        def edit(old, new, path="m.py"):
            return TOOLS["edit_file"].run({"path": path, "old": old, "new": new}, ctx)

        assert edit("y = 1", "y = 2").text == "replaced 1 occurrence in m.py"
        assert session.read_file("m.py") == b"x = 1\ny = 2\n"
        for old, times in (("= ", 2), ("z = 3", 0), ("", 0)):
            out = edit(old, "q")
            assert out.error and f"must occur exactly once in m.py; it occurs {times} times" in out.text
        assert edit("a", "b", path="gone.py").text == "error: no such file: gone.py"
        assert "relative" in edit("a", "b", path="/etc/passwd").text
        assert session.read_file("m.py") == b"x = 1\ny = 2\n"  # failed edits leave the file alone


def test_arguments_with_a_nul_byte_or_nested_past_the_recursion_limit_are_refused():
    assert check_arguments(TOOLS["shell"], {"cmd": "echo a\x00b"}) == "invalid arguments for shell: a NUL byte in 'cmd'"
    assert "a NUL byte in 'path'" in check_arguments(TOOLS["write_file"], {"path": "a\x00", "content": "x"})
    deep: list = []
    for _ in range(5000):  # built by hand: json.loads itself refuses this depth
        deep = [deep]
    assert check_arguments(TOOLS["shell"], {"cmd": deep}) == "invalid arguments for shell: nested too deeply"
