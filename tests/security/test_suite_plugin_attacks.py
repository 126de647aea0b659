"""Attacks on an eval suite's `plugins` door (a suite YAML names modules that register verifiers).

The rules are `grpo.plugins`' rules: only the suite file (the operator's config) names code, as
module names on the path, never file paths; a task row cannot make anything import; a plug-in
cannot take over a verifier name another function holds (a built-in judge, say `code`).
Each bait module writes a marker file when imported, so "nothing ran" is checked, not assumed.
"""

import json
from pathlib import Path

import pytest

from tempering.evals.suite import SuiteError, read_suite
from tempering.verifiers.base import VERIFIERS

BAIT = """
from pathlib import Path
Path({marker!r}).write_text("imported")
{body}
"""


@pytest.fixture
def bait(tmp_path, monkeypatch):
    """`bait(name, body)`: a module `name` on the path that leaves a marker when imported."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(name: str, body: str = "") -> Path:
        marker = tmp_path / f"{name}.imported"
        (tmp_path / f"{name}.py").write_text(BAIT.format(marker=str(marker), body=body))
        return marker

    return write


def suite_file(tmp_path: Path, rows: list[dict], **fields) -> Path:
    import yaml

    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = tmp_path / "attacked.yaml"
    path.write_text(yaml.safe_dump({"name": "attacked", "tasks": {"source": "tasks.jsonl"}, **fields}))
    return path


def test_a_task_row_cannot_make_a_suite_import_a_module(tmp_path, bait):
    marker = bait("row_bait")
    rows = [{"id": "a", "prompt": "hi", "verifier": {"type": "row_bait", "plugins": ["row_bait"]}}]
    with pytest.raises(SuiteError, match="unknown verifier type 'row_bait'") as info:
        read_suite(suite_file(tmp_path, rows)).task_list  # noqa: B018
    assert "\n" not in str(info.value) and not marker.exists()
    rows = [{"id": "a", "prompt": "hi", "plugins": ["row_bait"], "verifier": {"type": "exact", "answer": "x"}}]
    with pytest.raises(SuiteError):  # a task row has no such field
        read_suite(suite_file(tmp_path, rows)).task_list  # noqa: B018
    assert not marker.exists()


@pytest.mark.parametrize("name", ["../path_bait", "/tmp/path_bait.py", "path_bait.py", "path bait", ""])
def test_a_suite_plugin_is_a_module_name_never_a_path(tmp_path, bait, name):
    marker = bait("path_bait")
    rows = [{"id": "a", "prompt": "hi", "verifier": {"type": "exact", "answer": "x"}}]
    with pytest.raises(SuiteError, match="is not a module name"):
        read_suite(suite_file(tmp_path, rows, plugins=[name]))
    assert not marker.exists()


def test_a_plugin_cannot_take_over_a_builtin_verifier(tmp_path, bait):
    builtin = VERIFIERS["code"]
    body = (
        "from tempering.types import Reward\nfrom tempering.verifiers import register\n\n"
        "@register('code')\ndef always_right(spec, completion, ctx):\n    return Reward(value=1.0)\n"
    )
    marker = bait("takeover_bait", body)
    rows = [{"id": "a", "prompt": "hi", "verifier": {"type": "exact", "answer": "x"}}]
    with pytest.raises(SuiteError, match=r"verifier 'code' is already registered \(to tempering\.verifiers\.code\."):
        read_suite(suite_file(tmp_path, rows, plugins=["takeover_bait"])).task_list  # noqa: B018
    assert marker.exists() and VERIFIERS["code"] is builtin  # it ran (it was named), and took nothing


def test_a_plugin_that_does_not_import_is_one_line_naming_it(tmp_path, bait):
    bait("broken_bait", "raise RuntimeError('no database here')")
    rows = [{"id": "a", "prompt": "hi", "verifier": {"type": "exact", "answer": "x"}}]
    with pytest.raises(SuiteError) as info:
        read_suite(suite_file(tmp_path, rows, plugins=["broken_bait"])).task_list  # noqa: B018
    message = str(info.value)
    assert "\n" not in message and "plugin module 'broken_bait' does not import" in message
    assert "RuntimeError: no database here" in message
