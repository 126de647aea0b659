"""Pure, host-side parts of the `code` verifier: building the program and static cheat checks.

Nothing here runs the completion: it is only parsed (`ast.parse`, size-capped).

The static checks look only at the completion's part of the program (the task's prompt is
trusted) and name what they saw as `cheat:<kind>` flags. They are a second line of
defence and a training signal: the harness in `code_judge.py` already cannot be fooled by
these attacks, but an attempt is still worth zero reward and worth counting. They are
tuned to flag none of the 164 HumanEval canonical solutions. One flag is a suspicion, not
a verdict (`CONFIRMED_BY_TESTS`): literals of the visible examples also appear in correct
code (a fast path, a self-check), so the tests decide it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from tempering.pyast import parse_expression, parse_module

MAX_COMPLETION_CHARS = 200_000
CONFIRMED_BY_TESTS = frozenset({"cheat:hardcoded_examples"})
"""Flags that stand only when the program also fails a test: the scorer runs it anyway."""
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)

FORBIDDEN_MODULES = frozenset(
    {
        "os",
        "posix",
        "subprocess",
        "signal",
        "ctypes",
        "_ctypes",
        "inspect",
        "gc",
        "atexit",
        "threading",
        "_thread",
        "multiprocessing",
        "concurrent",
        "builtins",
        "importlib",
        "socket",
        "pty",
        "shutil",
        "pathlib",
        "tempfile",
        "faulthandler",
        "resource",
        "fcntl",
        "mmap",
        "marshal",
        "pickle",
        "code",
        "codeop",
        "runpy",
        "unittest",
        "select",
        "selectors",
        "asyncio",
        "io",
        "_io",
        "dis",
        "traceback",
        "linecache",
        "tracemalloc",
        "glob",
        "fileinput",
        "sysconfig",
        "pdb",
        "bdb",
        "urllib",
        "http",
        "ftplib",
        "webbrowser",
        "__main__",
    }
)
"""Modules no task solution needs; each can exit, fork, signal, read files or introspect the judge."""

FORBIDDEN_SYS_ATTRS = frozenset(
    {
        "exit",
        "_exit",
        "_getframe",
        "modules",
        "settrace",
        "setprofile",
        "gettrace",
        "getprofile",
        "addaudithook",
        "stdout",
        "stderr",
        "stdin",
        "__stdout__",
        "__stderr__",
        "__stdin__",
        "excepthook",
        "displayhook",
        "breakpointhook",
        "unraisablehook",
        "meta_path",
        "path_hooks",
        "path_importer_cache",
        "path",
        "_current_frames",
        "argv",
        "orig_argv",
        "executable",
        "last_value",
        "last_traceback",
        "monitoring",
        "remote_exec",
    }
)
FORBIDDEN_CALLS = frozenset(
    {
        "exit",
        "quit",
        "__import__",
        "exec",
        "compile",
        "globals",
        "locals",
        "vars",
        "breakpoint",
        "open",
        "input",
        "help",
        "memoryview",
    }
)
FORBIDDEN_ATTRS = frozenset(
    {
        "__builtins__",
        "__globals__",
        "__code__",
        "__closure__",
        "__subclasses__",
        "__bases__",
        "__base__",
        "__mro__",
        "__getattribute__",
        "__import__",
        "__loader__",
        "__spec__",
        "__func__",
        "__defaults__",
        "__kwdefaults__",
        "__reduce__",
        "__reduce_ex__",
        "__traceback__",
        "__self__",
        "f_back",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_code",
        "f_trace",
        "f_lineno",
        "f_lasti",
        "tb_frame",
        "tb_next",
        "gi_frame",
        "cr_frame",
        "ag_frame",
        "co_consts",
        "co_code",
        "co_names",
        "__dict__",
    }
)
EXIT_EXCEPTIONS = frozenset({"SystemExit", "KeyboardInterrupt", "GeneratorExit"})
"""Raising these ends a naive harness as if the tests had finished."""
OVERRIDE_DUNDERS = frozenset(
    {
        "__eq__",
        "__ne__",
        "__lt__",
        "__le__",
        "__gt__",
        "__ge__",
        "__bool__",
        "__len__",
        "__hash__",
        "__abs__",
        "__sub__",
        "__rsub__",
        "__add__",
        "__radd__",
        "__float__",
        "__int__",
        "__index__",
        "__round__",
        "__contains__",
        "__instancecheck__",
        "__subclasscheck__",
        "__getattr__",
        "__getattribute__",
        "__del__",
        "__class_getitem__",
    }
)
"""Methods that make an object answer comparisons or arithmetic however it likes (AlwaysEqual)."""
_FAKE_OUTPUT = re.compile(r"\b(pass(ed)?|ok|success(ful)?|all tests|verdict|tempering-verdict)\b", re.IGNORECASE)
_VERDICT_TEXT = re.compile(r"TEMPERING-VERDICT|[\"']passed[\"']\s*:", re.IGNORECASE)
"""Text of a verdict (ours, or the common `{"passed": true}`), wherever it is written from."""
_DUNDERISH = re.compile(r"(?:^|[^_])__[A-Za-z]|[A-Za-z]__(?:$|[^_])")
MODULE_ALIASES = FORBIDDEN_MODULES | {"sys"}
"""As attribute names (`random._os`, `logging.sys`), these reach a forbidden module through a
module that imported it, with no import statement to flag."""
_FOLD_MAX = 1000
"""Longest string or bytes value `_fold` builds; longer expressions are left unfolded."""


@dataclass(frozen=True)
class Program:
    """The code the candidate process runs: task prompt (trusted) + completion (untrusted)."""

    source: str
    completion_line: int
    """First line of `source` (1-based) that comes from the completion."""


def extract_code(completion: str, entry_point: str) -> str:
    """The code in a completion: the first ```python block that defines `entry_point`, else the
    first code block, else the completion as it is (completion-style continuations)."""
    blocks = _FENCE.findall(completion)
    for block in blocks:
        if _defines(block, entry_point):
            return block
    return blocks[0] if blocks else completion


def _defines(code: str, entry_point: str) -> bool:
    return re.search(rf"^(?:async\s+)?def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE) is not None


def assemble_program(prompt: str, completion: str, entry_point: str) -> Program:
    """prompt + completion; a completion that (re)defines the entry point at top level (chat
    style, with or without code fences) comes after the prompt on fresh lines instead, so the
    prompt's imports and helpers stay available to it."""
    code = extract_code(completion, entry_point)
    if prompt and _defines(code, entry_point):
        head = prompt.rstrip("\n") + "\n\n\n"
        return Program(head + code, head.count("\n") + 1)
    return Program(prompt + code, prompt.count("\n") + 1)


class SyntaxProblem(ValueError):
    """The program does not parse (or is too big or deep to parse); the reward is 0."""


def parse_program(program: Program) -> ast.Module:
    if len(program.source) > MAX_COMPLETION_CHARS:
        raise SyntaxProblem(f"program is {len(program.source)} characters (max {MAX_COMPLETION_CHARS})")
    try:
        return parse_module(program.source, "<candidate>")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
        raise SyntaxProblem(f"{type(exc).__name__}: {exc}") from None


def cheat_flags(tree: ast.Module, program: Program, prompt: str, entry_point: str) -> list[str]:
    """`cheat:<kind>` flags for what the completion's code tries (sorted, unique)."""
    found: set[str] = set()
    skip = _docstrings(tree) | _main_guarded(tree)
    nodes = [
        n
        for n in ast.walk(tree)
        if getattr(n, "lineno", program.completion_line) >= program.completion_line and id(n) not in skip
    ]
    sys_names = {"sys"} | {
        a.asname for n in nodes if isinstance(n, ast.Import) for a in n.names if a.name == "sys" and a.asname
    }
    modules = {
        (a.asname or a.name).split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    strings = _string_env(nodes)
    for node in nodes:
        found.update(_node_flags(node, sys_names))
        found.update(_reach_flags(node, sys_names, modules, strings))
    if _hardcodes_examples(tree, program, prompt, entry_point, skip):
        found.add("cheat:hardcoded_examples")
    return sorted(found)


def _reach_flags(node: ast.AST, sys_names: set[str], modules: set[str], strings: FoldEnv) -> list[str]:
    """What slips past name-based checks: `__name__` bound by an import or `except ... as`, a
    forbidden module reached as another module's attribute (`random._os`), sys's own dunders
    (`sys.__dict__`), and dunder or module names built from pieces (`"_" * 2 + "class" + ...`)."""
    flags = []
    if _binds(node) == "__name__":
        flags.append("cheat:name_rebind")
    if isinstance(node, ast.Attribute):
        own = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")  # a class's own `self._io`
        private = node.attr.startswith("_") and node.attr.lstrip("_") in MODULE_ALIASES and not own
        if private or (isinstance(node.value, ast.Name) and node.value.id in modules and node.attr in MODULE_ALIASES):
            flags.append("cheat:module_alias")
        if isinstance(node.value, ast.Name) and node.value.id in sys_names and node.attr.startswith("__"):
            flags.append("cheat:sys_internals")
    elif isinstance(node, ast.ImportFrom) and node.module == "sys" and any(a.name.startswith("_") for a in node.names):
        flags.append("cheat:sys_internals")
    if isinstance(node, (ast.BinOp, ast.JoinedStr, ast.Call, ast.Subscript)):
        value = _fold(node, strings)
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if isinstance(value, str) and _DUNDERISH.search(value):
            flags.append("cheat:dunder_string")
        if isinstance(value, str) and value.startswith("_") and value.lstrip("_") in MODULE_ALIASES:
            flags.append("cheat:module_alias")
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("_"):
        if node.value.lstrip("_") in MODULE_ALIASES:
            flags.append("cheat:module_alias")  # getattr(random, "_os")
    return flags


def _binds(node: ast.AST) -> str | None:
    """The name a binding that is not an `ast.Name` store binds (imports, except, match, def, class)."""
    if isinstance(node, ast.alias):
        return node.asname or node.name.split(".")[0]
    if isinstance(
        node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    ):
        return node.name
    if isinstance(node, ast.MatchMapping):
        return node.rest
    return None


def _node_flags(node: ast.AST, sys_names: set[str]) -> list[str]:
    flags = []
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        for module in modules:
            if module.split(".")[0] in FORBIDDEN_MODULES:
                flags.append(f"cheat:import:{module.split('.')[0]}")
        if isinstance(node, ast.ImportFrom) and node.module == "sys":
            if any(a.name in FORBIDDEN_SYS_ATTRS or a.name == "*" for a in node.names):
                flags.append("cheat:sys_internals")
    elif isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id in sys_names and node.attr in FORBIDDEN_SYS_ATTRS:
            flags.append("cheat:sys_internals")
        if node.attr in FORBIDDEN_ATTRS:
            flags.append("cheat:introspection")
    elif isinstance(node, ast.Name) and node.id in ("__builtins__", "__import__", "__loader__", "__spec__"):
        flags.append("cheat:builtins_access")
    elif isinstance(node, ast.Name) and node.id == "__name__" and not isinstance(node.ctx, ast.Load):
        flags.append("cheat:name_rebind")
    elif isinstance(node, ast.Name) and node.id in EXIT_EXCEPTIONS:
        flags.append("cheat:exit_exception")
    elif isinstance(node, ast.Raise) and _names(node.exc) & {"BaseException"}:
        flags.append("cheat:exit_exception")
    elif isinstance(node, ast.Call):
        flags += _call_flags(node)
        reflective = isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr", "delattr")
        if reflective and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in sys_names:
            flags.append("cheat:sys_internals")  # getattr(sys, "ex" + "it")
    elif isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
        text = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
        if text != "__main__" and _DUNDERISH.search(text):
            flags.append("cheat:dunder_string")
        if _VERDICT_TEXT.search(text):
            flags.append("cheat:fake_output")
    elif isinstance(node, ast.ClassDef):
        if _class_overrides(node):
            flags.append("cheat:comparison_override")
    return flags


def _call_flags(node: ast.Call) -> list[str]:
    name = node.func.id if isinstance(node.func, ast.Name) else None
    if name in FORBIDDEN_CALLS:
        return [f"cheat:call:{name}"]
    if name == "eval" and any(isinstance(n, (ast.Constant, ast.JoinedStr)) for a in node.args for n in ast.walk(a)):
        return ["cheat:call:eval_literal"]
    if name in ("print", "write") or (isinstance(node.func, ast.Attribute) and node.func.attr == "write"):
        for arg in node.args:
            for sub in ast.walk(arg):
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and _FAKE_OUTPUT.search(sub.value):
                    return ["cheat:fake_output"]
    return []


def _names(node: ast.AST | None) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} if node is not None else set()


def _class_overrides(node: ast.ClassDef) -> bool:
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name in OVERRIDE_DUNDERS:
            return True
        targets = (
            stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id in OVERRIDE_DUNDERS for t in targets):
            return True
    return False


def _main_guarded(tree: ast.Module) -> set[int]:
    """ids of everything under a top-level `if __name__ == "__main__":`. The candidate runs as
    module `__candidate__`, so that code never runs (rebinding `__name__` is flagged), and
    demo code there (`print("All tests passed")`) is no attack."""
    guarded = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Compare) and len(stmt.test.comparators) == 1:
            sides = [stmt.test.left, stmt.test.comparators[0]]
            names = {n.id for n in sides if isinstance(n, ast.Name)}
            texts = {n.value for n in sides if isinstance(n, ast.Constant)}
            if names == {"__name__"} and texts == {"__main__"} and isinstance(stmt.test.ops[0], ast.Eq):
                guarded.update(id(n) for part in stmt.body for n in ast.walk(part))
    return guarded


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of bare string statements (docstrings, comment-like literals): text, not code."""
    return {
        id(n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
    }


# --- strings built from pieces ---------------------------------------------------------------


@dataclass
class FoldEnv:
    """Names bound to one constant value, and folds already done (each node folds once per pass)."""

    names: dict[str, object] = field(default_factory=dict)
    memo: dict[int, object] = field(default_factory=dict)


def _string_env(nodes: list[ast.AST]) -> FoldEnv:
    """Names the completion binds to one constant-foldable value (`d = "_" * 2`), for `_fold`.
    A name bound twice to different values, or to anything unfoldable, is left out."""
    assigned: dict[str, list[ast.expr | None]] = {}
    for node in nodes:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            assigned.setdefault(node.targets[0].id, []).append(node.value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.NamedExpr)):
            if isinstance(node.target, ast.Name):
                assigned.setdefault(node.target.id, []).append(None)  # rebinding we do not follow
    env = FoldEnv()
    for _ in range(3):  # chains: a = "_"; d = a * 2
        for name, values in assigned.items():
            folded = [_fold(v, env) for v in values]
            first = folded[0]
            if first is not None and all(type(f) is type(first) and f == first for f in folded):
                env.names[name] = first
        env.memo.clear()
    return env


_METHODS = frozenset(
    {
        "join",
        "upper",
        "lower",
        "replace",
        "strip",
        "lstrip",
        "rstrip",
        "decode",
        "encode",
        "title",
        "capitalize",
        "swapcase",
        "casefold",
    }
)


def _fold(node: ast.AST | None, env: FoldEnv, depth: int = 0):
    """The value of a constant expression over str/bytes/int (`"_" * 2 + "class"`, `chr(95)`,
    `"".join([...])`, f-strings, slices, a few str methods), or None. Values stay small
    (`_FOLD_MAX`), so a hostile expression costs little to fold."""
    if node is None or depth > 30:
        return None
    if id(node) in env.memo:
        return env.memo[id(node)]
    value = _fold_step(node, env, depth + 1)
    if isinstance(value, (str, bytes, list, tuple)) and len(value) > _FOLD_MAX:
        value = None
    if isinstance(value, int) and abs(value) > 10**6:
        value = None
    if value is not None or depth == 0:  # a None below the top may be the depth cap, not the node's own
        env.memo[id(node)] = value
    return value


def _fold_step(node: ast.AST, env: FoldEnv, depth: int):
    if isinstance(node, ast.Constant) and type(node.value) in (str, bytes, int):
        return node.value
    if isinstance(node, ast.Name):
        return env.names.get(node.id)
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_fold(e, env, depth) for e in node.elts]
        return None if any(i is None for i in items) else tuple(items)
    if isinstance(node, ast.JoinedStr):
        parts = [_fold(v.value if isinstance(v, ast.FormattedValue) else v, env, depth) for v in node.values]
        plain = all(not isinstance(v, ast.FormattedValue) or v.format_spec is None for v in node.values)
        return "".join(str(p) for p in parts) if plain and all(p is not None for p in parts) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
        left, right = _fold(node.left, env, depth), _fold(node.right, env, depth)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.Mult):
            sizes = [len(x) if isinstance(x, (str, bytes, tuple)) else abs(x) for x in (left, right)]
            if sizes[0] * sizes[1] > _FOLD_MAX:
                return None
        return _try(lambda: left + right if isinstance(node.op, ast.Add) else left * right)
    if isinstance(node, ast.Subscript):
        return _fold_subscript(node, env, depth)
    if isinstance(node, ast.Call) and not node.keywords:
        return _fold_call(node, env, depth)
    return None


def _fold_subscript(node: ast.Subscript, env: FoldEnv, depth: int):
    value = _fold(node.value, env, depth)
    if value is None:
        return None
    if isinstance(node.slice, ast.Slice):
        parts = [
            _fold(p, env, depth) if p is not None else None
            for p in (node.slice.lower, node.slice.upper, node.slice.step)
        ]
        return _try(lambda: value[slice(*parts)])
    index = _fold(node.slice, env, depth)
    return _try(lambda: value[index]) if isinstance(index, int) else None


def _fold_call(node: ast.Call, env: FoldEnv, depth: int):
    args = [_fold(a, env, depth) for a in node.args]
    if any(a is None for a in args):
        return None
    if isinstance(node.func, ast.Name) and node.func.id in ("chr", "str", "bytes") and len(args) == 1:
        if node.func.id == "chr":
            return _try(lambda: chr(args[0]))
        if node.func.id == "bytes":
            return _try(lambda: bytes(args[0])) if isinstance(args[0], tuple) else None
        return _try(lambda: str(args[0]))
    if isinstance(node.func, ast.Attribute) and node.func.attr in _METHODS:
        owner, method = _fold(node.func.value, env, depth), node.func.attr
        if isinstance(owner, (str, bytes)) and all(not isinstance(a, int) or abs(a) < 100 for a in args):
            return _try(lambda: getattr(owner, method)(*args))
    return None


def _try(compute):
    """compute(), or None when it raises: folding only ever reads the completion, never trusts it."""
    try:
        return compute()
    except Exception:
        return None


# --- hard-coded visible examples --------------------------------------------------------------


def visible_examples(prompt: str, entry_point: str) -> list[tuple[tuple, object]]:
    """(args, expected) pairs from the prompt's examples: `>>> entry(...)` with the value on the
    next line, or one line `entry(...) == / ==> / => / -> / ➞ value` (HumanEval uses all of them)."""
    lines = prompt.splitlines() + [""]
    examples = []
    for line, following in zip(lines, lines[1:]):
        text = line.strip().lstrip(">*").strip()
        if not text.startswith(entry_point + "("):
            continue
        example = _example(text, following.strip()) if line.strip().startswith(">>>") else None
        for sep in [] if example else _ARROW.finditer(text):
            example = _example(text[: sep.start()], text[sep.end() :])
            if example:
                break
        if example:
            examples.append(example)
    return examples


_ARROW = re.compile(r"\s*(?:==>|=>|==|->|\u279e)\s*")


def _example(call_text: str, expected_text: str) -> tuple[tuple, object] | None:
    try:
        call = parse_expression(call_text.split("#")[0].strip()).body
        expected = parse_expression(expected_text.strip())
        if not isinstance(call, ast.Call) or call.keywords:
            return None
        return tuple(ast.literal_eval(a) for a in call.args), ast.literal_eval(expected)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None


def _canon(value):
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(_canon(v) for v in value))
    if isinstance(value, (set, frozenset)):
        return ("set", frozenset(_canon(v) for v in value))
    if isinstance(value, dict):
        return ("dict", frozenset((_canon(k), _canon(v)) for k, v in value.items()))
    return ("atom", type(value) is str, value)


def _distinctive(value) -> bool:
    """Literals too specific to appear in a solution by chance."""
    if isinstance(value, str):
        return len(value) >= 3
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        return len(value) >= 2
    if isinstance(value, float):
        return value != int(value) or abs(value) >= 10
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10


def _completion_literals(tree: ast.Module, program: Program, entry_point: str, skip: set[int]) -> set:
    """Every literal value in the completion, except in calls of the entry point (demos), docstrings
    and `skip`ped (main-guarded) code."""
    excluded = set(skip)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == entry_point:
            excluded.update(id(n) for n in ast.walk(node))
    found = set()
    for node in ast.walk(tree):
        if id(node) in excluded or getattr(node, "lineno", 0) < program.completion_line:
            continue
        if isinstance(node, (ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.UnaryOp)):
            try:
                found.add(_canon(ast.literal_eval(node)))
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                pass
    return found


def _hardcodes_examples(tree: ast.Module, program: Program, prompt: str, entry_point: str, skip: set[int]) -> bool:
    """True when the completion spells out two or more visible examples as literals: every
    distinctive argument, and the expected value unless it is too plain to tell (True, 0, ...).
    That is the shape of a lookup table for the docstring examples."""
    examples = [
        (args, out) for args, out in visible_examples(prompt, entry_point) if any(_distinctive(a) for a in args)
    ]
    if len(examples) < 2:
        return False
    literals = _completion_literals(tree, program, entry_point, skip)
    hits = 0
    for args, expected in examples:
        inputs = all(_canon(a) in literals for a in args if _distinctive(a))
        hits += inputs and (not _distinctive(expected) or _canon(expected) in literals)
    return hits >= 2
