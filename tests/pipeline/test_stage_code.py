"""A stage's cache key holds the code it runs (`pipeline/fingerprint.py`), not every byte of the
package: a docstring in `serve/` leaves a cached SFT stage cached, an edit to the SFT objective's
code reruns it. Edits are made to a copy of the package that the fingerprint reads, never to the
real source."""

import shutil
from pathlib import Path

import pytest

from tempering.pipeline import fingerprint
from tempering.pipeline.fingerprint import code_digest, stage_code
from tempering.pipeline.stages import stage_kinds
from tempering.pyast import parse_module
from tests.evals.conftest import env, recall_dir, recall_model, recall_tasks, sft_row, write_jsonl, write_suite  # noqa: F401
from tests.recipes.test_loop import invoke, last_json, recall_setup, sft_stage, write_pipeline  # noqa: F401

SRC = Path(fingerprint.__file__).resolve().parents[1]


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A copy of `tempering` that the fingerprint reads in place of the real one."""
    copy = tmp_path / "pkg" / "tempering"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    real = fingerprint.package_dir
    monkeypatch.setattr(fingerprint, "package_dir", lambda top: copy if top == "tempering" else real(top))
    return copy


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


SFT_DOC = "Supervised fine-tuning: next-token cross-entropy on assistant tokens only."
SFT_ANCHOR = "from tempering.types import IGNORE\n"
SERVE_DOC = "The FastAPI app of `temper serve`"


def sft_code() -> dict:
    return stage_code(stage_kinds()["sft"].code_entries())


def test_the_sft_stage_runs_its_objective_and_not_serve(package):
    code = sft_code()
    assert {"tempering.recipes.sft", "tempering.objectives.sft", "tempering.train.trainer"} <= set(code["modules"])
    assert not [m for m in code["modules"] if m.startswith("tempering.serve")]
    assert {"python", "torch", "transformers"} <= set(code["libraries"])
    assert "evals/suites/arithmetic.yaml" in code["data"]  # built-in suites: the recipe's evals read them


def test_docstrings_and_comments_do_not_count_code_does(package):
    before = sft_code()
    edit(package / "serve" / "app.py", SERVE_DOC, "The app, reworded")
    edit(package / "serve" / "app.py", "from __future__", "x = 1\nfrom __future__")  # serve's code: not run
    edit(package / "objectives" / "sft.py", SFT_DOC, "SFT, said differently.")
    edit(package / "objectives" / "sft.py", "\nimport torch\n", "\n# a comment\nimport torch  # and another\n")
    assert sft_code() == before
    edit(package / "objectives" / "sft.py", SFT_ANCHOR, SFT_ANCHOR + "\nSCALE = 2\n")
    after = sft_code()
    changed = {m for m in before["modules"] if before["modules"][m] != after["modules"][m]}
    assert changed == {"tempering.objectives.sft"}


def test_a_stage_function_counts_what_it_names_not_its_neighbours(package):
    dedup = stage_kinds()["data.dedup"].code_entries()
    assert dedup == [("tempering.pipeline.stages", "_dedup")]
    before = stage_code(dedup)
    edit(package / "pipeline" / "stages.py", "rules = gate_rules(cfg, ctx.name)", "rules = gate_rules(cfg, ctx.root)")
    assert stage_code(dedup) == before  # the gate's function changed; dedup does not call it
    edit(package / "pipeline" / "stages.py", 'out = ctx.run_dir / "data.jsonl"', 'out = ctx.run_dir / "d.jsonl"')
    assert stage_code(dedup)["entries"] != before["entries"]  # `_data_pass`, which `_dedup` calls


def test_modules_named_by_string_are_followed():
    """GRPO's policy losses are imported by name (`algorithms.BUILTIN_MODULES`)."""
    assert "tempering.objectives.policy_losses" in stage_code([("tempering.algorithms", None)])["modules"]


def test_a_bare_string_statement_is_no_code():
    with_docs = parse_module('"""m"""\nclass A:\n    """a"""\n    x: int = 1\n    """x"""\ndef f():\n    "f"\n')
    without = parse_module("class A:\n    x: int = 1\ndef f():\n    pass\n")
    assert code_digest(with_docs) == code_digest(without)
    assert code_digest(parse_module("x = 'a'\n")) != code_digest(parse_module("x = 'b'\n"))


def test_a_cached_sft_stage_stays_cached_until_its_objective_changes(tmp_path, package, recall_setup):
    path = write_pipeline(tmp_path, {"sft": sft_stage(recall_setup, recall_setup["data"], steps=2)})
    first = last_json(invoke(path).output)["stages"]["sft"]
    assert first["status"] == "done"
    edit(package / "serve" / "app.py", SERVE_DOC, "The app, reworded")
    edit(package / "objectives" / "sft.py", SFT_DOC, "SFT, said differently.")
    again = last_json(invoke(path).output)["stages"]["sft"]
    assert (again["status"], again["hash"]) == ("cached", first["hash"])
    edit(package / "objectives" / "sft.py", SFT_ANCHOR, SFT_ANCHOR + "\nSCALE = 2\n")
    rerun = invoke(path)
    changed = last_json(rerun.output)["stages"]["sft"]
    assert changed["status"] == "done" and changed["hash"] != first["hash"], rerun.output


def test_a_plugin_module_a_stage_config_names_is_part_of_its_code(tmp_path, monkeypatch):
    from tempering.pipeline.plan import load_plan
    from tempering.pipeline.runner import dry_run

    plugin = tmp_path / "lib" / "stage_code_plugin.py"
    plugin.parent.mkdir()
    plugin.write_text('"""A plug-in."""\n\n\ndef scale(x):\n    return 2 * x\n')
    monkeypatch.syspath_prepend(str(plugin.parent))
    stage = {
        "kind": "grpo",
        "model": "smollm2-135m-instruct",
        "tasks": {"source": "builtin:arithmetic", "n": 8},
        "grpo": {"plugins": ["stage_code_plugin"]},
        "train": {"steps": 1},
    }
    path = write_pipeline(tmp_path, {"rl": stage})
    before = dry_run(load_plan(path))[0]["hash"]
    plugin.write_text('"""Said otherwise."""\n\n\ndef scale(x):\n    # twice\n    return 2 * x\n')
    assert dry_run(load_plan(path))[0]["hash"] == before
    plugin.write_text('"""A plug-in."""\n\n\ndef scale(x):\n    return 3 * x\n')
    assert dry_run(load_plan(path))[0]["hash"] != before
