"""The code verifier's judge and worker: the only code of the `code` verifier that runs in the sandbox.

Standard library only, no tempering imports: the host copies this file into the sandbox as
`judge.py` and starts `python3 -I -S judge.py judge payload.json`. The same file, started
as `judge.py worker`, is the candidate's process. Imported on the host it only defines
functions (the pure parts, `instrument_tests` and the plain-data codec, are unit-tested there).

Trust inside one run (see docs/verifiers.md for the whole threat model):
- The judge holds the secrets: the tests and a per-run HMAC key. It reads them from a file
  that it unlinks before any candidate process exists, makes itself non-dumpable (no
  ptrace, no /proc/<judge>/mem or /fd for same-uid processes), ignores catchable signals
  and imports nothing from /work (`-I`, and sys.path is cut to the read-only stdlib).
- The candidate runs in a separate, freshly exec'd worker. `candidate(*args)` in the tests
  is a proxy: args go to the worker as tagged plain data, the result comes back the same
  way (None/bool/int/float/complex/str/bytes/list/tuple/dict/set/frozenset only), so no
  object of the candidate's, and no code of it, ever runs in the judge. A result that is not
  plain data fails its call; one that says it equals an object it never saw (the "always
  equal" hack) is noted as `cheat:comparison_override`, which scores the run 0.
- Each `assert` is rewritten to record pass/fail per assert site; each top-level statement
  of `check` is wrapped so one crash fails only the asserts inside that statement.
- Before the verdict is written, every other process in the sandbox's pid namespace is
  SIGKILLed (`kill(-1)`). The candidate cannot reopen the run's stdout (a root-owned pipe;
  the judge's fds are closed to it), but the sandbox's init holds that pipe and runs as the
  same uid, so it could be ptraced into writing there: the verdict line is HMAC-signed with
  the per-run key, so no line printed by anyone else can pass for it.
"""

from __future__ import annotations

import ast
import json
import os
import select
import signal
import sys
import time
from typing import Any

VERDICT_MAGIC = "TEMPERING-VERDICT"
MAX_REPLY_BYTES = 16 * 1024 * 1024
MAX_REPLY_ELEMENTS = 200_000
"""Values in one decoded reply. The cap bounds what an ordinary big reply costs; a reply built to
be slow per value (a set of ints sharing one hash is quadratic to build) meets the call's
deadline, which decoding checks at every value."""
MAX_DEPTH = 200
CHECK_NAME = "check"
RECORDER = "__tempering_judge__"


class CandidateError(Exception):
    """The candidate's call did not produce a value (it raised, died, timed out or sent junk)."""


PLAIN_EXCEPTIONS = frozenset(
    {
        "ArithmeticError",
        "AssertionError",
        "AttributeError",
        "BufferError",
        "EOFError",
        "FloatingPointError",
        "IndexError",
        "KeyError",
        "LookupError",
        "MemoryError",
        "NameError",
        "NotImplementedError",
        "OverflowError",
        "RecursionError",
        "RuntimeError",
        "TypeError",
        "UnboundLocalError",
        "UnicodeError",
        "ValueError",
        "ZeroDivisionError",
    }
)
"""Exceptions re-raised into the tests as themselves (so `except ValueError:` there works). Only
these: a StopIteration raised into trusted code ends the tests' `map()`/`filter()`/`zip()` early
(`assert all(map(candidate, primes))` would pass), and the other control-flow exceptions
(StopAsyncIteration, GeneratorExit, SystemExit, ...) steer trusted code the same way."""
CONTROL_FLOW_EXCEPTIONS = frozenset(
    {"StopIteration", "StopAsyncIteration", "GeneratorExit", "SystemExit", "KeyboardInterrupt", "BaseException"}
)
"""Raised by the candidate, these are noted as `raised:<name>`: a solution has no reason to."""
_RAISED: dict[str, type] = {}


