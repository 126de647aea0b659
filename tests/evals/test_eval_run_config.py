"""`temper eval run`: an EvalConfig file with flag overrides, one-line errors for bad values,
samples.jsonl, and built-in-style suites at one sample (pass@k skipped with a note)."""

import json

import pytest
import yaml
from typer.testing import CliRunner

from tempering.cli import app
from tempering.evals.results import EvalResults

runner = CliRunner()


def run(*args):
    return runner.invoke(app, ["eval", "run", *[str(a) for a in args]])


@pytest.mark.parametrize(
    "flag,value,named",
    [
        ("--seeds", 0, "seeds"),
        ("--limit", 0, "limit"),
        ("--limit", -1, "limit"),
        ("--precision", "banana", "precision"),
        ("--samples", 0, "samples"),
    ],
)
def test_bad_values_are_one_line_errors_before_any_work(env, flag, value, named):
    res = run("arithmetic", "--out", env / "o", flag, value)
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and named in lines[0], res.output
    assert not (env / "o").exists()


def test_a_config_file_is_loaded_like_training_configs_and_flags_override_it(recall_dir, suite_file, env):
    cfg = env / "eval.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "suites": [str(suite_file)],
                "model": str(recall_dir),
                "out": str(env / "a"),
                "limit": 5,
                "samples": 2,
                "cache": False,
                "precision": "fp32",
            }
        )
    )
    res = run("--config", cfg)
    assert res.exit_code == 0, res.output
    first = EvalResults.load(env / "a" / "results.json").suites[0]
    assert len(first.task_scores) == 5 and first.sampling["samples"] == 2 and first.sampling["precision"] == "fp32"
    # the secondary metric keeps its per-task scores too (gate rules on `recall.pass@2` pair them)
    pass2 = first.metric_task_scores["pass@2"]
    assert list(first.metric_task_scores) == ["pass@2"] and pass2.keys() == first.task_scores.keys()
    assert sum(v[0] for v in pass2.values()) / len(pass2) == pytest.approx(first.metrics["pass@2"].mean)
    res = run("--config", cfg, "--limit", 3, "--out", env / "b", "--set", "samples=1")
    assert res.exit_code == 0, res.output
    second = EvalResults.load(env / "b" / "results.json").suites[0]
    assert len(second.task_scores) == 3 and second.sampling["samples"] == 1
    cfg.write_text(yaml.safe_dump({"suites": [str(suite_file)], "out": "x", "sedes": 2}))
    res = run("--config", cfg)
    assert res.exit_code == 2 and "sedes" in res.output and len(res.output.strip().splitlines()) == 1


