"""`temper runs ls|show|prune`, `temper lineage` and `temper release`, on SQLite and on PostgreSQL."""

import json

import pytest
from typer.testing import CliRunner

from tempering.cli import app
from tempering.evals.cache import model_dir_hash
from tempering.evals.suite import load_suite
from tempering.runs.registry import REGISTRY_ENV, Registry, describe_input
from tests.evals.conftest import write_jsonl

runner = CliRunner()
PASSED = {"passed": True, "rules": [{"rule": "arith.accuracy >= base - 0.01", "passed": True, "detail": "ok"}]}
FAILED = {
    "passed": False,
    "rules": [
        {
            "rule": "no significant regression on general",
            "passed": False,
            "detail": "regressed or unchecked: qa -0.12 [-0.2, -0.05] p=0.001",
        }
    ],
}
NON_INFERIOR = {
    "passed": True,
    "rules": [{"rule": "non-inferior on arith within 0.05", "passed": True, "detail": "arith +0.01 [-0.02, 0.04]"}],
}


def run(*args):
    result = runner.invoke(app, [str(a) for a in args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def _json(path, obj):
    path.write_text(json.dumps(obj))
    return path


def _checkpoint(reg, tmp_path, name, inputs, base="smollm2-135m-instruct"):
    run_id = reg.start(name, "sft", {"lr": 1e-3}, inputs, base)
    final = tmp_path / name / "final"
    final.mkdir(parents=True)
    (final / "config.json").write_text("{}")
    (final / "model.safetensors").write_bytes(name.encode())
    reg.record_output(run_id, "final", final)
    reg.finish(run_id, {"final": str(final)}, {"loss": 0.5})
    return run_id, final


def _judged(path, model, verdict=PASSED):
    """`verdict` as `temper eval compare` writes it for `model`: naming its weights and the suite judged."""
    suite = {"suite": "arithmetic-add", "hash": load_suite("arithmetic-add").hash, "source": None, "limit": None}
    candidate = {"model": str(model), "model_hash": model_dir_hash(str(model)), "suites": [suite]}
    return _json(path, {**verdict, "candidate": candidate})


@pytest.fixture
def where(registry_location, monkeypatch):
    """The registry both the data pass (through $TEMPERING_REGISTRY or its run root) and `--registry` name."""
    if "://" in registry_location:
        monkeypatch.setenv(REGISTRY_ENV, registry_location)
    Registry(registry_location).close()
    return registry_location


def test_lineage_shows_data_pass_stage_checkpoint_eval_and_why_not_released(tmp_path, where):
    rows = [
        {"messages": [{"role": "user", "content": f"q{i % 3}"}, {"role": "assistant", "content": "a"}]}
        for i in range(6)
    ]
    raw = write_jsonl(tmp_path / "raw.jsonl", rows)
    kept = tmp_path / "kept.jsonl"
    res = run("data", "dedup", raw, "-o", kept, "--root", tmp_path / "runs")
    assert res.exit_code == 0, res.output
    with Registry(where) as reg:
        run_id, final = _checkpoint(reg, tmp_path, "harmful-lr", [describe_input(kept, "train")])
        reg.record_eval(final, _json(tmp_path / "gate.json", FAILED), gate=FAILED)
    res = run("lineage", final, "--registry", where)
    assert res.exit_code == 0, res.output
    text = res.stdout
    assert f"harmful-lr (sft, {run_id}) finished" in text
    assert f"train      {kept}" in text and "<- dedup-" in text  # the kept rows came from the dedup pass
    assert "dedup" in text and "exact_duplicates=3" in text and f"train      {raw}" in text
    assert "-> final" in text and "gate failed" in text
    assert "FAIL no significant regression on general: regressed or unchecked: qa -0.12" in text
    assert "not released" in text
    res = run("release", "promote", final, "--gate", tmp_path / "gate.json", "--registry", where)
    assert res.exit_code == 2 and "gate did not pass, not released" in res.stderr
    assert "v1" not in run("release", "ls", "--registry", where).stdout


def test_release_promote_rollback_and_canary_decision(tmp_path, where):
    with Registry(where) as reg:
        _, m1 = _checkpoint(reg, tmp_path, "one", [])
        _, m2 = _checkpoint(reg, tmp_path, "two", [])
        _, m3 = _checkpoint(reg, tmp_path, "three", [])
    g1, g2, gate = (_judged(tmp_path / f"gate{i}.json", m) for i, m in enumerate((m1, m2, m3)))
    assert "released v1 as production" in run("release", "promote", m1, "--gate", g1, "--registry", where).stdout
    assert "released v2 as production" in run("release", "promote", m2, "--gate", g2, "--registry", where).stdout
    res = run("release", "rollback", "--registry", where, "--reason", "complaints")
    assert res.exit_code == 0 and f"production is v1 again: {m1}" in res.stdout
    res = run("release", "rollback", "--registry", where)
    assert res.exit_code == 2 and "its first release: nothing to roll back to" in res.stderr
    res = run("release", "promote", m3, "--gate", gate, "--alias", "candidate", "--registry", where)
    assert "released v3 as candidate" in res.stdout
    res = run("release", "decide", "--gate", _json(tmp_path / "canary.json", FAILED), "--registry", where)
    assert res.exit_code == 1 and "v3 rolled back" in res.stdout
    run("release", "promote", m3, "--gate", gate, "--alias", "candidate", "--registry", where)
    res = run("release", "decide", "--gate", _judged(tmp_path / "other.json", m1, NON_INFERIOR), "--registry", where)
    assert res.exit_code == 2 and "not the weights the gate judged" in res.stderr  # another model's canary verdict
    res = run("release", "decide", "--gate", _json(tmp_path / "canary.json", NON_INFERIOR), "--registry", where)
    assert res.exit_code == 2 and "does not name the weights it judged" in res.stderr
    res = run("release", "decide", "--gate", _judged(tmp_path / "canary.json", m3, NON_INFERIOR), "--registry", where)
    assert res.exit_code == 0 and "v4 promoted to production" in res.stdout
    listed = run("release", "ls", "--history", "--registry", where).stdout
    assert "complaints" in listed and "canary-pass" in listed and "canary-fail" in listed
    assert "release v4 production" in run("lineage", m3, "--registry", where).stdout
    with Registry(where) as reg:  # a model input shows the hash its parent run recorded for it
        child = reg.start("child", "grpo", {}, [describe_input(m3, "base_model")], None)
        sha = reg.identify_model(m3)[2]
    assert f"base_model {m3}  sha256 {sha[:12]}  <- three" in run("lineage", child, "--registry", where).stdout


def test_runs_ls_show_and_one_line_errors(tmp_path, where):
    with Registry(where) as reg:
        run_id, final = _checkpoint(reg, tmp_path, "shown", [describe_input(_json(tmp_path / "d.jsonl", {}), "train")])
    listed = run("runs", "ls", "--registry", where).stdout
    assert run_id in listed and "shown" in listed and "finished" in listed
    res = run("runs", "show", "shown", "--registry", where)
    assert res.exit_code == 0 and "train" in res.stdout and "loss" in res.stdout and str(final) in res.stdout
    res = run("runs", "show", "nope", "--registry", where)
    assert res.exit_code == 2 and "no run 'nope'" in res.stderr
    res = run("release", "promote", final, "--gate", _json(tmp_path / "bad.json", {"ok": 1}), "--registry", where)
    assert res.exit_code == 2 and "expected a gate verdict" in res.stderr


def test_unreachable_registry_and_missing_file_are_one_line_errors(tmp_path):
    res = run("runs", "ls", "--registry", "postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=2")
    assert res.exit_code == 2 and "cannot open the registry" in res.stderr and "Traceback" not in res.output
    assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("error:")
    res = run("runs", "ls", "--root", tmp_path / "none")
    assert res.exit_code == 2 and "no registry at" in res.stderr


def test_prune_on_a_shared_registry_removes_only_this_roots_runs(tmp_path, where):
    root, other = tmp_path / "here", tmp_path / "elsewhere"
    with Registry(where) as reg:
        for name, run_root in (("mine", root), ("theirs", other)):
            run_id = reg.start(name, "sft", {}, [], None)
            (run_root / name).mkdir(parents=True)
            reg.record_output(run_id, "run_dir", run_root / name)
            reg.fail(run_id, "boom")
            (run_root / name / "tempering-run.json").unlink()
            (run_root / name).rmdir()
    res = run("runs", "prune", "--root", root, "--registry", where)
    assert res.exit_code == 0 and "removed 1 failed run(s) without a run dir: mine" in res.stdout
    with Registry(where) as reg:
        assert reg.latest("theirs") is not None and reg.latest("mine") is None


def test_lineage_names_where_its_registry_came_from_and_no_flag_that_was_not_passed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with Registry(tmp_path / "elsewhere" / "registry.sqlite") as reg:
        _, final = _checkpoint(reg, tmp_path, "marked", [])
    res = run("lineage", final)  # no --registry: the model's marker names its registry
    assert res.exit_code == 0, res.output
    assert "(the model's run marker)" in res.stderr and "--registry" not in res.stderr, res.stderr
    flagged = run("lineage", final, "--registry", tmp_path / "elsewhere" / "registry.sqlite")
    assert flagged.exit_code == 0 and "(--registry)" in flagged.stderr
