"""Every CUDA-only branch of src/ is tagged `# cuda-path: KEY`, and a test marked
`gpu(covers=[...])` names each KEY, so one GPU run (`pytest -m gpu`) exercises them all.

A CUDA-only line is one whose code (strings and comments aside) names `torch.cuda`, `pin_memory`,
`non_blocking`, a `device.type ==` or `!=` test, an `is_available()` probe or a vLLM import, or whose
string literal is "cuda" or "nccl". A tag on a line (or on the comment line above it) covers
that line and the whole statement that starts there (an `if` tagged covers its body).
"""

import ast
import io
import re
import tokenize
from pathlib import Path

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
CODE = re.compile(
    r"torch\.cuda|\bpin_memory\b|\bnon_blocking\b|device\.type\s*[!=]=|\bis_available\(\)|\b(from|import)\s+vllm\b"
)
LITERALS = {"cuda", "nccl"}
TAG = re.compile(r"cuda-path:\s*([a-z0-9-]+)")
SKIP_TOKENS = {tokenize.STRING, tokenize.COMMENT}
SKIP_TOKENS |= {
    getattr(tokenize, n) for n in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END") if hasattr(tokenize, n)
}


def cuda_lines(text: str) -> list[int]:
    """Line numbers of CUDA-only code in a Python source."""
    code: dict[int, str] = {}
    hits: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.STRING and tok.string.strip("\"'rbf") in LITERALS:
            hits.add(tok.start[0])
        if tok.type not in SKIP_TOKENS:
            code[tok.start[0]] = code.get(tok.start[0], "") + " " + tok.string
    return sorted(hits | {n for n, line in code.items() if CODE.search(line.replace(" . ", ".").replace(" .", "."))})


def covered_lines(text: str) -> set[int]:
    """The lines a tag covers: its own, and those of the statement starting there (or on the
    next line, for a tag on a comment line of its own)."""
    ends: dict[int, int] = {}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.stmt):
            ends[node.lineno] = max(ends.get(node.lineno, 0), node.end_lineno or node.lineno)
    lines, out = text.splitlines(), set()
    for n, line in enumerate(lines, 1):
        if TAG.search(line):
            start = n + 1 if line.strip().startswith("#") else n
            out |= {n} | set(range(start, ends.get(start, start) + 1))
    return out


def untagged_and_keys(files: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """(CUDA-only lines without a tag as 'path:line: code', {key: first place tagged})."""
    untagged, keys = [], {}
    for path, text in sorted(files.items()):
        if not (TAG.search(text) or CODE.search(text) or any(f'"{w}"' in text for w in LITERALS)):
            continue  # nothing CUDA-like anywhere in the file: no need to tokenize it
        lines = text.splitlines()
        for n, line in enumerate(lines, 1):
            for key in TAG.findall(line):
                keys.setdefault(key, f"{path}:{n}")
        covered = covered_lines(text)
        untagged += [f"{path}:{n}: {lines[n - 1].strip()}" for n in cuda_lines(text) if n not in covered]
    return untagged, keys


def covered_keys(test_files: dict[str, str]) -> set[str]:
    """The keys named by `pytest.mark.gpu(covers=[...])` anywhere in the tests."""
    out = set()
    for text in test_files.values():
        if ".gpu(" not in text:  # only files that use the mark are parsed
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "gpu":
                for kw in node.keywords:
                    if kw.arg == "covers":
                        out |= {c.value for c in ast.walk(kw.value) if isinstance(c, ast.Constant)}
    return out


def _read(folder: str) -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in (ROOT / folder).rglob("*.py")}


def assert_every_cuda_path_tagged_and_covered(src: dict[str, str], tests: dict[str, str]) -> None:
    untagged, keys = untagged_and_keys(src)
    assert not untagged, "CUDA-only code without a `# cuda-path: KEY` tag:\n" + "\n".join(untagged)
    missing = {k: where for k, where in keys.items() if k not in covered_keys(tests)}
    assert not missing, f"cuda-path keys no `@pytest.mark.gpu(covers=[...])` test names: {missing}"


def test_every_cuda_only_branch_is_tagged_and_run_by_a_gpu_test():
    src, tests = _read("src"), _read("tests")
    assert_every_cuda_path_tagged_and_covered(src, tests)
    _, keys = untagged_and_keys(src)
    assert {"bf16-cuda", "nccl", "vllm", "pinned-copy", "trainer-cuda"} <= set(keys)  # the scan sees the tree


PLANTED = """
import torch

def place(model):
    if torch.cuda.is_available():
        model.cuda()
    return model.to("cuda")
"""


def test_the_scan_catches_a_planted_cuda_branch_and_an_uncovered_key():
    src, tests = _read("src"), _read("tests")
    assert untagged_and_keys({"planted.py": PLANTED})[0] == [
        "planted.py:5: if torch.cuda.is_available():",
        'planted.py:7: return model.to("cuda")',
    ]
    half = PLANTED.replace("available():", "available():  # cuda-path: planted-key")
    assert untagged_and_keys({"planted.py": half})[0] == ['planted.py:7: return model.to("cuda")']
    tagged = half.replace('    return model.to("cuda")', '    # cuda-path: planted-key\n    return model.to("cuda")')
    assert untagged_and_keys({"planted.py": tagged})[0] == []
    try:
        assert_every_cuda_path_tagged_and_covered({**src, "planted.py": tagged}, tests)
    except AssertionError as exc:
        assert "planted-key" in str(exc)
    else:
        raise AssertionError("an uncovered key passed the scan")
    covering = {
        "tests/planted_test.py": "import pytest\n@pytest.mark.gpu(covers=['planted-key'])\ndef test_x(): pass\n"
    }
    assert_every_cuda_path_tagged_and_covered({**src, "planted.py": tagged}, {**tests, **covering})


def test_every_key_is_named_by_a_test_the_gpu_checks_pytest_step_collects(tmp_path):
    """The GPU run executes the keys' tests: bench/gpu/check.py's pytest_gpu step runs `-m gpu`
    over its `gpu_test_files()`, so a key named only in a file outside them would never run there."""
    check = load_script("bench/gpu/check.py", "gpu_check_paths")
    [step] = [s for s in check.steps("gpu", tmp_path, None) if s.name == "pytest_gpu"]
    collected = [a for a in step.argv if a.endswith(".py")]
    assert step.argv[step.argv.index("-m", 1) : step.argv.index("-m", 1) + 2] == ["-m", "gpu"]
    _, keys = untagged_and_keys(_read("src"))
    uncovered = set(keys) - covered_keys({f: Path(f).read_text() for f in collected})
    assert not uncovered, f"keys no test of the GPU check's pytest step names: {uncovered}"
    assert "compile-cuda" in keys and str(ROOT / "tests" / "gpu" / "test_cuda_paths.py") in collected
