"""`temper run`: validation before any work, content-hashed caching (a hit is bit-identical), resume
after kill -9, and the gate that rejects a harmful stage. Tiny in-process models only: the
"recall" model of tests/evals/conftest.py (a 2-layer Llama that has learned its task)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tempering.cli import app
from tempering.pipeline.runner import RECORD, content_digest
from tempering.runs.registry import Registry
from tests.evals.conftest import env, recall_dir, recall_model, recall_tasks, sft_row, write_jsonl, write_suite  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


def invoke(*args):
    return CliRunner().invoke(app, ["run", *map(str, args)])


def last_json(output: str) -> dict:
    return json.loads([line for line in output.splitlines() if line.startswith("{")][-1])


def write_pipeline(tmp: Path, stages: dict, name: str = "p.yaml", **top) -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump({"out": str(tmp / "runs"), **top, "stages": stages}, sort_keys=False))
    return path


def registry_runs(tmp: Path) -> list[dict]:
    with Registry(tmp / "runs" / "registry.sqlite") as reg:
        return reg.list(limit=1000)


@pytest.fixture
def recall_setup(env, recall_model, recall_dir):
    """A recall suite on 40 held-out tasks and SFT rows of the recall task (disjoint prompts)."""
    _, _, rows = recall_model
    suite = write_suite(env, "recall", write_jsonl(env / "recall.jsonl", rows[:40]))
    train = recall_tasks(32, seed=7, exclude={r["prompt"] for r in rows})
    data = write_jsonl(env / "train.jsonl", [sft_row(r["prompt"], r["verifier"]["answer"]) for r in train])
    return {"model": str(recall_dir), "suite": str(suite), "data": str(data)}


def eval_stage(setup: dict, model: str | None = None) -> dict:
    return {
        "kind": "eval",
        "model": model or setup["model"],
        "suites": [setup["suite"]],
        "threads": 1,
        "precision": "fp32",
    }


def sft_stage(setup: dict, data: str, *, lr: float = 1e-5, steps: int = 2, every: int = 50, lora=None) -> dict:
    return {
        "kind": "sft",
        "model": setup["model"],
        "lora": lora,
        "data": {"train": [data], "max_length": 32, "packing": False, "tool_call_style": "template"},
        "train": {
            "steps": steps,
            "batch_size": 4,
            "precision": "fp32",
            "threads": 1,
            "optim": {"lr": lr, "warmup_steps": 0, "schedule": "constant"},
            "checkpoint": {"every": every, "keep_last": 2},
        },
    }


def gate_stage(rules=("recall.accuracy >= base - 0.15",)) -> dict:
    return {"kind": "gate", "base": "${baseline.results}", "candidate": "${after.results}", "rules": list(rules)}


# ------------------------------------------------------------------ validation before any work
BAD = {
    "unknown kind": ({"a": {"kind": "sfft"}}, ["stage 'a'", "unknown kind 'sfft'"]),
    "unknown key": ({"a": {"kind": "data.dedup", "data": "DATA", "treshold": 0.5}}, ["stage 'a'", "treshold"]),
    "nested unknown key": (
        {"a": {"kind": "sft", "data": {"train": ["DATA"]}, "train": {"steps": 1, "stepz": 2}}},
        ["stage 'a'", "train.stepz"],
    ),
    "missing file": (
        {"a": {"kind": "data.dedup", "data": "nope.jsonl"}},
        ["stage 'a'", "data", "not found", "nope.jsonl"],
    ),
    "later stage": (
        {"a": {"kind": "data.dedup", "data": "${b.data}"}, "b": {"kind": "data.dedup", "data": "DATA"}},
        ["stage 'a'", "data", "${b.data}", "runs later"],
    ),
    "unknown stage": ({"a": {"kind": "data.dedup", "data": "${zz.data}"}}, ["stage 'a'", "${zz.data}", "not a stage"]),
    "unknown output": (
        {"a": {"kind": "data.dedup", "data": "DATA"}, "b": {"kind": "data.dedup", "data": "${a.final}"}},
        ["stage 'b'", "data", "no output 'final'", "data, report"],
    ),
    "owned key": (
        {"a": {"kind": "sft", "out": "elsewhere", "data": {"train": ["DATA"]}, "train": {"steps": 1}}},
        ["stage 'a'", "'out'", "set by the pipeline"],
    ),
    "bad gate rule": (
        {"g": {"kind": "gate", "base": "DATA", "candidate": "DATA", "rules": ["accuracy is fine"]}},
        ["stage 'g'", "rule 1"],
    ),
    "unknown suite": ({"e": {"kind": "eval", "suites": ["no-such-suite"]}}, ["stage 'e'", "no-such-suite"]),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_an_invalid_pipeline_is_one_line_error_and_nothing_runs(tmp_path, case):
    stages, needles = BAD[case]
    data = write_jsonl(tmp_path / "d.jsonl", [sft_row("a b", "c")])
    stages = json.loads(json.dumps(stages).replace('"DATA"', json.dumps(str(data))))
    res = invoke(write_pipeline(tmp_path, stages))
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and isinstance(res.exception, SystemExit)
    line = " ".join(res.output.split())
    assert line.startswith("error:") and "p.yaml" in line
    for needle in needles:
        assert needle in line, (needle, line)
    assert not (tmp_path / "runs").exists()  # validated before any work: not even the run root


def test_a_checkpoint_in_either_spelling_is_a_stage_model(tmp_path):
    """The docs' `step-40` and the folder's `step-00000040` name one checkpoint; `@best` its run's best/."""
    run = tmp_path / "old" / "r"
    (run / "checkpoints" / "step-00000040").mkdir(parents=True)
    (run / "best").mkdir()
    for i, spec in enumerate(
        ["./old/r@step-40", "./old/r@step-00000040", "./old/r/checkpoints/step-40", "old/r@best", "old/r@latest"]
    ):
        stages = {"e": {"kind": "eval", "model": spec, "suites": ["arithmetic-add"]}}
        res = invoke(write_pipeline(tmp_path, stages, f"p{i}.yaml"), "--dry-run")
        assert res.exit_code == 0, (spec, res.output)
    bad = invoke(write_pipeline(tmp_path, {"e": {"kind": "eval", "model": "./old/r@step-41"}}), "--dry-run")
    line = " ".join(bad.output.split())
    assert bad.exit_code == 2 and "stage 'e'" in line and "no checkpoint at step 41" in line, line
    assert "steps kept: 40" in line


