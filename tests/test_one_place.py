""" "One place" claims of docs/architecture.md, each a scan of the source tree that fails on a
second copy, and a planted copy showing the scan can fail."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tempering"

# --- engines are built in one place: rollout/select.py (build_engine) ---

ENGINE_CLASSES = {"HFEngine", "BatchingEngine", "SpeculativeEngine", "VLLMEngine"}
ENGINE_BUILDER = "rollout/select.py"
"""The one module that constructs engine classes; every command reaches it via build_engine or load_engine."""


def engine_constructions(source: str) -> list[int]:
    """Lines of `source` that call an engine class (by name, attribute or import alias)."""
    tree = ast.parse(source)
    names = set(ENGINE_CLASSES)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names |= {a.asname for a in node.names if a.name in ENGINE_CLASSES and a.asname}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if called in names:
                lines.append(node.lineno)
    return lines


def engines_built_outside_the_builder(root: Path) -> list[str]:
    return [
        f"{path.relative_to(root)}:{line}"
        for path in sorted(root.rglob("*.py"))
        if path.relative_to(root).as_posix() != ENGINE_BUILDER
        for line in engine_constructions(path.read_text(encoding="utf-8"))
    ]


def test_engines_are_built_only_by_build_engine():
    """No module but rollout/select.py constructs an engine class, so every command that samples
    can run any engine kind (vLLM, speculative) its `engine:` names."""
    assert engines_built_outside_the_builder(SRC) == []
    assert engine_constructions((SRC / ENGINE_BUILDER).read_text(encoding="utf-8"))  # the builder does build


def test_a_planted_engine_construction_is_caught(tmp_path):
    (tmp_path / "rollout").mkdir()
    (tmp_path / ENGINE_BUILDER).write_text("HFEngine(model, tok)\n")
    (tmp_path / "chat.py").write_text(
        '"""HFEngine(model, tok) in a docstring is no construction."""\n'
        "from tempering.rollout.engine import HFEngine as Engine\n"
        "def make(m, t):\n"
        "    return Engine(m, t)\n"
    )
    (tmp_path / "serve.py").write_text("import tempering.rollout.batching_engine as be\nx = be.BatchingEngine(m, t)\n")
    assert engines_built_outside_the_builder(tmp_path) == ["chat.py:4", "serve.py:2"]
