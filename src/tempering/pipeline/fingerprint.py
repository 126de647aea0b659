"""The code a pipeline stage runs, as part of its cache key (`pipeline/runner.py: stage_identity`).

    code = stage_code([("tempering.recipes.sft", None), ("tempering.pipeline.stages", "training_kind")])
    code["modules"]["tempering.objectives.sft"]      # sha256 (16 hex) of that module's code

A stage's code starts at its entries: a whole module (a training objective's recipe), or one
function of a module (a stage kind's `run` in `pipeline/stages.py`: that function, the module-level
functions and values it names, and the module's top-level imports). From there every module they
import, transitively, is part of it: `import` statements anywhere in a module (recipes import
lazily, inside functions), and string constants that are exactly a module's dotted name (modules
imported by name, as `algorithms.BUILTIN_MODULES`; a `module:function` path is not followed, so the
objective registry does not pull every recipe into every stage). Modules of `tempering` and of
an entry's own top-level package (a plug-in's) are followed; any other import counts by the
version of the distribution that provides it.

What counts of each module is its syntax tree without docstrings or other bare string statements
(and without comments and line numbers, which a tree does not hold): a docstring or comment edit
changes nothing, a code edit changes the module's digest. A package's data files (built-in suites,
agent task files, audit sets; not those of its sub-packages) count by their bytes when any module
of that package is part of the stage's code.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import platform
import re
import sys
from functools import cache
from pathlib import Path
from typing import Any, Sequence

from tempering.hashing import sha256_file
from tempering.pyast import parse_module

DIGEST = 16  # hex digits kept per module or file: a key part, not a security boundary
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_NOT_DATA = (".py", ".pyc", ".pyo")


def package_dir(top: str) -> Path:
    """Where a top-level package's source lives (its directory; a single-module top level: its file).

    Raises:
        ModuleNotFoundError: no such top-level module on the path.
    """
    spec = importlib.util.find_spec(top)
    if spec is None:
        raise ModuleNotFoundError(f"no module {top!r} on the path")
    if spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    assert spec.origin is not None, top
    return Path(spec.origin)


def module_file(name: str) -> Path | None:
    """The source file of a module of a followed package, or None where there is none."""
    top, *rest = name.split(".")
    base = package_dir(top)
    if base.is_file():
        return base if not rest else None
    for path in (base.joinpath(*rest, "__init__.py"), base.joinpath(*rest).with_suffix(".py") if rest else None):
        if path is not None and path.is_file():
            return path
    return None


# ------------------------------------------------------------------ one module's code
def _is_doc(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


class _DropDocs(ast.NodeTransformer):
    """Removes docstrings and every other statement that is a bare string (attribute docstrings)."""

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        for name in ("body", "orelse", "finalbody"):
            stmts = getattr(node, name, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                setattr(node, name, [s for s in stmts if not _is_doc(s)] or [ast.Pass()])
        return node


def code_digest(tree: ast.AST) -> str:
    """sha256 (16 hex) of a syntax tree without its docstrings; positions do not count."""
    text = ast.dump(_DropDocs().visit(tree), include_attributes=False)
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST]


def imported_names(tree: ast.AST, package: str) -> tuple[set[str], set[str]]:
    """(imports, named) of `tree`: every dotted name it may import (`import a.b`; `from a import b`
    as `a` and `a.b`; relative imports resolved against `package`), and the string constants
    that look like module names (followed only where they name a module of a followed package)."""
    found: set[str] = set()
    named: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names if a.name != "*"}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _DOTTED.fullmatch(node.value):
            named.add(node.value)
    return found, named


Names = tuple[frozenset[str], frozenset[str]]  # (imports, names in strings)
_PARSED: dict[tuple[str, str], tuple[str, Names]] = {}


def _module(name: str, path: Path) -> tuple[str, Names]:
    """(code digest, (imports, named)) of one module file, cached by its bytes (an edit in the
    same clock tick that keeps the size is still an edit)."""
    source = path.read_bytes()
    key = (name, hashlib.sha256(source).hexdigest())
    if key not in _PARSED:
        tree = parse_module(source.decode("utf-8"), str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found, named = imported_names(tree, package)  # before the docstrings are dropped from `tree`
        _PARSED[key] = (code_digest(tree), (frozenset(found), frozenset(named)))
    return _PARSED[key]


def _function(module: str, path: Path, function: str) -> tuple[str, Names]:
    """(digest, imported names) of one function of a module: the function, the module-level
    definitions it names (transitively), and the module's top-level imports."""
    tree = parse_module(path.read_text(encoding="utf-8"), str(path))
    defs: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defs |= {t.id: node for t in targets if isinstance(t, ast.Name)}
    if function not in defs:
        raise LookupError(f"{module} has no top-level {function!r}")
    seen, todo = [function], [defs[function]]
    while todo:
        for n in ast.walk(todo.pop()):
            if isinstance(n, ast.Name) and n.id in defs and n.id not in seen:
                seen.append(n.id)
                todo.append(defs[n.id])
    used = ast.Module(body=[defs[n] for n in seen], type_ignores=[])
    imports = ast.Module(body=[n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))], type_ignores=[])
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    (a, named_a), (b, named_b) = imported_names(used, package), imported_names(imports, package)
    return code_digest(used), (frozenset(a | b), frozenset(named_a | named_b))