def test_eval_run_writes_samples_jsonl_and_runs_one_sample_with_a_note(recall_dir, suite_file, env):
    res = run(suite_file, "--model", recall_dir, "--out", env / "o", "--samples", 1, "--limit", 10)
    assert res.exit_code == 0, res.output  # the suite asks for pass@2: skipped, not an error
    assert "note: recall: pass@2 skipped" in " ".join(res.output.split())
    suite = EvalResults.load(env / "o" / "results.json").suites[0]
    assert list(suite.metrics) == ["accuracy"] and suite.notes and "pass@2" in suite.notes[0]
    records = [json.loads(line) for line in (env / "o" / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 10 * 2  # 10 tasks x 1 sample x (canonical + paraphrase template)
    assert {
        k
        for k in (
            "suite",
            "task_id",
            "template",
            "seed",
            "sample",
            "prompt",
            "completion",
            "reward",
            "passed",
            "status",
            "detail",
        )
    } <= set(records[0])
    assert {r["task_id"] for r in records} == set(suite.task_scores) and records[0]["suite"] == "recall"


def test_an_unknown_model_is_one_line(env, suite_file):
    res = run(suite_file, "--model", env / "no-such-model", "--out", env / "o")
    assert res.exit_code == 2 and res.output.startswith("error:"), res.output
    assert len(res.output.strip().splitlines()) <= 2  # rich may wrap a long path; never a traceback


def test_compare_tables_keep_every_column_when_piped(recall_dir, suite_file, env, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    for name, seed in (("a", 0), ("b", 3)):
        res = run(
            suite_file, "--model", recall_dir, "--out", env / name, "--limit", 6, "--seeds", 2, "--first-seed", seed
        )
        assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["eval", "compare", str(env / "a"), str(env / "b")])
    assert res.exit_code == 0, res.output
    assert "…" not in res.output, res.output  # rich cut columns at 80 characters before
    header = next(line for line in res.output.splitlines() if "metric" in line)
    assert all(col in header for col in ("suite", "mean", "CI", "seed std", "base", "delta", "delta CI", "p"))
    assert "recall" in res.output and "accuracy" in res.output


def test_eval_run_quantize_int8_evaluates_the_int8_copy_under_its_own_cache_key(recall_dir, suite_file, env):
    from tempering.evals.gate import parse_rules, run_gate

    for name, extra in (("f", []), ("q", ["--quantize", "int8"])):
        res = run(suite_file, "--model", recall_dir, "--out", env / name, "--limit", 20, "--samples", 2, *extra)
        assert res.exit_code == 0, res.output
    base, quant = (EvalResults.load(env / n / "results.json") for n in ("f", "q"))
    assert quant.suites[0].model_hash == base.suites[0].model_hash + "+int8"  # never the float run's cache entry
    # per-channel int8 weights keep this small model's recall: the gate sees no regression
    assert run_gate(parse_rules(["no significant regression on recall"]), base, quant).passed
    bad = run(suite_file, "--model", recall_dir, "--out", env / "x", "--quantize", "int4")
    assert bad.exit_code == 2 and "quantize" in bad.output


def test_eval_run_with_rope_scaling_has_its_own_cache_entry(recall_dir, suite_file, env):
    """Same directory, other RoPE: the cached results of the model as saved are not reused."""
    flags = ["--limit", 5, "--samples", 1, "--threads", 1, "--precision", "fp32"]
    yarn = ["--set", "rope_scaling={type: yarn, factor: 2}"]
    for name, extra in (("plain", []), ("yarn", yarn), ("again", yarn)):
        res = run(suite_file, "--model", recall_dir, "--out", env / name, *flags, *extra)
        assert res.exit_code == 0, res.output
        assert ("cached result" in res.output) == (name == "again"), (name, res.output)
    plain, scaled = (EvalResults.load(env / n / "results.json") for n in ("plain", "yarn"))
    assert scaled.suites[0].model_hash == plain.suites[0].model_hash + '+rope{"factor": 2.0, "type": "yarn"}'


def _completions(out) -> list[tuple]:
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return sorted((r["task_id"], r["seed"], r["sample"], r["completion"], r["reward"]) for r in rows)


def test_a_pipeline_eval_stage_with_quantize_int8_evaluates_what_eval_run_quantize_int8_does(
    recall_dir, suite_file, env
):
    """The stage and the command reach one `evaluate_config`: same int8 cache key, same samples."""
    settings = {"limit": 20, "samples": 2, "threads": 1, "precision": "fp32", "cache": False}
    stage = {"kind": "eval", "model": str(recall_dir), "suites": [str(suite_file)], "quantize": "int8", **settings}
    pipeline = env / "p.yaml"
    pipeline.write_text(yaml.safe_dump({"out": str(env / "runs"), "stages": {"q": stage}}))
    res = runner.invoke(app, ["run", str(pipeline)])
    assert res.exit_code == 0, res.output
    (stage_out,) = [p.parent for p in (env / "runs").glob("q-*/results.json")]

    flags = ["--limit", 20, "--samples", 2, "--threads", 1, "--precision", "fp32", "--no-cache"]
    for name, extra in (("f", []), ("q", ["--quantize", "int8"])):
        cli = run(suite_file, "--model", recall_dir, "--out", env / name, *flags, *extra)
        assert cli.exit_code == 0, cli.output
    base, cli_q = (EvalResults.load(env / n / "results.json") for n in ("f", "q"))
    piped = EvalResults.load(stage_out / "results.json")
    assert piped.suites[0].model_hash == cli_q.suites[0].model_hash == base.suites[0].model_hash + "+int8"
    assert piped.suites[0].task_scores == cli_q.suites[0].task_scores
    assert _completions(stage_out) == _completions(env / "q")


def test_quantize_with_scale_is_a_one_line_error_at_config_load():
    """Ray replicas load the float model, so `quantize: int8` beside `scale:` would do nothing."""
    from tempering.config import ConfigError, EvalConfig, load_config

    with pytest.raises(ConfigError) as info:
        load_config(EvalConfig, None, ["scale={}"], literal={"suites": ["x"], "out": "o", "quantize": "int8"})
    message = str(info.value)
    assert "\n" not in message and "quantize" in message and "scale" in message
    assert load_config(EvalConfig, None, ["scale={}"], literal={"suites": ["x"], "out": "o"}).scale is not None
