"""The judge of `tests` and `script` goals: its own per-test report is the verdict, and goals are checked at load."""

import re

import pytest

from tempering.agents.goals import goal_problem
from tempering.agents.judge import judge, read_report
from tempering.agents.tasks import AgentTask, TaskFileError, load_agent_tasks

TESTS = (
    "import unittest\nfrom calc import double\n\n\nclass T(unittest.TestCase):\n"
    "    def test_two(self):\n        self.assertEqual(double(2), 4)\n\n"
    "    def test_three(self):\n        self.assertEqual(double(3), 6)\n\n\nunittest.main()\n"
)


def test_each_test_is_judged_by_the_judges_own_report(pool):
    with pool.session() as s:
        s.write_file("calc.py", "def double(x):\n    return 4\n")  # right for 2, wrong for 3
        verdict = judge(s, tests={"test_calc.py": TESTS})
        assert not verdict.passed
        assert verdict.outcomes == {"test_calc.T.test_two": "ok", "test_calc.T.test_three": "failed"}
        s.write_file("calc.py", "def double(x):\n    return 2 * x\n")
        verdict = judge(s, tests={"test_calc.py": TESTS})  # the file's own unittest.main() is not what runs them
        assert verdict.passed and set(verdict.outcomes.values()) == {"ok"}
        assert "test_calc.py" not in s.list_files()  # hidden files are never written to /work


def test_a_file_without_tests_or_a_module_that_fails_to_import_does_not_pass(pool):
    with pool.session() as s:
        empty = judge(s, tests={"test_none.py": "import unittest\n"})
        assert not empty.passed and empty.outcomes == {"test_none.py": "error: no tests"}
        missing = judge(s, tests={"test_calc.py": TESTS})  # no calc.py in /work
        assert not missing.passed and missing.outcomes == {"test_calc.py": "error while loading: ModuleNotFoundError"}


def test_a_script_passes_when_it_runs_to_its_end(pool):
    script = (
        "import json, sys\nif json.load(open('cfg.json'))['on'] is not True:\n    sys.exit('not on')\nprint('fine')\n"
    )
    with pool.session() as s:
        s.write_file("cfg.json", '{"on": false}')
        verdict = judge(s, scripts={"run.py": script})
        assert not verdict.passed and verdict.outcomes == {"run.py": "exit not on"}
        s.write_file("cfg.json", '{"on": true}')
        verdict = judge(s, scripts={"run.py": script})
        assert verdict.passed and verdict.outcomes == {"run.py": "ok"} and "fine" in verdict.run.stdout


def test_only_the_line_tagged_with_the_nonce_counts():
    nonce = "ab" * 16
    out = f'{{"t": "ok"}}\nok {{"t": "ok"}}\n{nonce} {{"t": "failed"}}\nnoise\n{nonce} {{"t": "ok", "u": "ok"}}\n'
    assert read_report(out, nonce) == {"t": "ok", "u": "ok"}  # the last tagged line
    assert read_report('{"t": "ok"}\nOK\n', nonce) == {}
    assert read_report(f"{nonce} [1, 2]\n", nonce) == {}
    assert read_report(f'{nonce} {{"t": 1}}\n', nonce) == {}
    assert read_report(f"{nonce} {{not json\n", nonce) == {}


@pytest.mark.parametrize(
    ("goal", "problem"),
    [
        ({"type": "command", "cmd": "python3 t.py"}, "goal type 'command' is gone"),
        ({"type": "shell"}, "unknown goal type 'shell'"),
        ({"type": "file", "path": "x"}, "goal 'file' needs 'equals'"),
        ({"type": "file", "path": "../x", "equals": ""}, "goal 'file': path must be relative to /work"),
        ({"type": "file", "path": "/etc/passwd", "equals": ""}, "goal 'file': path must be relative to /work"),
        ({"type": "tests", "files": {}}, "goal 'tests' needs 'files': a non-empty object"),
        ({"type": "tests", "files": {"test-x.py": "pass"}}, "'test-x.py' must be a file name like"),
        ({"type": "script", "files": {"run.sh": "echo"}}, "'run.sh' must be a file name like"),
        ({"type": "all", "checks": []}, "goal 'all' needs a non-empty list"),
        ({"type": "all", "checks": [{"type": "answer", "value": 1}, {"type": "nope"}]}, "unknown goal type 'nope'"),
        ({"value": 3}, "goal needs a string 'type'"),
    ],
)
def test_malformed_goals_are_refused_when_the_task_loads(goal, problem):
    assert problem in (goal_problem(goal) or "")
    with pytest.raises(ValueError, match=re.escape(problem)):
        AgentTask(id="t", env="e", prompt="p", tools=["submit"], goal=goal)


def test_well_formed_goals_pass():
    for goal in [
        {"type": "answer", "value": "4"},
        {"type": "tests", "files": {"test_calc.py": TESTS}},
        {
            "type": "all",
            "checks": [{"type": "script", "files": {"run.py": "pass"}}, {"type": "file", "path": "a", "equals": ""}],
        },
    ]:
        assert goal_problem(goal) is None


def test_patching_os_write_in_the_module_under_test_does_not_rewrite_the_report(pool):
    forger = (
        "import os\n_write = os.write\n"
        "os.write = lambda fd, data: _write(fd, data.replace(b'\"failed\"', b'\"ok\"'))\n"
        "def double(x):\n    return 4\n"
    )
    with pool.session() as s:
        s.write_file("calc.py", forger)
        verdict = judge(s, tests={"test_calc.py": TESTS})
        assert verdict.outcomes["test_calc.T.test_three"] == "failed" and not verdict.passed


