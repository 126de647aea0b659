""" "One place" claims as tests: each scans the source tree and fails on a second copy."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tempering"


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