def test_the_example_pipeline_validates(tmp_path):
    res = invoke(ROOT / "examples" / "pipeline.yaml", "--dry-run", "--out", tmp_path / "runs")
    assert res.exit_code == 0, res.output
    assert "runs" in res.output and "after synth" in res.output  # sft's hash needs synth's output bytes


# ------------------------------------------------------------------ caching
def test_stages_are_cached_by_content_and_a_forced_recompute_is_bit_identical(tmp_path, recall_setup):
    stages = {
        "clean": {"kind": "data.dedup", "data": recall_setup["data"]},
        "sft": sft_stage(recall_setup, "${clean.data}", steps=3),
        "after": eval_stage(recall_setup, "${sft.final}"),
    }
    path = write_pipeline(tmp_path, stages)
    first = invoke(path)
    assert first.exit_code == 0, first.output
    out1 = last_json(first.output)["stages"]
    assert [s["status"] for s in out1.values()] == ["done", "done", "done"]
    final = Path(out1["sft"]["outputs"]["final"])
    digest = content_digest(final)
    mtimes = {p: p.stat().st_mtime_ns for s in out1.values() for p in Path(s["run_dir"]).rglob("*") if p.is_file()}
    runs_before = len(registry_runs(tmp_path))

    again = invoke(path, "--dry-run")
    assert again.output.count("│ cached ") == 3, again.output
    second = invoke(path)
    assert second.exit_code == 0, second.output
    out2 = last_json(second.output)["stages"]
    assert [s["status"] for s in out2.values()] == ["cached", "cached", "cached"]
    assert {k: s["hash"] for k, s in out2.items()} == {k: s["hash"] for k, s in out1.items()}
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes  # nothing rewritten
    assert len(registry_runs(tmp_path)) == runs_before + 1  # only the pipeline's own record

    # the cached output is what a recompute produces, bit for bit; so the stage below stays cached
    forced = invoke(path, "--force-stage", "sft")
    assert forced.exit_code == 0, forced.output
    out3 = last_json(forced.output)["stages"]
    assert [s["status"] for s in out3.values()] == ["cached", "done", "cached"]
    assert content_digest(final) == digest
    assert json.loads((Path(out3["sft"]["run_dir"]) / RECORD).read_text())["outputs"]["final"]["sha256"] == digest

    # a changed input byte is a new hash for its stage and those below; the rest stays cached
    Path(recall_setup["data"]).write_text(
        Path(recall_setup["data"]).read_text() + json.dumps(sft_row("recall 9 9 9", "9")) + "\n"
    )
    changed = last_json(invoke(path).output)["stages"]
    assert [s["status"] for s in changed.values()] == ["done", "done", "done"]
    assert changed["clean"]["hash"] != out1["clean"]["hash"]
    assert Path(out1["sft"]["run_dir"]).is_dir()  # the old version stays: switching back is a cache hit


def test_unknown_force_stage_is_an_error(tmp_path, recall_setup):
    path = write_pipeline(tmp_path, {"clean": {"kind": "data.dedup", "data": recall_setup["data"]}})
    res = invoke(path, "--force-stage", "nope")
    assert res.exit_code == 2 and "--force-stage nope" in " ".join(res.output.split())


