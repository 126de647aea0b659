"""A recipe's components carry typed state: no recipe reads a summary piece back by a string key."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from tempering.recipes.recipe import Components

ROOT = Path(__file__).resolve().parents[2]
SCANNED = [ROOT / "src/tempering/recipes", ROOT / "src/tempering/pipeline", ROOT / "tests/fixtures"]


def extra_key_reads(source: str) -> list[int]:
    """Lines subscripting something named `extra` (a name or an attribute) with a string."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Subscript):
            continue
        target = node.value
        named = (isinstance(target, ast.Name) and target.id == "extra") or (
            isinstance(target, ast.Attribute) and target.attr == "extra"
        )
        key = node.slice
        if named and isinstance(key, ast.Constant) and isinstance(key.value, str):
            lines.append(node.lineno)
    return lines


def test_the_scan_catches_a_string_key_read_of_extra():
    planted = 'def _summary(parts):\n    return parts.extra["monitor"], extra["run_dir"]\n'
    assert extra_key_reads(planted) == [2, 2]
    assert extra_key_reads("def f(parts):\n    return parts.summary(None), extra[0]\n") == []


def test_no_recipe_reads_components_state_by_string_key():
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for folder in SCANNED
        for path in sorted(folder.rglob("*.py"))
        for line in extra_key_reads(path.read_text())
    ]
    assert found == []


def test_components_has_no_untyped_extra_dict():
    names = {f.name for f in dataclasses.fields(Components)}
    assert "extra" not in names
    assert "summary" in names
