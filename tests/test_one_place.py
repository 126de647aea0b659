"""Claims of "one place" in docs/architecture.md, each a scan of the tree that fails on a second
copy, and a planted copy showing the scan can fail."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tempering"

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


# -- GRPO batches are built in one place: rollout/grpo_batches.py --------------------------------
GRPO_BUILDER = "rollout/grpo_batches.py"


def grpo_batch_builders(src: Path) -> set[str]:
    """Modules that construct a `GRPOBatch(...)` or fill a GRPO batch's `engine_logprobs`/`old_logprobs`
    tensors by index (a second copy of the tensor building)."""
    found = set()
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            builds = isinstance(node, ast.Call) and getattr(node.func, "id", None) == "GRPOBatch"
            indexed = (
                isinstance(node, ast.Subscript)
                and isinstance(node.ctx, ast.Store)
                and getattr(node.value, "id", None) in ("engine_logprobs", "old_logprobs")
            )
            if builds or indexed:
                found.add(path.relative_to(src).as_posix())
    return found


def test_grpo_batches_are_built_in_one_place_for_single_and_multi_turn():
    assert grpo_batch_builders(SRC) == {GRPO_BUILDER}


def test_a_second_grpo_batch_builder_is_found(tmp_path):
    src = tmp_path / "tempering"
    (src / "rollout").mkdir(parents=True)
    (src / "agents").mkdir()
    (src / GRPO_BUILDER).write_text((SRC / GRPO_BUILDER).read_text())
    (src / "agents" / "training.py").write_text(
        "import torch\n"
        "def tensors(trajs, width):\n"
        "    engine_logprobs = torch.zeros((len(trajs), width))\n"
        "    for i, t in enumerate(trajs):\n"
        "        engine_logprobs[i, : len(t.completion_ids)] = torch.tensor(t.completion_logprobs)\n"
        "    return engine_logprobs\n"
    )
    assert grpo_batch_builders(src) == {GRPO_BUILDER, "agents/training.py"}
    (src / "agents" / "training.py").write_text("def build(**k):\n    return GRPOBatch(**k)\n")
    assert grpo_batch_builders(src) == {GRPO_BUILDER, "agents/training.py"}