def candidate_exception(name: str, message: str) -> CandidateError:
    """The judge-side stand-in for an exception the candidate raised: a fresh CandidateError that is
    also the builtin exception of that name when the name is in PLAIN_EXCEPTIONS, else a plain
    CandidateError (a distinct failure). Only the name and text cross; nothing of the candidate's
    exception object does."""
    if name not in PLAIN_EXCEPTIONS:
        return CandidateError(f"{name}: {message}")
    if name not in _RAISED:
        import builtins

        base, kind = getattr(builtins, name), CandidateError
        try:
            kind = type(name, (CandidateError, base), {})
        except TypeError:  # incompatible layouts: the plain stand-in
            pass
        _RAISED[name] = kind
    try:
        return _RAISED[name](f"{name}: {message}")
    except TypeError:  # constructors with other signatures
        return CandidateError(f"{name}: {message}")


def clean_text(text: str, limit: int) -> str:
    """`text` cut to `limit` characters and made encodable (a lone surrogate such as chr(0xD800)
    in a candidate's message becomes '?'), so a verdict holding it can always be written as UTF-8."""
    return text[:limit].encode("utf-8", "replace").decode("utf-8")


class HarnessError(Exception):
    """The task's own material is unusable (tests do not compile, args are not plain data)."""


# --- plain-data codec (both sides) ---------------------------------------------------------

_SEQUENCES = (("list", list), ("tuple", tuple), ("set", set), ("frozenset", frozenset))