# ------------------------------------------------------------------ the gate
@pytest.mark.parametrize("lr, expected", [(1e-5, "passed"), (3.0, "rejected")], ids=["sane", "harmful"])
def test_the_gate_rejects_a_harmful_sft_and_it_is_not_released(tmp_path, recall_setup, lr, expected):
    from tempering.runs.releases import Releases

    stages = {
        "baseline": eval_stage(recall_setup),
        "sft": sft_stage(recall_setup, recall_setup["data"], lr=lr, steps=4),
        "after": eval_stage(recall_setup, "${sft.final}"),
        "gate": gate_stage(),
        "ship": {"kind": "release", "model": "${sft.final}", "gate": "${gate.verdict}"},
    }
    res = invoke(write_pipeline(tmp_path, stages))
    out = last_json(res.output)
    assert out["status"] == expected, res.output
    acc = {}
    for name in ("baseline", "after"):
        results = json.loads(Path(out["stages"][name]["outputs"]["results"]).read_text())
        acc[name] = next(s for s in results["suites"] if s["suite"] == "recall")["metrics"]["accuracy"]["mean"]
    runs = {r["kind"]: r for r in registry_runs(tmp_path)}
    gate = runs["gate"]
    assert gate["status"] == "finished" and gate["metrics"]["verdict"] == expected
    assert runs["pipeline"]["metrics"]["status"] == expected
    final = out["stages"]["sft"]["outputs"]["final"]
    with Registry(tmp_path / "runs" / "registry.sqlite") as reg:
        production = Releases(reg).current("production")
        gated = [e for e in reg.evals(run_id=runs["sft"]["id"]) if e["gate"] is not None]
    assert len(gated) == 1 and gated[0]["gate"]["passed"] == (expected == "passed")  # the verdict is on the record
    why = CliRunner().invoke(app, ["lineage", final, "--root", str(tmp_path / "runs")])
    assert why.exit_code == 0, why.output
    if expected == "rejected":
        assert res.exit_code == 1, res.output
        assert acc["after"] < acc["baseline"] - 0.15, acc  # the harm is real, measured by the same suite
        assert gate["metrics"]["failed_rules"] == ["recall.accuracy >= base - 0.15"]
        assert out["stages"]["ship"]["status"] == "skipped" and "release" not in runs and production is None
        assert "not released" in why.output and "recall.accuracy >= base - 0.15" in " ".join(why.output.split())
        assert runs["pipeline"]["metrics"]["gates"]["gate"]["verdict"] == "rejected"
        rerun = invoke(write_pipeline(tmp_path, stages))  # a rejected verdict is cached, and still rejects
        assert rerun.exit_code == 1 and last_json(rerun.output)["stages"]["gate"]["status"] == "rejected"
    else:
        assert res.exit_code == 0, res.output
        assert out["stages"]["ship"]["status"] == "done"
        assert production is not None and Path(production.model) == Path(final).resolve()
        assert f"release v{production.version} production" in why.output
        again = invoke(write_pipeline(tmp_path, stages))  # cached: no second promotion
        with Registry(tmp_path / "runs" / "registry.sqlite") as reg:
            assert again.exit_code == 0 and len(Releases(reg).list()) == 1


# ------------------------------------------------------------------ kill -9
def test_a_pipeline_killed_with_sigkill_resumes_without_redoing_finished_stages(tmp_path, recall_setup):
    stages = {
        "baseline": eval_stage(recall_setup),
        "sft": sft_stage(recall_setup, recall_setup["data"], steps=600, every=25, lr=1e-4),
    }
    path = write_pipeline(tmp_path, stages)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "tempering.cli", "run", str(path)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    runs = tmp_path / "runs"
    try:
        deadline = time.monotonic() + 300
        while not [p for p in runs.glob("sft-*/checkpoints/step-*") if p.name != "step-00000000"]:
            assert proc.poll() is None, "the pipeline ended before it could be killed"
            assert time.monotonic() < deadline, "no checkpoint appeared"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    sft_dir = next(runs.glob("sft-*"))
    assert json.loads((sft_dir / RECORD).read_text())["status"] == "running"
    assert not (sft_dir / "summary.json").exists()  # killed mid-stage
    baseline = next(runs.glob("baseline-*")) / "results.json"
    stamp = baseline.stat().st_mtime_ns

    res = invoke(path)
    assert res.exit_code == 0, res.output
    out = last_json(res.output)["stages"]
    assert out["baseline"]["status"] == "cached" and baseline.stat().st_mtime_ns == stamp
    assert out["sft"]["status"] == "done" and Path(out["sft"]["run_dir"]) == sft_dir
    summary = json.loads((sft_dir / "summary.json").read_text())
    assert summary["steps"] == 600 and summary["resumed_from"] >= 25  # resumed, not restarted
    by_name = {}
    for r in registry_runs(tmp_path):
        by_name.setdefault(r["name"].split("-")[0], []).append(r["status"])
    assert by_name["baseline"] == ["finished"]  # the first stage was not recomputed
    assert sorted(by_name["sft"]) == ["finished", "resumed"]  # the killed attempt is the same run, resumed


