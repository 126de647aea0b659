"""The layer contracts in .importlinter hold, and a forbidden import breaks them."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).parent / "lint-imports"  # import-linter, from the dev extras


def lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    return subprocess.run([str(LINT), "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_the_tree_keeps_every_layer_contract():
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "0 broken" in result.stdout


def test_objectives_importing_train_breaks_the_contract(tmp_path):
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path)
    sft = tmp_path / "src" / "tempering" / "objectives" / "sft.py"
    sft.write_text(sft.read_text() + "\nimport tempering.train  # planted\n")
    result = lint(tmp_path)
    assert result.returncode != 0
    assert "tempering.objectives.sft -> tempering.train" in result.stdout
