"""Eval tasks in training data: a checkpoint's lineage scan and the private-suite guard before training."""

import os
from pathlib import Path

import pytest

from tempering.evals.leakage import (
    PrivateSuiteOverlap,
    check_private_overlap,
    check_private_overlap_tasks,
    contaminated_rows,
    find_run,
    training_lineage,
)
from tempering.evals.suite import read_suite
from tempering.types import Task
from tests.evals.conftest import recall_tasks, record_run, sft_row, write_jsonl, write_suite

EVAL = recall_tasks(30, seed=1)
CLEAN = recall_tasks(20, seed=2, exclude={r["prompt"] for r in EVAL})


def training_file(path: Path, planted: list[int], with_ids: bool = True) -> Path:
    rows = [
        sft_row(r["prompt"], r["verifier"]["answer"], **({"id": f"clean-{i}"} if with_ids else {}))
        for i, r in enumerate(CLEAN)
    ]
    for k, i in enumerate(planted):
        row = sft_row("Please answer. " + EVAL[i]["prompt"] + " ?", EVAL[i]["verifier"]["answer"])
        rows.insert(3 * k + 1, {**row, "id": f"planted-{i}"} if with_ids else row)
    return write_jsonl(path, rows)


@pytest.fixture
def suite(tmp_path):
    return read_suite(write_suite(tmp_path, "recall", write_jsonl(tmp_path / "eval.jsonl", EVAL)))


@pytest.fixture
def two_runs(tmp_path, monkeypatch):
    """runs/sft-a trained on a.jsonl (2 planted rows, no ids) and heldout.jsonl as eval data;
    runs/sft-b continued from sft-a's final on b.jsonl (1 planted row, with ids)."""
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    training_file(project / "data" / "a.jsonl", planted=[0, 4], with_ids=False)
    training_file(project / "data" / "b.jsonl", planted=[7])
    write_jsonl(project / "data" / "heldout.jsonl", [sft_row(r["prompt"], "x") for r in EVAL[10:12]])
    monkeypatch.chdir(project)  # paths recorded relative to where training ran
    runs = project / "runs"
    record_run(runs, "sft-a", ["data/a.jsonl"], "smollm2-135m-instruct", evals=["data/heldout.jsonl"])
    final_b = record_run(runs, "sft-b", ["data/b.jsonl"], "runs/sft-a/final")
    monkeypatch.chdir(tmp_path)
    return project, final_b


def _run_name(model: Path) -> str | None:
    found = find_run(model)
    return found[1]["name"] if found else None


def test_lineage_follows_base_models_and_skips_eval_files(two_runs):
    project, final_b = two_runs
    assert _run_name(final_b) == "sft-b"
    (final_b.parent / "checkpoints" / "step-5").mkdir(parents=True)
    assert _run_name(final_b.parent / "checkpoints" / "step-5") == "sft-b"
    assert find_run(project / "data") is None and find_run("smollm2-135m-instruct") is None
    lineage = training_lineage(final_b)
    assert lineage.runs == ["sft-b", "sft-a"]
    assert [f.name for f in lineage.files] == ["b.jsonl", "a.jsonl"]
    assert not lineage.missing and not lineage.changed


def test_contaminated_rows_are_named_by_id_or_line(two_runs, suite):
    _, final_b = two_runs
    rows = contaminated_rows(training_lineage(final_b).files, [suite]).rows["recall"]
    assert len(rows) == 3
    assert rows[0].endswith("b.jsonl#planted-7")
    assert [r.rsplit("/", 1)[1] for r in rows[1:]] == ["a.jsonl:2", "a.jsonl:5"]


def test_changed_and_missing_inputs_are_reported(two_runs):
    project, final_b = two_runs
    with (project / "data" / "b.jsonl").open("a") as fh:
        fh.write('{"messages": [{"role": "user", "content": "new row"}]}\n')
    os.remove(project / "data" / "a.jsonl")
    lineage = training_lineage(final_b)
    assert lineage.changed == ["data/b.jsonl"] and lineage.missing == ["data/a.jsonl"]
    assert [f.name for f in lineage.files] == ["b.jsonl"]


