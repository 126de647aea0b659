"""The README's generated figures are the measured ones: each block equals what
tools/readme_figures.py renders from its results file."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("readme_figures", ROOT / "tools" / "readme_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_blocks_are_rendered_from_their_results():
    tool = _tool()
    text = (ROOT / "README.md").read_text()
    assert tool.render(text) == text, "stale: run python tools/readme_figures.py"


def test_a_changed_result_makes_the_block_stale(tmp_path, monkeypatch):
    tool = _tool()
    result = json.loads((ROOT / "bench" / "results" / "demo_precision.json").read_text())
    result["fp32"]["strict"]["mean"] += 0.5
    changed = tmp_path / "demo_precision.json"
    changed.write_text(json.dumps(result))
    monkeypatch.setitem(tool.BLOCKS, "demo-precision", (changed, tool.demo_precision))
    text = (ROOT / "README.md").read_text()
    assert tool.render(text) != text
    with pytest.raises(SystemExit, match="no <!-- demo-precision -->"):
        tool.render("a README without the block")