def test_an_interrupted_stage_that_cannot_resume_restarts_in_a_clean_dir(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", [sft_row(f"q {i}", "a") for i in range(5)] + [sft_row("q 1", "a")])
    path = write_pipeline(tmp_path, {"clean": {"kind": "data.dedup", "data": str(data)}})
    first = last_json(invoke(path).output)["stages"]["clean"]
    run_dir = Path(first["run_dir"])
    kept = Path(first["outputs"]["data"]).read_bytes()
    # what kill -9 leaves mid-stage: the record says running, a half-written file, a registry row running
    record = json.loads((run_dir / RECORD).read_text())
    (run_dir / RECORD).write_text(json.dumps({**record, "status": "running", "outputs": {}}))
    (run_dir / "data.jsonl").write_text('{"half": ')
    with Registry(tmp_path / "runs" / "registry.sqlite") as reg:
        reg.start(run_dir.name, "dedup", {}, [], None)
    res = invoke(path)
    assert res.exit_code == 0, res.output
    again = last_json(res.output)["stages"]["clean"]
    assert again["status"] == "done" and again["hash"] == first["hash"]
    assert Path(again["outputs"]["data"]).read_bytes() == kept  # rewritten whole, same bytes as before
    statuses = [r["status"] for r in registry_runs(tmp_path) if r["name"] == run_dir.name]
    assert sorted(statuses) == ["failed", "finished", "finished"]
    with Registry(tmp_path / "runs" / "registry.sqlite") as reg:
        failed = [r for r in reg.list(limit=100) if r["name"] == run_dir.name and r["status"] == "failed"]
    assert "interrupted" in failed[0]["error"]


# ------------------------------------------------------------------ merge as a stage
def test_two_tracks_merge_as_a_stage_with_lineage_through_both(tmp_path, recall_setup):
    lora = {"r": 4, "alpha": 8}
    stages = {
        "track_a": sft_stage(recall_setup, recall_setup["data"], steps=2, lora=lora),
        "track_b": sft_stage(recall_setup, recall_setup["data"], steps=3, lora=lora),
        "merged": {
            "kind": "merge",
            "inputs": ["${track_a.final}", "${track_b.final}"],
            "method": "cat",
            "weights": [0.5, 0.5],
        },
    }
    res = invoke(write_pipeline(tmp_path, stages))
    out = last_json(res.output)
    assert res.exit_code == 0 and out["stages"]["merged"]["status"] == "done", res.output
    final = Path(out["stages"]["merged"]["outputs"]["final"])
    assert (final / "adapter_config.json").is_file()
    runs = {r["name"]: r for r in registry_runs(tmp_path)}
    merge_run = next(r for r in runs.values() if r["kind"] == "merge")
    with Registry(tmp_path / "runs" / "registry.sqlite") as reg:
        parents = {row.parent_run for row in reg.lineage(merge_run["id"]) if row.parent_run}
    sft_ids = {r["id"] for r in runs.values() if r["kind"] == "sft"}
    assert sft_ids and sft_ids <= parents  # lineage reaches both tracks' training runs
    again = invoke(write_pipeline(tmp_path, stages))
    assert again.exit_code == 0 and last_json(again.output)["stages"]["merged"]["status"] == "cached"


def test_an_export_stage_merges_the_adapter_and_lineage_reaches_its_training(tmp_path, recall_setup):
    stages = {
        "sft": sft_stage(recall_setup, recall_setup["data"], steps=2, lora={"r": 4, "alpha": 8}),
        "export": {"kind": "export", "model": "${sft.final}"},
        "after": eval_stage(recall_setup, "${export.final}"),
    }
    res = invoke(write_pipeline(tmp_path, stages))
    out = last_json(res.output)
    assert res.exit_code == 0, res.output
    model = Path(out["stages"]["export"]["outputs"]["final"])
    assert (model / "config.json").is_file() and not (model / "adapter_config.json").exists()  # standalone
    runs = {r["kind"]: r for r in registry_runs(tmp_path)}
    with Registry(tmp_path / "runs" / "registry.sqlite") as reg:
        parents = {row.parent_run for row in reg.lineage(runs["export"]["id"]) if row.parent_run}
    assert runs["sft"]["id"] in parents
    bad = invoke(write_pipeline(tmp_path, {"export": {"kind": "export", "model": recall_setup["model"]}}, "bad.yaml"))
    assert bad.exit_code == 3 and "not a PEFT adapter directory" in " ".join(bad.output.split())