def test_private_overlap_refused_with_rows_but_no_task_text(tmp_path, suite):
    private = suite.model_copy(update={"private": True})
    planted = training_file(tmp_path / "planted.jsonl", planted=[3])
    clean = training_file(tmp_path / "clean.jsonl", planted=[])
    check_private_overlap([clean], [private])
    check_private_overlap([planted], [suite])  # public suites are not guarded
    with pytest.raises(PrivateSuiteOverlap, match=r"recall: 1 row\(s\).*planted.jsonl#planted-3") as info:
        check_private_overlap([clean, planted], [private])
    assert EVAL[3]["prompt"] not in str(info.value) and EVAL[3]["id"] not in str(info.value)
    tasks = [Task.model_validate(r) for r in CLEAN + EVAL[5:6]]
    with pytest.raises(PrivateSuiteOverlap, match="1 row"):
        check_private_overlap_tasks(tasks, [private])


def test_sft_refuses_a_planted_private_task_before_recording_a_run(tmp_path, monkeypatch):
    from tempering.config import SFTConfig
    from tempering.recipes.sft import run_sft

    suites = tmp_path / "suites"
    suites.mkdir()
    write_suite(suites, "holdout", write_jsonl(suites / "holdout.jsonl", EVAL), private=True)
    monkeypatch.setenv("TEMPERING_SUITES", str(suites))
    planted = training_file(tmp_path / "train.jsonl", planted=[12])
    cfg = SFTConfig.model_validate(
        {"data": {"train": [str(planted)]}, "train": {"steps": 1}, "out": str(tmp_path / "runs")}
    )
    with pytest.raises(PrivateSuiteOverlap, match="holdout"):
        run_sft(cfg)
    assert not (tmp_path / "runs").exists()


def test_lineage_crosses_run_roots_and_exports(tmp_path, monkeypatch):
    """A run in another run root (another registry) trained from this one's export: both files found."""
    from tempering.runs.stage import record_export

    monkeypatch.chdir(tmp_path)
    training_file(tmp_path / "a.jsonl", planted=[1])
    training_file(tmp_path / "b.jsonl", planted=[2])
    final_a = record_run(tmp_path / "runs1", "a", ["a.jsonl"], "smollm2-135m-instruct")
    with record_export(final_a, tmp_path / "merged", {}):
        (tmp_path / "merged").mkdir()
    final_b = record_run(tmp_path / "runs2", "b", ["b.jsonl"], str(tmp_path / "merged"))
    lineage = training_lineage(final_b)
    assert lineage.runs[0] == "b" and lineage.runs[1].startswith("export-a-") and lineage.runs[2] == "a"
    assert [f.name for f in lineage.files] == ["b.jsonl", "a.jsonl"]


def test_training_lineage_reads_the_registry_the_marker_names_on_either_backend(tmp_path, registry_location):
    from tempering.runs.registry import Registry, describe_input

    data = tmp_path / "train.jsonl"
    data.write_text('{"text": "x"}\n')
    final = tmp_path / "final"
    final.mkdir()
    with Registry(registry_location) as reg:
        run_id = reg.start("sft-pg", "sft", {}, [describe_input(data, "train")], "base")
        reg.record_output(run_id, "final", final)
        reg.finish(run_id, {}, {})
    found = find_run(final)
    assert found is not None and found[1]["id"] == run_id
    lineage = training_lineage(final)
    assert lineage.runs == ["sft-pg"] and lineage.files == [data] and not lineage.missing


def _data_pass(*args: object) -> None:
    from typer.testing import CliRunner

    from tempering.cli import app

    result = CliRunner().invoke(app, ["data", *map(str, args)])
    assert result.exit_code == 0, result.output


