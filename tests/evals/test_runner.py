"""The suite runner on a tiny trained model: determinism, cache, batching, pass@k, skips, privacy."""

import json
import math

import numpy as np
import pytest

from tempering.evals.report import render_report
from tempering.evals.results import EvalResults, compare
from tempering.evals.runner import run_suite, run_suite_samples
from tempering.evals.stats import pass_at_k
from tempering.evals.suite import SuiteError, read_suite, registered_suites
from tempering.rollout.engine import HFEngine
from tempering.verifiers import VERIFIERS, VerifierError
from tests.evals.conftest import write_jsonl, write_suite


@pytest.fixture
def suite(recall_model, tmp_path):
    _, _, rows = recall_model
    return read_suite(write_suite(tmp_path, "recall", write_jsonl(tmp_path / "tasks.jsonl", rows)))


@pytest.fixture
def engine(recall_model):
    model, tok, _ = recall_model
    return HFEngine(model, tok, precision="fp32")


def test_same_seeds_give_identical_results_other_seeds_do_not(suite, recall_model):
    model, tok, _ = recall_model
    first = run_suite(suite, HFEngine(model, tok, "fp32"), seeds=2)
    again = run_suite(suite, HFEngine(model, tok, "fp32"), seeds=2)
    assert first == again
    other = run_suite(suite, HFEngine(model, tok, "fp32"), seeds=2, first_seed=2)
    assert other.task_scores != first.task_scores and other.suite_hash == first.suite_hash
    acc = first.metrics["accuracy"]
    assert acc.mean > 0.9 and acc.low <= acc.mean <= acc.high and acc.n == 60 and len(acc.per_seed) == 2
    assert first.stability.repeats == 2 and first.paraphrase.n == 2 and first.truncation_rate == 0.0
    assert first.sampling["seeds"] == [0, 1] and first.sampling["samples"] == 4


def test_generation_is_batched_per_chunk_of_prompts(suite, engine, monkeypatch):
    calls = []
    real = engine.generate
    monkeypatch.setattr(
        engine, "generate", lambda prompts, params: calls.append((len(prompts), params.n)) or real(prompts, params)
    )
    run_suite(suite, engine, seeds=1)
    assert calls == [(60, 4)] * 2  # all 60 tasks x 4 samples in one decode batch, per template
    calls.clear()
    run_suite(suite, engine, seeds=1, batch_tokens=900)
    # rows x (prompt + 3 new tokens) <= 900: 18 prompts of 9 tokens, then 16 of 11 (paraphrase)
    assert calls == [(18, 4)] * 3 + [(6, 4)] + [(16, 4)] * 3 + [(12, 4)]


def test_pass_at_k_is_the_unbiased_estimate_from_all_samples(suite, engine):
    result = run_suite(suite, engine, seeds=2)
    # accuracy is the primary metric: task_scores hold each task's 0/1 samples over both seeds
    per_task = [pass_at_k(len(s), int(sum(s)), 2) for s in result.task_scores.values()]
    assert all(len(s) == 8 for s in result.task_scores.values())
    assert result.metrics["pass@2"].mean == pytest.approx(np.mean(per_task))
    assert result.metrics["pass@2"].mean >= result.metrics["accuracy"].mean
    assert len(result.metrics["pass@2"].per_seed) == 2  # 4 samples per seed suffice for pass@2


def test_cache_hit_skips_generation_and_renames(suite, engine, tmp_path, monkeypatch):
    first = run_suite(suite, engine, model_id="a", model_hash="h1", cache_dir=tmp_path / "cache")
    monkeypatch.setattr(engine, "generate", lambda *a: pytest.fail("generated on a cache hit"))
    hit = run_suite(suite, engine, model_id="b", model_hash="h1", cache_dir=tmp_path / "cache")
    assert hit.model_id == "b" and hit.model_copy(update={"model_id": "a"}) == first
    for changed in ({"model_hash": "h2"}, {"model_hash": "h1", "samples": 2}, {"model_hash": "h1", "seeds": 2}):
        with pytest.raises(pytest.fail.Exception):
            run_suite(suite, engine, cache_dir=tmp_path / "cache", **changed)
    with pytest.raises(pytest.fail.Exception):
        run_suite(suite, engine, model_hash="h1", first_seed=1, cache_dir=tmp_path / "cache")