def test_a_task_file_nested_too_deeply_is_a_one_line_error(tmp_path):
    goal = '{"type": "answer", "value": 1}'
    for _ in range(3000):
        goal = '{"type": "all", "checks": [' + goal + "]}"
    path = tmp_path / "deep.jsonl"
    path.write_text('{"id": "t", "env": "e", "prompt": "p", "tools": ["submit"], "goal": ' + goal + "}\n")
    with pytest.raises(TaskFileError, match=r"deep.jsonl:1: nested too deeply$"):
        load_agent_tasks(path)


# --- comparisons are the judge's, on plain data -------------------------------------------------

CALC_TESTS = """import unittest
from calc import f


class T(unittest.TestCase):
    def test_equal(self):
        self.assertEqual(f(), {want})

    def test_equal_reversed(self):
        self.assertEqual({want}, f())

    def test_bare_assert(self):
        assert f() == {want}

    def test_in(self):
        self.assertIn(f(), [{want}])

    def test_chained(self):
        assert {want} <= f() <= {want} and f() is not None
"""
EVERYTHING = (
    "class Everything:\n    def __eq__(self, other):\n        return True\n\n    def __ne__(self, other):\n"
    "        return False\n\n    def __le__(self, other):\n        return True\n\n    __ge__ = __le__\n"
    "    __hash__ = object.__hash__\n\n    def __contains__(self, item):\n        return True\n\n\n"
    "def f():\n    return Everything()\n"
)


def test_a_result_equal_to_everything_fails_every_comparison_and_is_flagged(pool):
    with pool.session() as s:
        s.write_file("calc.py", EVERYTHING)
        verdict = judge(s, tests={"test_calc.py": CALC_TESTS.format(want=7)})
        assert not verdict.passed and set(verdict.outcomes.values()) == {"cheat:comparison_override"}
        assert len(verdict.outcomes) == 5 and verdict.flags == ["cheat:comparison_override"]
        s.write_file("calc.py", "def f():\n    return 7\n")  # the control: the same tests pass a plain 7
        assert judge(s, tests={"test_calc.py": CALC_TESTS.format(want=7)}).passed


HONEST_RESULTS = """import collections, enum


class Level(enum.IntEnum):
    HIGH = 3


Point = collections.namedtuple("Point", "x y")


def point():
    return Point(1, 2)


def counts():
    return collections.Counter("abb")


def level():
    return Level.HIGH


class Loud(int):
    def __eq__(self, other):  # a subclass that lies: read as the int it is
        return True

    __hash__ = int.__hash__


def loud():
    return Loud(5)
"""
HONEST_TESTS = """import unittest
from results import counts, level, loud, point


class T(unittest.TestCase):
    def test_namedtuple(self):
        self.assertEqual(point(), (1, 2))

    def test_counter(self):
        self.assertEqual(counts(), {"a": 1, "b": 2})

    def test_int_enum(self):
        assert level() == 3 and level() in {3}

    def test_lying_int_subclass(self):
        self.assertNotEqual(loud(), 6)
"""


def test_plain_values_in_subclasses_of_plain_types_compare_as_their_base_type(pool):
    with pool.session() as s:
        s.write_file("results.py", HONEST_RESULTS)
        verdict = judge(s, tests={"test_results.py": HONEST_TESTS})
        assert verdict.passed and verdict.flags == [], verdict.outcomes


def test_an_object_of_the_codes_own_class_is_not_plain_data_and_fails_without_a_flag(pool):
    tests = "import unittest\nfrom box import Box\n\n\nclass T(unittest.TestCase):\n    def test(self):\n"
    tests += "        self.assertEqual(Box(1), Box(1))\n"
    with pool.session() as s:
        s.write_file("box.py", "from dataclasses import dataclass\n\n\n@dataclass\nclass Box:\n    x: int\n")
        verdict = judge(s, tests={"test_box.py": tests})
        assert verdict.outcomes == {"test_box.T.test": "failed"} and verdict.flags == []


def test_a_script_compares_plain_data_too(pool):
    script = "from calc import f\nassert f() == 7\nprint('reached the end')\n"
    with pool.session() as s:
        s.write_file("calc.py", EVERYTHING)
        verdict = judge(s, scripts={"check.py": script})
        assert verdict.outcomes == {"check.py": "cheat:comparison_override"} and "reached" not in verdict.run.stdout


def test_plain_copies_are_exact_builtin_types_read_without_the_values_own_methods():
    import collections

    from tempering.agents.judge_program import NotPlainData, plain

    class Sly(str):
        def __str__(self):
            return "other"

    value = {Sly("k"): [collections.OrderedDict(a=(1, 2.5)), {b"x"}, frozenset({None, True})]}
    copy = plain(value)
    assert copy == {"k": [{"a": (1, 2.5)}, {b"x"}, frozenset({None, True})]}
    assert type(next(iter(copy))) is str and type(copy["k"][0]) is dict
    with pytest.raises(NotPlainData, match="a compared value is a object"):
        plain([1, object()])
    nested: list = []
    nested.append(nested)
    with pytest.raises(NotPlainData, match="nested too deeply"):
        plain(nested)


def test_hidden_sources_are_rewritten_to_the_judges_comparisons():
    from tempering.agents.judge import plain_comparisons

    out = plain_comparisons("assert a == b < c\nassert not x and y is None\nif z is w: pass\n", "t.py")
    assert out.splitlines() == [
        "assert __tempering_truth__(__tempering_compare__(('==', '<'), a, b, c))",
        "assert not __tempering_truth__(x) and __tempering_truth__(y is None)",
        "if z is w:",
        "    pass",
    ]
    assert plain_comparisons("def broken(:\n", "t.py") == "def broken(:\n"  # the judge reports the SyntaxError