def test_a_data_pass_upstream_of_the_trained_file_is_not_scanned(tmp_path, monkeypatch, suite):
    """dedup -> decontam -> sft: the leak decontam removed is in the pass's inputs, never in what
    the model read; only the file the training run read (after every filter) counts."""
    monkeypatch.chdir(tmp_path)
    rows = [sft_row(r["prompt"], r["verifier"]["answer"]) for r in CLEAN[:6]]
    leak = sft_row(EVAL[4]["prompt"], EVAL[4]["verifier"]["answer"])
    write_jsonl(tmp_path / "train_all.jsonl", rows[:3] + [leak, rows[0]] + rows[3:])  # a duplicate and a leak
    _data_pass("dedup", "train_all.jsonl", "-o", "train_dedup.jsonl")
    _data_pass("decontam", "train_dedup.jsonl", "--against", tmp_path / "recall.yaml", "-o", "train_clean.jsonl")
    final = record_run(tmp_path / "runs", "sft-clean", ["train_clean.jsonl"], "smollm2-135m-instruct")
    lineage = training_lineage(final)
    assert [f.name for f in lineage.files] == ["train_clean.jsonl"] and lineage.runs == ["sft-clean"]
    assert contaminated_rows(lineage.files, [suite]).rows["recall"] == []

    # a leak decontam did not remove (it checked an older suite without that task) is counted, in
    # the trained file only, by its line there
    (tmp_path / "old").mkdir()
    old = write_suite(tmp_path / "old", "recall", write_jsonl(tmp_path / "old.jsonl", EVAL[5:]))
    _data_pass("decontam", "train_dedup.jsonl", "--against", old, "-o", "train_leaky.jsonl")
    leaky = record_run(tmp_path / "runs", "sft-leaky", ["train_leaky.jsonl"], "smollm2-135m-instruct")
    found = contaminated_rows(training_lineage(leaky).files, [suite]).rows["recall"]
    assert found == [str(tmp_path / "train_leaky.jsonl") + ":4"]


def _with_best(final: Path) -> Path:
    """`final`'s run also kept a `best/` model (train.keep_best), recorded as its output."""
    from tempering.runs.registry import Registry, read_marker

    marker = read_marker(final)
    assert marker is not None
    best = final.parent / "best"
    best.mkdir()
    (best / "config.json").write_text("{}")
    with Registry(marker["registry"]) as registry:
        registry.record_output(marker["run_id"], "best", best)
    return best


def test_every_spelling_of_a_model_has_the_same_lineage(two_runs, suite, monkeypatch):
    """`runs/NAME@best` is `runs/NAME/best`; `@step-40` and `@step-00000040` are the checkpoint dir."""
    project, final_b = two_runs
    monkeypatch.chdir(project)
    _with_best(final_b)
    (final_b.parent / "checkpoints" / "step-00000040").mkdir(parents=True)
    by_path = training_lineage("runs/sft-b/best")
    assert by_path.runs == ["sft-b", "sft-a"] and len(by_path.files) == 2
    spellings = ("@best", "@step-40", "@step-00000040", "@latest", "/checkpoints/step-40")
    for spec in (f"runs/sft-b{s}" for s in spellings):
        lineage = training_lineage(spec)
        assert (lineage.runs, lineage.files) == (by_path.runs, by_path.files), spec
        assert len(contaminated_rows(lineage.files, [suite]).rows["recall"]) == 3, spec
    from typer.testing import CliRunner

    from tempering.cli import app

    shown = [CliRunner().invoke(app, ["lineage", f"runs/sft-b{s}"]) for s in ("/best", *spellings)]
    assert shown[0].exit_code == 0 and "sft-b (sft" in shown[0].stdout and "sft-a (sft" in shown[0].stdout
    assert [(r.exit_code, r.stdout) for r in shown[1:]] == [(0, shown[0].stdout)] * len(spellings)
    # training further from `runs/sft-b@best` links to sft-b as the path would
    final_c = record_run(project / "runs", "sft-c", ["data/heldout.jsonl"], "runs/sft-b@best")
    assert training_lineage(final_c).runs == ["sft-c", "sft-b", "sft-a"]