def encode(value, depth: int = 0):
    """`value` as tagged JSON-able data. Subclasses of plain types travel as their base type
    (read through the base type's own methods, so overridden dunders never run)."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    kind = type(value)
    if value is None:
        return ["none"]
    if kind is bool:
        return ["bool", value]
    if issubclass(kind, int):
        return ["int", format(int.__index__(value), "x")]
    if issubclass(kind, float):
        return ["float", float.hex(value)]
    if issubclass(kind, complex):
        return ["complex", float.hex(complex.real.__get__(value)), float.hex(complex.imag.__get__(value))]
    if issubclass(kind, str):
        return ["str", str.__str__(value)]
    if issubclass(kind, bytes):
        return ["bytes", bytes.hex(value)]
    if issubclass(kind, bytearray):
        return ["bytes", bytearray.hex(value)]
    if issubclass(kind, dict):
        return ["dict", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in dict.items(value)]]
    for tag, base in _SEQUENCES:
        if issubclass(kind, base):
            return [tag, [encode(v, depth + 1) for v in base.__iter__(value)]]
    raise NotPlain(
        value,
        f"an object of type {kind.__name__} cannot cross to the judge (only plain data: None, "
        "bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset)",
    )


class NotPlain(TypeError):
    """`encode` met a value that is not plain data (kept as `value`, for `equals_the_unseen`)."""

    def __init__(self, value, message: str):
        super().__init__(message)
        self.value = value


def equals_the_unseen(value) -> bool:
    """Whether `value` says it equals an object made here that no other code has seen: a result
    built to pass any `==` (the agent judge's `judge_program.py` asks the same of its values)."""

    class Unseen:
        pass

    probe = Unseen()
    try:
        return bool(value == probe) or not bool(value != probe)
    except Exception:
        return False


class ReplyTooLarge(ValueError):
    """A reply with more values than MAX_REPLY_ELEMENTS, or too slow to decode before the call's deadline."""


class DecodeBudget:
    """What one decode may spend: values left and a monotonic deadline. Checked once per value,
    so a reply built to be slow to decode (a set of colliding hashes) stops at its call's deadline."""

    def __init__(self, deadline: float, elements: float = MAX_REPLY_ELEMENTS):
        self.deadline, self.left = deadline, elements

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise ReplyTooLarge(f"reply has more than {MAX_REPLY_ELEMENTS} values")
        if time.monotonic() > self.deadline:
            raise ReplyTooLarge("reply too slow to decode within the call's time limit")


def decode(data: Any, depth: int = 0, budget: DecodeBudget | None = None) -> Any:
    """The inverse of `encode`, strict: anything malformed raises ValueError/TypeError, a value
    over `budget` raises ReplyTooLarge. No budget: no limit (the worker decoding the tests'
    trusted arguments; the judge always passes one for the candidate's replies)."""
    if budget is None:
        budget = DecodeBudget(float("inf"), elements=float("inf"))
    budget.spend()
    if depth > MAX_DEPTH or type(data) is not list or not data or type(data[0]) is not str:
        raise ValueError("malformed value")
    tag, rest = data[0], data[1:]
    if tag == "none" and not rest:
        return None
    if len(rest) == 1:
        (item,) = rest
        if tag == "bool" and type(item) is bool:
            return item
        if tag == "int" and type(item) is str:
            return int(item, 16)
        if tag == "float" and type(item) is str:
            return float.fromhex(item)
        if tag == "str" and type(item) is str:
            return item
        if tag == "bytes" and type(item) is str:
            return bytes.fromhex(item)
        if type(item) is list:
            if tag == "dict":
                return dict(_pair(p, depth, budget) for p in item)
            for name, base in _SEQUENCES:
                if tag == name:
                    return base(decode(v, depth + 1, budget) for v in item)
    if tag == "complex" and len(rest) == 2 and all(type(x) is str for x in rest):
        return complex(float.fromhex(rest[0]), float.fromhex(rest[1]))
    raise ValueError(f"malformed value tagged {tag!r}")


def _pair(item, depth: int, budget: DecodeBudget):
    if type(item) is not list or len(item) != 2:
        raise ValueError("malformed dict item")
    return decode(item[0], depth + 1, budget), decode(item[1], depth + 1, budget)


# --- assert instrumentation (pure) -----------------------------------------------------------


class _AssertSites(ast.NodeTransformer):
    """`assert t` -> `try: R.record(i, t) except Exception: R.record(i, False)`; constant
    asserts (`assert True, "..."`) test nothing and are dropped."""

    def __init__(self) -> None:
        self.count = 0

    def visit_Assert(self, node: ast.Assert):
        if isinstance(node.test, ast.Constant):
            return ast.copy_location(ast.Pass(), node)
        site, self.count = self.count, self.count + 1
        record = _recorder_call("record", ast.Constant(site), node.test)
        failed = _recorder_call("record", ast.Constant(site), ast.Constant(False))
        return ast.copy_location(ast.Try(body=[record], handlers=[_handler([failed])], orelse=[], finalbody=[]), node)


def _recorder_call(method: str, *args: ast.expr) -> ast.stmt:
    func = ast.Attribute(value=ast.Name(id=RECORDER, ctx=ast.Load()), attr=method, ctx=ast.Load())
    return ast.Expr(value=ast.Call(func=func, args=list(args), keywords=[]))


def _handler(body: list[ast.stmt]) -> ast.ExceptHandler:
    return ast.ExceptHandler(type=ast.Name(id="Exception", ctx=ast.Load()), name=None, body=body)


def instrument_tests(source: str, filename: str = "<tests>"):
    """Compile test source so every assert site is counted and a crash fails only its statement.

    The tests are a `def check(candidate): ...` (HumanEval shape) or plain top-level asserts.
    Each top-level statement of `check` (or of the module) runs inside its own try: if it
    raises, every assert site inside it is marked aborted and the next statement runs.

    Returns:
        (code object, number of assert sites, True if the tests define `check`).
    Raises:
        HarnessError: the tests do not parse or contain no non-constant assert.
    """
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError) as exc:
        raise HarnessError(f"tests do not compile: {exc}") from None
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == CHECK_NAME), None)
    owner = check if check is not None else tree
    sites = _AssertSites()
    body = []
    for stmt in owner.body:
        first = sites.count
        stmt = sites.visit(stmt)
        if isinstance(stmt, (ast.Global, ast.Nonlocal)):
            body.append(stmt)
            continue
        abort = _recorder_call("abort", ast.Constant(first), ast.Constant(sites.count))
        body.append(
            ast.copy_location(ast.Try(body=[stmt], handlers=[_handler([abort])], orelse=[], finalbody=[]), stmt)
        )
    owner.body = body
    if sites.count == 0:
        raise HarnessError("tests contain no assert that depends on anything")
    return compile(ast.fix_missing_locations(tree), filename, "exec"), sites.count, check is not None


