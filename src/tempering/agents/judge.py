"""The judge of program goals: hidden Python files run against the episode's final /work.

    passed, detail = judge(session, tests={"test_add.py": "..."}, limits=limits)
    passed, detail = judge(session, scripts={"run.py": "..."}, limits=limits)

`tests` are unittest files: the goal passes when every test in them succeeds. `scripts`
are programs run as `__main__` in /work: the goal passes when each reaches its end (or
`sys.exit(0)`). The code under test is whatever the episode left in /work (e.g. the
module a test imports, the config a script reads).

What the agent cannot reach (each closes a way a goal was faked):

- Start-up: the interpreter is `python3 -I -S -B` with HOME=/tmp (a fresh tmpfs of this
  run): no environment variables, no site or user site, so no `.pth`, `sitecustomize` or
  `usercustomize` planted in /work (the agent's HOME) is ever read; no bytecode is written.
- The hidden files: they travel on stdin (a pipe read once) and are compiled in memory;
  they are never written to /work, so nothing the agent left there (an edited copy, a
  directory, a full disk) replaces or blocks them.
- Imports: sys.path is the standard library, then /work *last*: the module under test is
  importable, but no file in /work shadows a standard-library module (a planted
  `unittest.py` or `json.py`). Neither the script's directory nor the cwd is on the path.
- The verdict: the judge program records each test's outcome with its own unittest result
  (skipped tests, expected failures, errors and failures all count against) and prints it
  as one JSON line tagged with a nonce drawn here and sent on stdin. The host reads that
  line; the run's exit status is never read. A program that exits early (`os._exit(0)`,
  `sys.exit` at import), prints a fake report or runs no test leaves no passing verdict.
- Comparisons: a value the code under test returns cannot answer the hidden checks itself
  (an object whose `__eq__` is always true passes every `assertEqual`). unittest's comparing
  assertions, and every comparison and `assert` of the hidden files (rewritten here by
  `plain_comparisons`), compare plain copies made by the judge: None, bool, int, float,
  complex, str, bytes and lists, tuples, dicts and sets of them, read without calling any
  method of the value's class. Any other value fails the check; one that claims to equal an
  object it never saw makes its test's outcome `cheat:comparison_override`, the episode's flag
  (`Verdict.flags`). So hidden tests compare plain data: `assertEqual(vars(p), {...})` or
  `assertEqual((p.x, p.y), (1, 2))`, not two objects of the repository's own classes.

Not isolated (known and accepted): the code under test runs inside the judge's own
interpreter, as it must to be called. A program written against this judge can patch
`unittest` or the judge's functions in memory or search the interpreter's objects for the
nonce; and a module the standard library lacks falls through to /work. The judge stops the
generic fakes (exit status, shadowed modules, start-up hooks, edited tests, skips, results
equal to everything), not an adversary who studies it; hidden cases the agent never sees are
what make hard-coding answers fail.
"""

from __future__ import annotations

import ast
import json
import secrets
from pathlib import Path
from typing import Mapping, NamedTuple

from tempering.agents.judge_program import COMPARE, TRUTH
from tempering.pyast import parse_module
from tempering.sandbox.base import ExecResult, Limits, SandboxSession

JUDGE_ARGV = ("python3", "-I", "-S", "-B", "-c")
JUDGE_ENV = {"HOME": "/tmp"}
JUDGE_PROGRAM = (Path(__file__).parent / "judge_program.py").read_text()
"""Runs inside the sandbox (standard library only): `judge_program.py`. Everything it needs is
imported before /work joins sys.path; the payload is read in a function so no module global holds the nonce."""
CHEATS = ("cheat:",)


class _PlainComparisons(ast.NodeTransformer):
    """`a == b < c` -> `COMPARE(("==", "<"), a, b, c)`; `assert x` -> `assert TRUTH(x)` (through
    `not`, `and` and `or`); comparisons made only of `is` / `is not` stay as they are."""

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        self.generic_visit(node)
        ops = [_OPS[type(op)] for op in node.ops]
        if set(ops) <= {"is", "is not"}:
            return node
        symbols = ast.Tuple(elts=[ast.Constant(op) for op in ops], ctx=ast.Load())
        return ast.copy_location(_call(COMPARE, symbols, node.left, *node.comparators), node)

    def visit_Assert(self, node: ast.Assert) -> ast.Assert:
        self.generic_visit(node)
        node.test = _truth(node.test)
        return node


_OPS = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
}


def _call(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=list(args), keywords=[])


def _truth(test: ast.expr) -> ast.expr:
    if isinstance(test, ast.BoolOp):
        return ast.copy_location(ast.BoolOp(op=test.op, values=[_truth(v) for v in test.values]), test)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return ast.copy_location(ast.UnaryOp(op=test.op, operand=_truth(test.operand)), test)
    return ast.copy_location(_call(TRUTH, test), test)


def plain_comparisons(source: str, name: str) -> str:
    """`source` (a hidden test or script) with its comparisons and asserts made the judge's
    (see `judge_program.py`); unchanged when it does not parse (the judge then reports that)."""
    try:
        tree = parse_module(source, name)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return source
    return ast.unparse(ast.fix_missing_locations(_PlainComparisons().visit(tree)))


class Verdict(NamedTuple):
    passed: bool
    outcomes: dict[str, str]
    """Test id (or script name) -> "ok" or what went wrong; empty when the judge printed no
    report (the run ended early, or its output was flooded)."""
    run: ExecResult

    @property
    def flags(self) -> list[str]:
        """The `cheat:` outcomes (e.g. `cheat:comparison_override`), sorted and unique."""
        return sorted({v for v in self.outcomes.values() if v.startswith(CHEATS)})


def judge(
    session: SandboxSession,
    *,
    tests: Mapping[str, str] | None = None,
    scripts: Mapping[str, str] | None = None,
    limits: Limits | None = None,
) -> Verdict:
    """Run hidden `tests` and `scripts` against the session's /work: passed when the judge's
    own report lists at least one outcome and every outcome is "ok"."""
    nonce = secrets.token_hex(16)
    hidden = {
        kind: {name: plain_comparisons(source, name) for name, source in (files or {}).items()}
        for kind, files in (("tests", tests), ("scripts", scripts))
    }
    payload = json.dumps({"nonce": nonce, **hidden})
    run = session.exec([*JUDGE_ARGV, JUDGE_PROGRAM], stdin=payload.encode(), env=JUDGE_ENV, limits=limits)
    outcomes = read_report(run.stdout, nonce)
    return Verdict(bool(outcomes) and all(v == "ok" for v in outcomes.values()), outcomes, run)


def read_report(stdout: str, nonce: str) -> dict[str, str]:
    """The outcomes on the last stdout line tagged with `nonce` ({} when there is none or it is not a JSON object)."""
    tagged = [line for line in stdout.splitlines() if line.startswith(nonce + " ")]
    if not tagged:
        return {}
    try:
        outcomes = json.loads(tagged[-1][len(nonce) + 1 :])
    except ValueError:
        return {}
    if not isinstance(outcomes, dict) or not all(isinstance(v, str) for v in outcomes.values()):
        return {}
    return outcomes
