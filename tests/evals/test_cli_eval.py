"""`temper eval run / compare` and the gate's two acceptance checks:
a noised checkpoint is flagged as a significant regression, and a checkpoint compared with
itself under other seeds raises a false alarm in at most 5% of null comparisons."""

import json

import pytest
import yaml
from typer.testing import CliRunner

from tempering.cli.eval import eval_app
from tempering.evals.gate import parse_rules, run_gate
from tempering.evals.results import EvalResults, compare
from tempering.evals.runner import run_suite
from tempering.evals.suite import read_suite
from tempering.rollout.engine import HFEngine
from tests.evals.conftest import degrade, degrade_until, record_run, sft_row, write_jsonl

DEGRADED_AT_MOST = 0.85  # greedy answer accuracy of the degraded checkpoint (the base is ~0.99)
NULL_NOISE = 0.7  # a noisier copy for the null comparisons: ~45% accuracy, so seeds change outcomes
GATE = ["no significant regression on reasoning", "recall.accuracy >= base - 0.05", "contamination == 0"]
runner = CliRunner()


@pytest.fixture
def gate_file(env):
    path = env / "gate.yaml"
    path.write_text(yaml.safe_dump({"rules": GATE}))
    return path


@pytest.fixture(scope="module")
def degraded_dir(recall_model, tmp_path_factory):
    model, tok, _ = recall_model
    path = tmp_path_factory.mktemp("degraded")
    _, _, rows = recall_model
    noisy, _, _ = degrade_until(model, tok, rows, DEGRADED_AT_MOST)
    noisy.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def invoke(app, args):
    result = runner.invoke(app, [str(a) for a in args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def test_eval_run_writes_results_report_and_table_then_hits_the_cache(recall_dir, suite_file, env):
    out = env / "eval"
    first = invoke(eval_app, ["run", suite_file, "--model", recall_dir, "--out", out, "--seeds", 2, "--threads", 1])
    assert first.exit_code == 0, first.output
    assert "accuracy" in first.output and "pass@2" in first.output
    results = EvalResults.load(out / "results.json")
    suite = results.suite("recall")
    assert suite.metrics["accuracy"].mean > 0.9 and len(suite.metrics["accuracy"].per_seed) == 2
    assert suite.model_hash and suite.stability is not None and suite.paraphrase is not None
    assert "<h1>Eval report" in (out / "report.html").read_text()
    again = invoke(eval_app, ["run", suite_file, "--model", recall_dir, "--out", env / "again", "--seeds", 2])
    assert "cached result" in again.output
    assert EvalResults.load(env / "again" / "results.json").suites == results.suites


def test_degraded_checkpoint_is_a_significant_regression_and_fails_the_gate(
    recall_dir, degraded_dir, suite_file, gate_file, env
):
    for name, model, first_seed in (("base", recall_dir, 0), ("self", recall_dir, 7), ("noised", degraded_dir, 0)):
        result = invoke(
            eval_app,
            ["run", suite_file, "--model", model, "--out", env / name, "--seeds", 2, "--first-seed", first_seed],
        )
        assert result.exit_code == 0, result.output
    same = invoke(eval_app, ["compare", env / "base", env / "self", "--gate", gate_file])
    assert same.exit_code == 0 and "gate passed" in same.output, same.output
    worse = invoke(eval_app, ["compare", env / "base", env / "noised", "--gate", gate_file, "--out", env / "cmp"])
    assert worse.exit_code == 1 and "gate failed" in worse.output, worse.output
    verdict = json.loads((env / "cmp" / "gate.json").read_text())
    assert [r["passed"] for r in verdict["rules"]] == [False, False, True]
    (c,) = compare(EvalResults.load(env / "base" / "results.json"), EvalResults.load(env / "noised" / "results.json"))
    print(
        f"\nnoised checkpoint: accuracy {c.base_mean:.3f} -> {c.candidate_mean:.3f}, delta {c.comparison.delta:+.3f} "
        f"[{c.comparison.low:+.3f}, {c.comparison.high:+.3f}] p={c.comparison.p_value:.3g}"
    )
    assert c.comparison.significant and c.comparison.high < 0
    assert "sig" in worse.output and (env / "cmp" / "report.html").is_file()


def test_null_comparisons_raise_at_most_five_percent_false_alarms(recall_model, suite_file):
    """200 disjoint pairs of runs of one checkpoint under different seeds (T=1, ~45% accuracy)."""
    model, tok, _ = recall_model
    engine = HFEngine(degrade(model, NULL_NOISE), tok, precision="fp32")
    suite = read_suite(suite_file).model_copy(update={"templates": ["{prompt}"]})
    runs = [
        EvalResults(model=f"seed-{s}", suites=[run_suite(suite, engine, seeds=1, first_seed=s)]) for s in range(400)
    ]
    rules = parse_rules(["no significant regression on reasoning"])
    alarms = [not run_gate(rules, runs[i], runs[i + 1]).passed for i in range(0, 400, 2)]
    either_way = [compare(runs[i], runs[i + 1])[0].comparison.significant for i in range(0, 400, 2)]
    accuracy = sum(r.suites[0].metrics["accuracy"].mean for r in runs) / len(runs)
    print(
        f"\nnull comparisons: {sum(alarms)}/{len(alarms)} gate false alarms, {sum(either_way)}/{len(either_way)} "
        f"significant either way (mean accuracy {accuracy:.3f})"
    )
    assert 0.3 < accuracy < 0.9  # outcomes really vary between seeds
    assert sum(alarms) / len(alarms) <= 0.05


def test_contaminated_lineage_is_reported_and_fails_the_gate(
    recall_model, recall_dir, suite_file, gate_file, env, monkeypatch
):
    import shutil

    _, _, rows = recall_model
    project = env / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    write_jsonl(
        project / "train.jsonl",
        [
            sft_row("recall 0 0 1", "0", id="clean-1"),
            sft_row(rows[5]["prompt"], rows[5]["verifier"]["answer"], id="leak-5"),
        ],
    )
    final = record_run(project / "runs", "sft-leak", ["train.jsonl"], "smollm2-135m-instruct")
    shutil.copytree(recall_dir, final, dirs_exist_ok=True)  # the trained weights; the run's marker stays
    result = invoke(eval_app, ["run", suite_file, "--model", final, "--out", env / "leaky"])
    assert result.exit_code == 0 and "1 contaminated row" in result.output, result.output
    suite = EvalResults.load(env / "leaky" / "results.json").suite("recall")
    assert suite.contamination_hits == 1 and suite.contaminated_rows[0].endswith("train.jsonl#leak-5")
    assert "train.jsonl#leak-5" in (env / "leaky" / "report.html").read_text()
    invoke(eval_app, ["run", suite_file, "--model", recall_dir, "--out", env / "clean"])
    gated = invoke(eval_app, ["compare", env / "clean", env / "leaky", "--gate", gate_file])
    assert gated.exit_code == 1 and "1 contaminated training rows" in gated.output, gated.output


def test_an_unreadable_training_row_is_skipped_and_counted_not_a_traceback(
    recall_model, recall_dir, suite_file, env, monkeypatch
):
    # a run trained on a file with one bad line (training quarantined it): the scan reads past it
    import shutil

    _, _, rows = recall_model
    project = env / "project-bad-row"
    project.mkdir()
    monkeypatch.chdir(project)
    clean = sft_row("recall 0 0 1", "0", id="clean-1")
    leak = sft_row(rows[5]["prompt"], rows[5]["verifier"]["answer"], id="leak-5")
    (project / "train.jsonl").write_text(json.dumps(clean) + '\n{"messages": [oops\n' + json.dumps(leak) + "\n")
    final = record_run(project / "runs", "sft-bad-row", ["train.jsonl"], "smollm2-135m-instruct")
    shutil.copytree(recall_dir, final, dirs_exist_ok=True)
    result = runner.invoke(eval_app, [str(a) for a in ["run", suite_file, "--model", final, "--out", env / "bad-row"]])
    assert result.exit_code == 0 and result.exception is None, result.output
    output = " ".join(result.output.split())  # rich wraps long lines
    assert "1 unreadable training row(s) skipped by the contamination scan" in output, output
    assert "train.jsonl:2: invalid JSON" in output and "1 contaminated row(s)" in output, output
    suite = EvalResults.load(env / "bad-row" / "results.json").suite("recall")
    assert suite.contamination_hits == 1 and suite.contaminated_rows[0].endswith("train.jsonl#leak-5")


def test_a_best_spec_is_the_recorded_best_model_for_the_scan_the_record_and_lineage(
    recall_model, recall_dir, suite_file, env, monkeypatch
):
    """`--model runs/NAME@best` and `runs/NAME/best` are one model: same contaminated rows, the eval
    recorded for the same output, and `temper lineage` prints the same chain for both."""
    import shutil

    from tempering.cli import app
    from tempering.runs.registry import Registry, read_marker

    _, _, rows = recall_model
    project = env / "project-best"
    project.mkdir()
    monkeypatch.chdir(project)
    write_jsonl(project / "train.jsonl", [sft_row(rows[2]["prompt"], rows[2]["verifier"]["answer"], id="leak-2")])
    final = record_run(project / "runs", "sft-best", ["train.jsonl"], "smollm2-135m-instruct")
    best = final.parent / "best"
    shutil.copytree(recall_dir, best)
    marker = read_marker(final)
    assert marker is not None
    with Registry(project / "runs" / "registry.sqlite") as registry:
        registry.record_output(marker["run_id"], "best", best)
    found = {}
    for spec in ("runs/sft-best@best", "runs/sft-best/best"):
        out = env / spec.replace("/", "_")
        result = invoke(eval_app, ["run", suite_file, "--model", spec, "--out", out, "--seeds", 1, "--limit", 5])
        assert result.exit_code == 0, result.output
        found[spec] = EvalResults.load(out / "results.json").suite("recall").contaminated_rows
    assert found["runs/sft-best@best"] == found["runs/sft-best/best"] == [str(project / "train.jsonl#leak-2")]
    with Registry(project / "runs" / "registry.sqlite") as registry:
        evals = registry.evals(run_id=marker["run_id"])
        assert [e["model"] for e in evals] == [str(best.resolve())] * 2
        assert len(registry.evals(model="runs/sft-best@best")) == 2
    shown = {spec: runner.invoke(app, ["lineage", spec]) for spec in ("runs/sft-best@best", "runs/sft-best/best")}
    assert all(r.exit_code == 0 for r in shown.values()), {k: r.output for k, r in shown.items()}
    assert shown["runs/sft-best@best"].stdout == shown["runs/sft-best/best"].stdout
    assert "sft-best (sft" in shown["runs/sft-best@best"].stdout and "eval 2:" in shown["runs/sft-best@best"].stdout
