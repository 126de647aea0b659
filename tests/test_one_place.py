"""Claims of "one place" in the architecture, each checked on the tree and shown to fail on a planted copy."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- bench: where results go


def bench_results_paths(bench: Path) -> list[str]:
    """Bench scripts that build a path ending in a "results" component themselves (`X / "results"`,
    `os.path.join(..., "results", ...)`); only `_shared/paths.py` may."""
    found = []
    for path in sorted(bench.rglob("*.py")):
        if path.relative_to(bench).as_posix() == "_shared/paths.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            parts = []
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                parts = [node.right]
            elif isinstance(node, ast.Call) and ast.unparse(node.func) == "os.path.join":
                parts = node.args
            if any(isinstance(p, ast.Constant) and p.value == "results" for p in parts):
                found.append(f"{path.relative_to(bench)}:{node.lineno}")
    return found


def test_bench_results_folder_is_named_in_one_place():
    assert bench_results_paths(ROOT / "bench") == []
    assert "RESULTS" in (ROOT / "bench" / "_shared" / "paths.py").read_text()


def test_a_bench_script_building_its_own_results_path_is_caught(tmp_path):
    script = tmp_path / "throughput" / "new.py"
    script.parent.mkdir()
    script.write_text('from pathlib import Path\nOUT = Path(__file__).parent / "results" / "new.json"\n')
    other = tmp_path / "experiments" / "old.py"
    other.parent.mkdir()
    other.write_text('import os\nOUT = os.path.join(os.path.dirname(__file__), "results", "old.json")\n')
    assert bench_results_paths(tmp_path) == ["experiments/old.py:2", "throughput/new.py:2"]
