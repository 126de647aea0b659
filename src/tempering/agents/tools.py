"""The agent tools: each a JSON schema the model is shown and a function that runs it.

    TOOLS["shell"].schema                    # {"type": "function", "function": {...}} (OpenAI/HF form)
    run_tool(call, ctx) -> ToolOutcome        # text for the model, and whether it was an error

Tools that touch files or run programs do so only through the episode's `SandboxSession`
(`shell`, `python`, `read_file`, `write_file`, `edit_file`); `calculator` evaluates arithmetic by
walking a parsed expression (no `eval`: numbers and + - * / // % ** only, with size
caps), so it needs no sandbox. `submit` records the agent's final answer and ends the
episode. Arguments are checked against the tool's schema before anything runs; a call
that fails the check is an invalid call (counted by the environment), not a tool error.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field
from typing import Any, Callable

import jsonschema

from tempering.pyast import parse_expression
from tempering.sandbox.base import ExecResult, Limits, SandboxSession

MAX_OBSERVATION_CHARS = 2000
"""Tool output longer than this is cut (the tail is dropped, and the cut is said)."""


class EnvFailure(RuntimeError):
    """The environment (its sandbox) failed: the episode ends as `env_error`, not as the model's fault."""


@dataclass
class ToolContext:
    """What a tool may touch during one episode."""

    session: SandboxSession | None
    limits: Limits | None = None
    submitted: list[str] = field(default_factory=list)
    sandbox_s: float = 0.0
    """Seconds spent in sandbox calls this episode."""
    sandbox_timeouts: int = 0
    flags: list[str] = field(default_factory=list)
    """What goal checks saw the episode try (`cheat:comparison_override`), in the order seen."""
    reward: float | None = None
    """A graded goal's reward (a Harbor task's verifier, partial credit kept); None: the goal is pass/fail."""