def test_verifier_errors_are_skipped_and_counted(recall_model, engine, tmp_path, monkeypatch):
    _, _, rows = recall_model
    rows = [
        dict(r, verifier={"type": "flaky", "answer": r["verifier"]["answer"], "broken": i % 3 == 0})
        for i, r in enumerate(rows)
    ]

    def flaky(spec, completion, ctx):
        if spec["broken"]:
            raise VerifierError("judge crashed")
        return VERIFIERS["numeric"](spec, completion, ctx)

    monkeypatch.setitem(VERIFIERS, "flaky", flaky)
    s = read_suite(write_suite(tmp_path, "flaky", write_jsonl(tmp_path / "f.jsonl", rows)))
    result = run_suite(s, engine)
    assert result.verifier_errors == 20 * 4 * 2  # 20 broken tasks x 4 samples x 2 templates
    assert result.metrics["accuracy"].n == 40 and len(result.task_scores) == 40
    assert result.metrics["accuracy"].mean > 0.9  # skipped samples are not failures


def test_truncation_rate_counts_length_stops(suite, engine):
    cut = suite.model_copy(update={"sampling": suite.sampling.model_copy(update={"max_new_tokens": 1})})
    result = run_suite(cut, engine)
    assert result.truncation_rate == 1.0 and result.metrics["accuracy"].mean > 0.9


def test_private_suite_leaves_no_task_text_or_ids(recall_model, engine, tmp_path):
    _, _, rows = recall_model
    s = read_suite(write_suite(tmp_path, "holdout", write_jsonl(tmp_path / "p.jsonl", rows), private=True))
    lines = []
    result = run_suite(s, engine, seeds=2, log=lines.append)
    other = run_suite(s, engine, seeds=1, first_seed=5)
    results = EvalResults(model="m", suites=[result])
    path = results.save(tmp_path / "out" / "results.json")
    page = render_report(results, tmp_path / "out", compare=EvalResults(model="m0", suites=[other])).read_text()
    saved, logged = path.read_text(), "\n".join(lines)
    assert len(lines) == 3  # one line per pass: counts and seconds
    for r in rows:
        for text in (r["id"], r["prompt"]):
            assert text not in saved and text not in page and text not in logged
    assert all(k.startswith("t-") for k in result.task_scores)
    assert compare(EvalResults(model="m0", suites=[other]), results)[0].comparison.n == 60  # hashed ids still pair
    assert json.loads(saved)["suites"][0]["private"] is True
    assert not math.isnan(result.metrics["accuracy"].mean)


def test_any_verifier_crash_is_skipped_and_counted_not_raised(recall_model, engine, tmp_path, monkeypatch):
    """The one failure policy: a crash that is not a VerifierError is a verifier failure too."""
    _, _, rows = recall_model
    rows = [
        dict(r, verifier={"type": "crashy", "answer": r["verifier"]["answer"], "broken": i % 2 == 0})
        for i, r in enumerate(rows[:10])
    ]

    numeric = VERIFIERS["numeric"]

    def crashy(spec, completion, *ctx):
        if spec["broken"]:
            raise RuntimeError("sandbox slot is gone")
        return numeric(spec, completion, *ctx)

    monkeypatch.setitem(VERIFIERS, "crashy", crashy)
    s = read_suite(write_suite(tmp_path, "crashy", write_jsonl(tmp_path / "c.jsonl", rows)))
    result, records = run_suite_samples(s, engine)
    assert result.verifier_errors == 5 * 4 * 2 and len(result.task_scores) == 5
    assert {r["status"] for r in records if r["task_id"] in {rows[i]["id"] for i in (0, 2, 4, 6, 8)}} == {
        "verifier_error"
    }
    assert "sandbox slot is gone" in next(r["detail"] for r in records if r["status"] == "verifier_error")