# ------------------------------------------------------------------ a stage's code
def stage_code(entries: Sequence[tuple[str, str | None]]) -> dict[str, Any]:
    """The code a stage runs: `{"modules": {name: digest}, "entries": {"module:function": digest},
    "data": {file: digest}, "libraries": {distribution: version}}` (see the module docstring).

    Args:
        entries: (module, function) pairs; function None: the whole module.
    Raises:
        LookupError: an entry's module or function does not exist.
    """
    followed = {"tempering"} | {m.split(".")[0] for m, _ in entries}
    modules: dict[str, str] = {}
    firsts: dict[str, str] = {}
    todo: list[tuple[str, bool]] = []  # (dotted name, imported: True; named in a string: False)

    def add(names: Names) -> None:
        todo.extend([(n, True) for n in sorted(names[0])] + [(n, False) for n in sorted(names[1])])

    for module, function in entries:
        path = module_file(module)
        if path is None:
            raise LookupError(f"no source for module {module!r}")
        if function is None:
            todo.append((module, True))
        else:
            firsts[f"{module}:{function}"], names = _function(module, path, function)
            add(names)
    outside: set[str] = set()
    while todo:
        name, imported = todo.pop()
        parts = name.split(".")
        if parts[0] not in followed:
            if imported:  # a third-party or standard module: its version counts
                outside.add(parts[0])
            continue
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__ too
            parent = ".".join(parts[:i])
            path = module_file(parent) if parent not in modules else None
            if path is not None:
                modules[parent], names = _module(parent, path)
                add(names)
    return {
        "entries": dict(sorted(firsts.items())),
        "modules": dict(sorted(modules.items())),
        "data": _package_data(modules),
        "libraries": libraries(outside),
    }


def _package_data(modules: dict[str, str]) -> dict[str, str]:
    """Digests of the data files of every package a module of the stage's code belongs to."""
    dirs = {p.parent for p in (module_file(m) for m in modules) if p is not None and p.name.endswith(".py")}
    out: dict[str, str] = {}
    for d in sorted(dirs):
        for f in sorted(d.rglob("*")):
            inner = f.relative_to(d).parts[:-1]
            if (
                f.is_file()
                and f.suffix not in _NOT_DATA
                and "__pycache__" not in inner
                and not any((d.joinpath(*inner[: i + 1]) / "__init__.py").is_file() for i in range(len(inner)))
            ):
                out[f"{d.name}/{f.relative_to(d).as_posix()}"] = _file_digest(f)
    return out


_FILES: dict[tuple[str, int, int], str] = {}


def _file_digest(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _FILES:
        _FILES[key] = sha256_file(path)[:DIGEST]
    return _FILES[key]


def libraries(tops: set[str]) -> dict[str, str]:
    """Distribution -> version of the third-party top-level modules in `tops` (the standard
    library counts as Python's version; a module no installed distribution provides: "absent")."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for top in sorted(tops - set(sys.stdlib_module_names) - {"__future__"}):
        for dist in _distributions().get(top) or [top]:
            try:
                out[dist] = version(dist)
            except PackageNotFoundError:
                out[dist] = "absent"
    return out


@cache
def _distributions() -> dict[str, list[str]]:
    from importlib.metadata import packages_distributions

    return {top: sorted(set(dists)) for top, dists in packages_distributions().items()}