@dataclass
class ToolOutcome:
    text: str
    error: bool = False
    """The tool ran and failed (nonzero exit, missing file, bad expression): the model's error."""
    done: bool = False


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    run: Callable[[dict[str, Any], ToolContext], ToolOutcome]
    needs_sandbox: bool = True

    @property
    def schema(self) -> dict[str, Any]:
        """The tool as chat templates take it (`apply_chat_template(..., tools=[...])`)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def _params(required: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {k: {"type": "string", "description": d} for k, d in required.items()},
        "required": list(required),
        "additionalProperties": False,
    }


def clip(text: str, limit: int = MAX_OBSERVATION_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more characters cut]"


def _session(ctx: ToolContext) -> SandboxSession:
    if ctx.session is None:
        raise EnvFailure("this environment has no sandbox session")
    return ctx.session


def _exec_outcome(result: ExecResult, ctx: ToolContext) -> ToolOutcome:
    ctx.sandbox_s += result.wall_s
    if result.status == "sandbox_error":
        raise EnvFailure(f"sandbox error: {result.error}")
    if result.status == "timeout":
        ctx.sandbox_timeouts += 1
    text = clip((result.stdout + (("\n" if result.stdout and result.stderr else "") + result.stderr)).strip())
    if result.status != "ok":  # after the cut, so a flood never hides how the run ended
        text += f"\n[exit code {result.exit_code}; {result.status}{': ' + result.error if result.error else ''}]"
    return ToolOutcome(text.strip() or "(no output)", error=result.status != "ok")


def _shell(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    return _exec_outcome(_session(ctx).exec(args["cmd"], limits=ctx.limits), ctx)


def _python(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    # runs as /work/_agent_code.py so the episode's own main.py (if any) is left alone
    session = _session(ctx)
    try:
        result = session.exec(
            ["python3", "-E", "-S", "_agent_code.py"], files={"_agent_code.py": args["code"]}, limits=ctx.limits
        )
    except (OSError, ValueError) as exc:  # /work full (bytes or inodes), or a directory in the way: the model's doing
        return ToolOutcome(f"error: cannot write the program to /work/_agent_code.py: {exc}", error=True)
    return _exec_outcome(result, ctx)


def _relative(path: str) -> str | None:
    path = path.removeprefix("/work/").removeprefix("./")
    if not path or path.startswith("/") or ".." in path.split("/"):
        return None
    return path


def _read_text(path: str, ctx: ToolContext) -> tuple[str, str] | ToolOutcome:
    """(relative path, text) of a workspace file, or the error outcome the model sees."""
    rel = _relative(path)
    if rel is None:
        return ToolOutcome(f"error: path must be relative to /work: {path!r}", error=True)
    try:
        data = _session(ctx).read_file(rel)
    except ValueError as exc:
        return ToolOutcome(f"error: {exc}", error=True)
    if data is None:
        return ToolOutcome(f"error: no such file: {rel}", error=True)
    return rel, data.decode("utf-8", "replace")


def _read_file(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    read = _read_text(args["path"], ctx)
    if isinstance(read, ToolOutcome):
        return read
    return ToolOutcome(clip(read[1]) or "(empty file)")


def _write_file(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    rel = _relative(args["path"])
    if rel is None:
        return ToolOutcome(f"error: path must be relative to /work: {args['path']!r}", error=True)
    try:
        _session(ctx).write_file(rel, args["content"])
    except (OSError, ValueError) as exc:  # a bad name or a full scratch: the model's call
        return ToolOutcome(f"error: cannot write {rel}: {exc}", error=True)
    return ToolOutcome(f"wrote {len(args['content'].encode())} bytes to {rel}")


def _edit_file(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    read = _read_text(args["path"], ctx)
    if isinstance(read, ToolOutcome):
        return read
    rel, text = read
    old = args["old"]
    found = text.count(old) if old else 0
    if found != 1:
        return ToolOutcome(f"error: `old` must occur exactly once in {rel}; it occurs {found} times", error=True)
    written = _write_file({"path": rel, "content": text.replace(old, args["new"])}, ctx)
    return written if written.error else ToolOutcome(f"replaced 1 occurrence in {rel}")


def _submit(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    ctx.submitted.append(str(args["answer"]).strip())
    return ToolOutcome("submitted", done=True)


_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
MAX_CALC_MAGNITUDE = 10**30
ACCEPTED = "numbers and + - * / // % ** and parentheses only"
_NOTATION_HINTS = {",": "no thousands separators", "×": "* for ×", "÷": "/ for ÷", "^": "** for powers"}
"""What an error names when the expression holds a sign people write but Python reads otherwise."""


def calculate(expression: str) -> int | float:
    """Value of an arithmetic expression (numbers, + - * / // % **, parentheses).

    Raises:
        ValueError: anything else (names, calls, huge powers, division by zero), with a reason.
    """
    if len(expression) > 200:
        raise ValueError("expression longer than 200 characters")
    hints = [hint for sign, hint in _NOTATION_HINTS.items() if sign in expression]
    if hints:
        raise ValueError(f"not an arithmetic expression: {expression!r} ({', '.join(hints)}; {ACCEPTED})")
    try:
        tree = parse_expression(expression.strip())
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r} ({ACCEPTED})") from None
    return _value(tree.body)


def _value(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and type(node.value) is not bool:
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > 10**6):
            raise ValueError("power too large")
        try:
            out = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ValueError("division by zero") from None
        if isinstance(out, complex) or abs(out) > MAX_CALC_MAGNITUDE:
            raise ValueError("result out of range")
        return out
    raise ValueError(f"unsupported element {type(node).__name__} ({ACCEPTED})")


def _calculator(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    try:
        value = calculate(args["expression"])
    except ValueError as exc:
        return ToolOutcome(f"error: {exc}", error=True)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return ToolOutcome(str(value))


TOOLS: dict[str, Tool] = {
    t.name: t
    for t in [
        Tool(
            "shell",
            "Run a bash command line in the working directory /work; returns stdout and stderr.",
            _params({"cmd": "the command line"}),
            _shell,
        ),
        Tool(
            "python",
            "Run Python code (standard library only) in /work; returns what it prints.",
            _params({"code": "the program"}),
            _python,
        ),
        Tool("read_file", "Read a text file under /work.", _params({"path": "path relative to /work"}), _read_file),
        Tool(
            "write_file",
            "Write a text file under /work (replacing it).",
            _params({"path": "path relative to /work", "content": "the full new content"}),
            _write_file,
        ),
        Tool(
            "edit_file",
            "Replace one exact, unique piece of text in a file under /work.",
            _params(
                {
                    "path": "path relative to /work",
                    "old": "the text to replace (must occur exactly once, whitespace included)",
                    "new": "the text to put in its place",
                }
            ),
            _edit_file,
        ),
        Tool(
            "submit",
            "Submit the final answer; ends the task.",
            _params({"answer": "the final answer"}),
            _submit,
            needs_sandbox=False,
        ),
        Tool(
            "calculator",
            "Evaluate an arithmetic expression exactly (+ - * / // % ** and parentheses).",
            _params({"expression": "e.g. 1234 * 5678"}),
            _calculator,
            needs_sandbox=False,
        ),
    ]
}


def check_arguments(tool: Tool, arguments: dict[str, Any]) -> str | None:
    """None when `arguments` fit the tool's schema, else one line saying why not.

    A string holding a NUL byte is refused for every tool: no command line, file name or
    program text can carry one (the kernel would cut it there, Python refuses it).
    """
    try:
        jsonschema.validate(arguments, tool.parameters)
    except jsonschema.ValidationError as exc:
        return f"invalid arguments for {tool.name}: {exc.message}"
    except RecursionError:
        return f"invalid arguments for {tool.name}: nested too deeply"
    nul = [k for k, v in arguments.items() if isinstance(v, str) and "\0" in v]
    if nul:
        return f"invalid arguments for {tool.name}: a NUL byte in {', '.join(map(repr, nul))}"
    return None
