"""Jobs that live in one place stay there: a scan of src/tempering finds each exactly once,
and a planted second copy makes the scan fail."""

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tempering"


def sources(root: Path = SRC) -> dict[str, str]:
    """{path relative to the package root: source} of every module."""
    return {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8") for p in sorted(root.rglob("*.py"))}


# ------------------------------------------------------------ left padding, PAD_ID
def _len_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len"


def _right_aligned_slice(node: ast.AST) -> bool:
    """`[W - n:]` or `[-len(s):]`: the slice that right-aligns a sequence in a row."""
    if not isinstance(node, ast.Slice) or node.upper is not None:
        return False
    low = node.lower
    if isinstance(low, ast.UnaryOp) and isinstance(low.op, ast.USub):
        return _len_call(low.operand)
    return isinstance(low, ast.BinOp) and isinstance(low.op, ast.Sub)


def left_pad_writers(files: dict[str, str]) -> list[str]:
    """Modules that assign a sequence into the right end of a tensor row (a left-padding implementation)."""
    found = []
    for name, text in files.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Subscript):
                        parts = target.slice.elts if isinstance(target.slice, ast.Tuple) else [target.slice]
                        if any(_right_aligned_slice(p) for p in parts):
                            found.append(name)
    return sorted(set(found))


def pad_id_definitions(files: dict[str, str]) -> list[str]:
    """Modules that assign a module-level `PAD_ID`."""
    found = []
    for name, text in files.items():
        for node in ast.parse(text).body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            if any(isinstance(t, ast.Name) and t.id == "PAD_ID" for t in targets):
                found.append(name)
    return found


LEFT_PAD_COPY = """
import torch
def pad_prompts(seqs, pad):
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad)
    for i, s in enumerate(seqs):
        ids[i, width - len(s) :] = torch.tensor(s)
    return ids
"""


def test_left_padding_is_implemented_once_in_data_padding():
    assert left_pad_writers(sources()) == ["data/padding.py"]


def test_a_planted_left_padding_copy_is_found():
    planted = {
        **sources(),
        "rollout/planted.py": LEFT_PAD_COPY,
        "agents/planted.py": "x[0, -len(s):] = s\n",
        "data/p.py": "m[i, w - n :] = 1\n",
    }
    assert left_pad_writers(planted) == ["agents/planted.py", "data/p.py", "data/padding.py", "rollout/planted.py"]


def test_pad_id_is_defined_once_in_data_padding():
    assert pad_id_definitions(sources()) == ["data/padding.py"]


def test_a_planted_pad_id_is_found():
    planted = {**sources(), "agents/planted.py": "PAD_ID: int = 0\n", "rollout/planted.py": "PAD_ID = 2\n"}
    assert sorted(pad_id_definitions(planted)) == ["agents/planted.py", "data/padding.py", "rollout/planted.py"]


# ------------------------------------------------------------ atomic writes
def atomic_writers(files: dict[str, str]) -> list[str]:
    """Modules that rename a file into place or fsync one: `os.replace`, `Path.replace(target)`, `os.fsync`.

    Directories (checkpoints, converted models) are published with `os.rename`, not counted here.
    """
    found = []
    for name, text in files.items():
        for node in ast.walk(ast.parse(text)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            attr, owner = node.func.attr, node.func.value
            on_os = isinstance(owner, ast.Name) and owner.id == "os"
            path_replace = attr == "replace" and len(node.args) == 1 and not node.keywords  # str.replace takes 2
            if path_replace or (on_os and attr in ("replace", "fsync")):
                found.append(name)
    return sorted(set(found))


def test_atomic_file_writes_live_in_tempering_atomic():
    assert atomic_writers(sources()) == ["atomic.py"]


def test_a_planted_atomic_write_is_found():
    planted = {
        **sources(),
        "evals/planted.py": "def save(tmp, path):\n    tmp.write_text('x')\n    tmp.replace(path)\n",
        "runs/planted.py": "import os\ndef save(fh, a, b):\n    os.fsync(fh.fileno())\n    os.replace(a, b)\n",
        "data/harmless.py": "def f(s):\n    return s.replace('a', 'b')\n",
    }
    assert atomic_writers(planted) == ["atomic.py", "evals/planted.py", "runs/planted.py"]


# ------------------------------------------------------------ number patterns
# a sign before a digit, a decimal part after one, a leading-dot decimal, digits with separators
NUMBER_REGEX = re.compile(r"(\[[-+]{2}\]\?|-\?)(\\d|\{|$)|\\d[+*]?\(\?:\\\.\\d|\\\.\\d[+*]|\\d\[\\d,\]")


def number_patterns(files: dict[str, str]) -> list[str]:
    """Modules with a string constant that is (part of) a regex for a number."""
    found = []
    for name, text in files.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and NUMBER_REGEX.search(node.value):
                found.append(name)
    return sorted(set(found))


def test_number_patterns_live_in_tempering_numbers():
    assert number_patterns(sources()) == ["numbers.py"]


def test_planted_number_regexes_are_found():
    planted = {
        **sources(),
        "agents/a.py": 'import re\n_N = re.compile(r"-?\\d[\\d,]*(?:\\.\\d+)?")\n',
        "evals/b.py": 'P = r"^\\s*[-+]?\\d+\\s*$"\n',
        "config/c.py": 'P = r"\\d+(?:\\.\\d+)?"\n',
        "verifiers/d.py": 'P = rf"[+-]?{UNSIGNED}"\n',
        "models/e.py": 'P = r"^model\\.layers\\.(\\d+)\\.(.*)$"\n',  # a layer index, not a number answer
    }
    assert number_patterns(planted) == ["agents/a.py", "config/c.py", "evals/b.py", "numbers.py", "verifiers/d.py"]