class Recorder:
    """Per-site results: a site passes if it ran, never failed and was not aborted."""

    def __init__(self, sites: int):
        self.sites, self.ran, self.failed = sites, set(), set()

    def record(self, site: int, value) -> None:
        self.ran.add(site)
        if not value:
            self.failed.add(site)

    def abort(self, first: int, end: int) -> None:
        self.failed.update(range(first, end))

    def passed(self) -> int:
        return len(self.ran - self.failed)


# --- the judge --------------------------------------------------------------------------------


class Worker:
    """One candidate process, spoken to over two pipes, one JSON line per message.

    Started with posix_spawn (subprocess costs ~40 ms of imports): only the two pipe ends
    and /dev/null are inheritable, so the worker sees none of the judge's other files.
    """

    def __init__(self, argv: list[str]):
        request_read, self.request_fd = os.pipe()
        self.reply_fd, reply_write = os.pipe()
        try:
            actions = [
                (os.POSIX_SPAWN_DUP2, request_read, 0),
                (os.POSIX_SPAWN_DUP2, reply_write, 1),
                (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
            ]
            self.pid = os.posix_spawn(argv[0], argv, {}, file_actions=actions, setsid=True)
        except OSError:
            self.close()
            raise
        finally:
            os.close(request_read)
            os.close(reply_write)
        self.buffer = b""
        os.set_blocking(self.request_fd, False)

    def close(self) -> None:
        for fd in (self.request_fd, self.reply_fd):
            try:
                os.close(fd)
            except OSError:
                pass

    def exchange(self, message, deadline: float):
        """Send one message and wait for one reply line; raises TimeoutError or EOFError."""
        self._send((json.dumps(message) + "\n").encode(), deadline)
        return self._receive(deadline)

    def _send(self, data: bytes, deadline: float) -> None:
        fd, left = self.request_fd, memoryview(data)
        while left:
            if not select.select([], [fd], [], max(0.0, deadline - time.monotonic()))[1]:
                raise TimeoutError
            try:
                left = left[os.write(fd, left) :]
            except BrokenPipeError:
                raise EOFError from None

    def _receive(self, deadline: float):
        chunks, size = [self.buffer], len(self.buffer)
        while b"\n" not in chunks[-1]:
            if not select.select([self.reply_fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise TimeoutError
            chunk = os.read(self.reply_fd, 1 << 20)
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_REPLY_BYTES:
                raise ValueError("reply too large")
        line, _, self.buffer = b"".join(chunks).partition(b"\n")
        return json.loads(line)


class CandidateRunner:
    """Starts workers, runs calls under per-call and total time limits, counts what went wrong."""

    def __init__(self, program: str, entry_point: str, call_s: float, budget_s: float):
        self.program, self.entry_point, self.call_s = program, entry_point, call_s
        self.deadline = time.monotonic() + budget_s
        self.worker: Worker | None = None
        self.load_failure: str | None = None
        self.harness_error: str | None = None  # the tests' fault; raised after the suite, not swallowed
        self.first_error: str | None = None
        self.events: dict[str, int] = {}

    def note(self, event: str) -> None:
        self.events[event] = self.events.get(event, 0) + 1

    def call(self, args: tuple, kwargs: dict):
        try:
            return self._call(args, kwargs)
        except CandidateError as exc:
            self.first_error = self.first_error or clean_text(str(exc), 500)
            raise

    def _call(self, args: tuple, kwargs: dict):
        try:
            request = ["call", encode(list(args), -2), encode(kwargs, -2)]  # room for returned values
        except (TypeError, ValueError) as exc:
            self.harness_error = self.harness_error or f"test arguments are not plain data: {exc}"
            raise CandidateError("unencodable arguments") from None
        worker = self._ready_worker()
        reply, deadline = self._exchange(worker, request)
        if type(reply) is list and len(reply) == 2 and reply[0] == "ok":
            try:
                return decode(reply[1], budget=DecodeBudget(deadline))
            except ReplyTooLarge as exc:
                self.note("call_reply_too_large")
                self._discard()
                raise CandidateError(f"candidate's reply too large: {exc}") from None
            except (ValueError, TypeError, OverflowError, RecursionError, MemoryError):
                pass
        elif reply == ["cheat", "comparison_override"]:
            self.note("cheat:comparison_override")
            raise CandidateError("the candidate returned an object that equals everything")
        elif _is_error_reply(reply, "raise"):
            name = clean_text(reply[1], 100)
            if name in CONTROL_FLOW_EXCEPTIONS:
                self.note(f"raised:{name}")
            raise candidate_exception(name, clean_text(reply[2], 300))
        self.note("call_bad_reply")
        self._discard()
        raise CandidateError("malformed reply from the candidate process")

    def _ready_worker(self) -> Worker:
        if self.load_failure is not None:
            raise CandidateError(f"candidate did not load: {self.load_failure}")
        if self.worker is not None:
            return self.worker
        argv = [sys.executable, "-I", "-S", os.path.abspath(__file__), "worker"]
        try:
            worker = Worker(argv)
        except OSError:  # e.g. the pids limit, still full of the candidate's processes
            kill_all_others()
            try:
                worker = Worker(argv)
            except OSError as exc:
                self.note("spawn_failed")
                raise CandidateError(f"could not start the candidate process: {exc}") from None
        self.worker = worker
        reply, _ = self._exchange(worker, ["load", self.program, self.entry_point], loading=True)
        if reply != ["loaded"]:
            ok = _is_error_reply(reply, "load_error")
            self.load_failure = (
                f"{clean_text(reply[1], 100)}: {clean_text(reply[2], 300)}" if ok else "malformed load reply"
            )
            self.note("load_error")
            self._discard()
            raise CandidateError(f"candidate did not load: {self.load_failure}")
        return worker

    def _exchange(self, worker: Worker, message, loading: bool = False):
        """(the worker's reply, the deadline it came under); raises CandidateError on failure."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self.note("budget_exhausted")
            self._discard()
            raise CandidateError("time budget for all calls exhausted")
        deadline = time.monotonic() + min(self.call_s, remaining)
        try:
            return worker.exchange(message, deadline), deadline
        except TimeoutError:
            event, why = "timeout", "timed out"
        except EOFError:
            event, why = "died", "process died"
        except (ValueError, RecursionError):
            event, why = "bad_reply", "malformed reply"
        self.note(("load_" if loading else "call_") + event)
        self._discard()
        if loading:
            self.load_failure = why + " while loading"
        raise CandidateError(f"candidate {why}")

    def _discard(self) -> None:
        if self.worker is not None:
            kill_all_others()
            self.worker.close()
            self.worker = None


def _is_error_reply(reply, tag: str) -> bool:
    """`[tag, exception name, message]` with both strings (the worker is the candidate's: check all)."""
    return type(reply) is list and len(reply) == 3 and reply[0] == tag and all(type(x) is str for x in reply[1:])


def kill_all_others(rounds: int = 200) -> bool:
    """SIGKILL every process of this pid namespace but us and its init; True once none is left.

    Then SIGCONT init: a candidate may have ptrace-stopped it (same uid), and a stopped init
    would hold the run open until the sandbox's wall limit."""
    done = False
    for _ in range(rounds):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _reap()
        if not _other_live_pids():
            done = True
            break
        time.sleep(0.002)
    try:
        os.kill(1, signal.SIGCONT)
    except OSError:
        pass
    return done


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _other_live_pids() -> list[int]:
    live = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (1, os.getpid()):
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            live.append(int(name))
    return live


class CandidateProxy:
    """What the tests call `candidate`: forwards plain-data args to the worker."""

    def __init__(self, runner: CandidateRunner):
        self._runner = runner

    def __call__(self, *args, **kwargs):
        return self._runner.call(args, kwargs)


class NoReference:
    """The entry point's own name inside `check` when the task has no reference solution.

    Calling it there would compute an expected value with the candidate itself (the tests
    would compare the candidate with itself and pass whatever it returns), so the call is the
    tests' fault: a harness error, never a pass or a fail of the candidate."""

    def __init__(self, name: str, runner: CandidateRunner):
        self._name, self._runner = name, runner

    def __call__(self, *args, **kwargs):
        error = (
            f"the tests call `{self._name}` by name inside check(): that name is not the candidate "
            "(call `candidate`), and the task has no reference solution to compute expected values with"
        )
        self._runner.harness_error = self._runner.harness_error or error
        raise HarnessError(error)


def trusted_namespace(prompt: str, reference: str | None) -> dict:
    """The tests' globals: the task's prompt (helpers such as `poly`) run in the judge, followed
    by the reference solution when there is one, so the entry point's name is the reference."""
    namespace: dict = {"__name__": "__tests__"}
    if reference is not None:
        try:
            exec(compile(prompt + reference, "<reference>", "exec"), namespace)  # trusted task material
        except Exception as exc:
            raise HarnessError(f"the reference solution does not load: {type(exc).__name__}: {exc}") from None
    elif prompt:
        try:
            exec(compile(prompt, "<prompt>", "exec"), namespace)  # trusted task text: helpers like `poly`
        except SyntaxError:
            pass  # a prompt that is not complete code only prefixes the program
    return namespace


def run_tests(
    source: str, filename: str, prompt: str, entry_point: str, runner: CandidateRunner, reference: str | None = None
) -> dict:
    """Run one test suite against the candidate; the per-site counts for the verdict.

    The candidate is reachable from `check`-shaped tests through one name only: its parameter
    `candidate`. There the entry point's own name is the trusted reference (prompt +
    `reference`), so a test that computes its expected value by calling `sort_third(...)`
    (HumanEval/33) compares the candidate with the reference, not with itself; with no
    reference, calling that name is a harness error (`NoReference`). Tests made of top-level
    asserts have no `candidate`: there the entry point's name is the candidate (their only
    handle on it), and a reference is refused as a key that would do nothing.
    """
    code, sites, has_check = instrument_tests(source, filename)
    if reference is not None and not has_check:
        raise HarnessError("a reference solution needs tests shaped `def check(candidate): ...`")
    recorder = Recorder(sites)
    namespace = trusted_namespace(prompt, reference)
    proxy = CandidateProxy(runner)
    if not has_check:
        namespace[entry_point] = proxy
    elif reference is None:
        namespace[entry_point] = NoReference(entry_point, runner)
    elif not callable(namespace.get(entry_point)):
        raise HarnessError(f"the reference solution defines no function `{entry_point}`")
    namespace[RECORDER] = recorder
    try:
        exec(code, namespace)
        if has_check:
            namespace[CHECK_NAME](proxy)
    except Exception as exc:  # outside every wrapped statement: e.g. check(candidate) itself misdefined
        raise HarnessError(f"tests failed outside any statement: {type(exc).__name__}: {exc}") from None
    if runner.harness_error:
        raise HarnessError(runner.harness_error)
    return {"sites": sites, "passed": recorder.passed()}


def harden_judge() -> None:
    """Non-dumpable (no ptrace or /proc access by same-uid processes), subreaper, no catchable
    signals, and imports only from the read-only standard library."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE = 4
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER = 36: orphans come to us to be reaped
    for name in (
        "SIGINT",
        "SIGTERM",
        "SIGHUP",
        "SIGQUIT",
        "SIGUSR1",
        "SIGUSR2",
        "SIGALRM",
        "SIGVTALRM",
        "SIGPROF",
        "SIGPIPE",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGXFSZ",
        "SIGPOLL",
        "SIGWINCH",
    ):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    sys.path[:] = [p for p in sys.path if p.startswith(("/usr/", "/lib"))]


def judge_main(payload_path: str) -> int:
    import hashlib
    import hmac
    import traceback

    with open(payload_path, "rb") as f:
        payload = json.loads(f.read())
    os.unlink(payload_path)  # gone before any candidate process exists
    key = bytes.fromhex(payload.pop("key"))
    verdict: dict = {"nonce": payload["nonce"]}
    try:
        harden_judge()  # before the first worker: nothing else runs here yet but the sandbox's init
        runner = CandidateRunner(payload["program"], payload["entry_point"], payload["call_s"], payload["budget_s"])
        common = (payload["prompt"], payload["entry_point"], runner, payload.get("reference"))
        verdict["tests"] = run_tests(payload["tests"], "<tests>", *common)
        if payload.get("heldout_tests"):
            verdict["heldout"] = run_tests(payload["heldout_tests"], "<heldout>", *common)
        verdict.update(events=runner.events, load_failure=runner.load_failure, first_error=runner.first_error)
    except HarnessError as exc:
        verdict["harness_error"] = str(exc)
    except Exception:  # a bug of ours: reported as such, never scored as the model's failure
        verdict["judge_error"] = traceback.format_exc()[-1500:]
    verdict["all_killed"] = kill_all_others()
    body = json.dumps(verdict, sort_keys=True)
    tag = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
    line = memoryview(f"\n{VERDICT_MAGIC} {tag} {body}\n".encode())
    while line:
        line = line[os.write(1, line) :]
    return 0


# --- the worker (the candidate's process; nothing here is trusted by the judge) ----------------


def worker_main() -> int:
    import builtins

    for sig in range(1, signal.NSIG):
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    requests = os.fdopen(os.dup(0), "rb")
    reply_fd = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    dumps, write, exit_now = json.dumps, os.write, os._exit

    def reply(message) -> None:
        data = (dumps(message) + "\n").encode()
        while data:
            data = data[write(reply_fd, data) :]

    _, program, entry_point = json.loads(requests.readline())
    namespace = {"__name__": "__candidate__", "__builtins__": builtins}
    try:
        exec(compile(program, "<candidate>", "exec"), namespace)
        function = namespace[entry_point]
        if not callable(function):
            raise TypeError(f"{entry_point} is not callable")
    except BaseException as exc:  # noqa: B036  (SystemExit at import is a load failure too)
        reply(["load_error", _name(exc), _text(exc)])
        exit_now(0)
    reply(["loaded"])
    while True:
        line = requests.readline()
        if not line:
            exit_now(0)
        _, args, kwargs = json.loads(line)
        try:
            message = ["ok", encode(function(*decode(args), **decode(kwargs)))]
        except NotPlain as exc:  # only plain data crosses; one built to equal anything is named
            message = (
                ["cheat", "comparison_override"] if equals_the_unseen(exc.value) else ["raise", "TypeError", str(exc)]
            )
        except BaseException as exc:  # noqa: B036
            message = ["raise", _name(exc), _text(exc)]
        reply(message)


def _name(exc: BaseException) -> str:
    return type(exc).__name__ if isinstance(type(exc).__name__, str) else "Exception"


def _text(exc: BaseException) -> str:
    try:
        return str(exc)[:500]
    except BaseException:  # noqa: B036
        return "<unprintable>"


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        sys.exit(worker_main())
    if sys.argv[1:2] == ["judge"] and len(sys.argv) == 3:
        sys.exit(judge_main(sys.argv[2]))
    sys.exit("usage: judge.py judge PAYLOAD | judge.py worker")
