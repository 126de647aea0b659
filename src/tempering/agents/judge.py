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

Not isolated (known and accepted): the code under test runs inside the judge's own
interpreter, as it must to be called. A program written against this judge can patch
`unittest` in memory or search the interpreter's objects for the nonce; and a module the
standard library lacks falls through to /work. The judge stops the generic fakes (exit
status, shadowed modules, start-up hooks, edited tests, skips), not an adversary who
studies it; hidden cases the agent never sees are what make hard-coding answers fail.
"""

from __future__ import annotations

import json
import secrets
from typing import Mapping, NamedTuple

from tempering.sandbox.base import ExecResult, Limits, SandboxSession

JUDGE_ARGV = ("python3", "-I", "-S", "-B", "-c")
JUDGE_ENV = {"HOME": "/tmp"}

# Runs inside the sandbox (standard library only). Everything it needs is imported before
# /work joins sys.path; the payload is read in a function so no module global holds the nonce.
JUDGE_PROGRAM = r"""
import json, os, sys, types, unittest


class Record(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.outcomes = {}

    def mark(self, test, outcome):
        if self.outcomes.get(test.id(), "ok") == "ok":
            self.outcomes[test.id()] = outcome

    def addSuccess(self, test):
        self.mark(test, "ok")

    def addFailure(self, test, err):
        self.mark(test, "failed")

    def addError(self, test, err):
        self.mark(test, "error: " + err[0].__name__)

    def addSkip(self, test, reason):
        self.mark(test, "skipped")

    def addExpectedFailure(self, test, err):
        self.mark(test, "expected failure")

    def addUnexpectedSuccess(self, test):
        self.mark(test, "unexpected success")

    def addSubTest(self, test, subtest, err):
        if err is not None:
            self.mark(test, "failed")


def run_tests(name, source):
    module = types.ModuleType(name[:-3])
    module.__file__ = name
    sys.modules[module.__name__] = module
    main, unittest.main = unittest.main, lambda *a, **k: None  # the judge runs the tests itself
    try:
        exec(compile(source, name, "exec"), module.__dict__)
    except BaseException as e:
        return {name: "error while loading: " + type(e).__name__}
    finally:
        unittest.main = main
    record = Record()
    try:
        unittest.defaultTestLoader.loadTestsFromModule(module).run(record)
    except BaseException as e:
        record.outcomes[name] = "error: " + type(e).__name__
    return record.outcomes or {name: "error: no tests"}


def run_script(name, source):
    try:
        exec(compile(source, name, "exec"), {"__name__": "__main__", "__file__": name})
    except SystemExit as e:
        return "ok" if e.code in (None, 0) else "exit " + str(e.code)[:200]
    except BaseException as e:
        return "error: " + type(e).__name__
    return "ok"


def judge():
    payload = json.loads(sys.stdin.buffer.read())
    report, write, dumps = os.dup(1), os.write, json.dumps  # taken before any code of the agent runs
    sys.path.append(os.getcwd())
    outcomes = {}
    for name, source in payload["scripts"].items():
        outcomes[name] = run_script(name, source)
    for name, source in payload["tests"].items():
        outcomes.update(run_tests(name, source))
    write(report, ("\n" + payload["nonce"] + " " + dumps(outcomes) + "\n").encode())


judge()
"""


class Verdict(NamedTuple):
    passed: bool
    outcomes: dict[str, str]
    """Test id (or script name) -> "ok" or what went wrong; empty when the judge printed no
    report (the run ended early, or its output was flooded)."""
    run: ExecResult


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
    payload = json.dumps({"nonce": nonce, "tests": dict(tests or {}), "scripts": dict(scripts or {})})
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