def test_samples_records_hold_every_generation_with_its_score(suite, engine):
    result, records = run_suite_samples(suite, engine, seeds=2)
    # 60 tasks x 4 samples x (2 seeds of the canonical template + 1 paraphrase pass)
    assert len(records) == 60 * 4 * 3
    assert set(records[0]) == {
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
        "components",
        "finish_reason",
    }
    by_task: dict = {}
    for r in records:
        if r["template"] == 0:
            by_task.setdefault(r["task_id"], []).append(float(r["passed"]))
    assert by_task == result.task_scores  # accuracy is primary: the records are the per-task scores
    assert {(r["template"], r["seed"]) for r in records} == {(0, 0), (0, 1), (1, 0)}
    assert all(r["prompt"].startswith("Question : recall") for r in records if r["template"] == 1)


def test_private_suite_samples_hold_hashed_ids_and_no_text(recall_model, engine, tmp_path):
    _, _, rows = recall_model
    s = read_suite(write_suite(tmp_path, "secret", write_jsonl(tmp_path / "s.jsonl", rows), private=True))
    result, records = run_suite_samples(s, engine)
    text = json.dumps(records)
    for r in rows:
        assert r["id"] not in text and r["prompt"] not in text
    assert all("prompt" not in r and "completion" not in r and "detail" not in r for r in records)
    assert {r["task_id"] for r in records} == set(result.task_scores)


def test_pass_at_k_beyond_the_samples_is_skipped_with_a_note(suite, engine):
    result = run_suite(suite, engine, samples=1)  # the suite asks for accuracy and pass@2
    assert set(result.metrics) == {"accuracy"} and result.primary_metric == "accuracy"
    assert result.notes == ["pass@2 skipped: needs >= 2 samples per task, got 1 x 1 seed(s)"]
    only_k = suite.model_copy(update={"metrics": ["pass@2", "accuracy"]})
    assert run_suite(only_k, engine, samples=1).primary_metric == "accuracy"
    with pytest.raises(SuiteError, match="no metric can be computed"):
        run_suite(suite.model_copy(update={"metrics": ["pass@2"]}), engine, samples=1)


def test_every_builtin_suite_has_a_metric_at_one_sample(monkeypatch, tmp_path):
    monkeypatch.setenv("TEMPERING_SUITES", str(tmp_path / "none"))  # the built-in suites only
    for s in registered_suites():
        assert s.with_overrides(samples=1, seeds=1).computable_metrics(), s.name


def test_a_prompt_that_fills_the_models_window_is_a_one_line_error(suite, engine, monkeypatch):
    """With the model's window set to the longest prompt (under the first template, which runs
    first), that prompt is refused naming suite, task and lengths; one position more, it runs."""
    from tempering.evals.suite import render_messages

    prompts = {t.id: engine.chat_prompt(render_messages(t, suite.templates[0])) for t in suite.task_list}
    longest = max(prompts, key=lambda i: len(prompts[i]))
    window = len(prompts[longest])
    monkeypatch.setattr(engine.model.config, "max_position_embeddings", window)
    with pytest.raises(SuiteError) as err:
        run_suite(suite, engine, seeds=1)
    assert str(err.value) == (
        f"suite 'recall': task {longest!r} has a prompt of {window} tokens; the model's window is {window} tokens"
    )
    one_template = suite.model_copy(update={"templates": suite.templates[:1]})
    monkeypatch.setattr(engine.model.config, "max_position_embeddings", window + 1)
    assert run_suite(one_template, engine, seeds=1).metrics["accuracy"].n == 60
