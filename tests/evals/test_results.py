"""Results schema: validation, save/load round trip, and paired comparison of two runs."""

import json

import pytest

from tempering.evals.results import EvalResults, MetricResult, SuiteResult, compare
from tempering.evals.stats import Stability


def suite(
    name: str, scores: dict[str, list[float]], *, track: str = "general", suite_hash: str = "h1", **extra
) -> SuiteResult:
    metric = MetricResult.from_scores("accuracy", list(scores.values()))
    return SuiteResult(
        suite=name,
        suite_hash=suite_hash,
        track=track,
        model_id="m",
        metrics={"accuracy": metric},
        primary_metric="accuracy",
        task_scores=scores,
        **extra,
    )


def test_metric_from_scores_hand_values():
    m = MetricResult.from_scores("accuracy", [[1, 1], [0, 1], [1, 1], [0, 0]], per_seed=[0.7, 0.8])
    assert (m.mean, m.n, m.per_seed) == (0.625, 4, [0.7, 0.8])  # task means 1, .5, 1, 0
    assert m.low <= m.mean <= m.high
    assert m.std == pytest.approx(0.0707107, abs=1e-6)  # |0.8 - 0.7| / sqrt(2)
    assert MetricResult.from_scores("accuracy", [1, 0]).std is None


def test_suite_result_rejects_inconsistent_fields():
    acc = MetricResult(name="accuracy", mean=0.5, n=2)
    with pytest.raises(ValueError, match="primary_metric 'pass@1' is not among metrics"):
        SuiteResult(suite="s", suite_hash="h", model_id="m", metrics={"accuracy": acc}, primary_metric="pass@1")
    with pytest.raises(ValueError, match="metrics\\['acc'\\] is named 'accuracy'"):
        SuiteResult(suite="s", suite_hash="h", model_id="m", metrics={"acc": acc}, primary_metric="acc")
    with pytest.raises(ValueError, match="task_scores of 't2' is empty"):
        SuiteResult(
            suite="s",
            suite_hash="h",
            model_id="m",
            metrics={"accuracy": acc},
            primary_metric="accuracy",
            task_scores={"t1": [1.0], "t2": []},
        )
    with pytest.raises(ValueError, match="listed twice: s"):
        EvalResults(model="m", suites=[suite("s", {"t": [1.0]}), suite("s", {"t": [0.0]})])


def test_save_and_load_round_trip(tmp_path):
    stab = Stability(tasks=2, repeats=3, mean_task_variance=0.1, flip_share=0.5, repeat_std=0.05)
    results = EvalResults(
        model="cand",
        suites=[
            suite(
                "arith",
                {"a1": [1.0, 0.0], "a2": [1.0, 1.0]},
                stability=stab,
                truncation_rate=0.25,
                sampling={"temperature": 0.0, "samples": 2},
            ),
            suite("heldout", {"h1": [0.0]}, private=True, contamination_hits=2),
        ],
    )
    path = results.save(tmp_path / "run" / "results.json")
    loaded = EvalResults.load(path)
    assert loaded == results
    assert loaded.suite("arith").stability == stab and loaded.suite("heldout").private
    with pytest.raises(KeyError, match="no suite 'code'.*have: arith, heldout"):
        loaded.suite("code")


def test_load_errors_name_file_and_field(tmp_path):
    path = tmp_path / "results.json"
    path.write_text('{\n  "model": "m",\n  "suites": [,]\n}')
    with pytest.raises(ValueError, match=r"results.json:3: invalid JSON"):
        EvalResults.load(path)
    path.write_text(json.dumps({"model": "m", "suites": [{"suite": "s"}]}))
    with pytest.raises(ValueError, match=r"results.json: suites.0.suite_hash: Field required"):
        EvalResults.load(path)
    path.write_text(json.dumps({"schema_version": 2, "model": "m", "suites": []}))
    with pytest.raises(ValueError, match="schema v2 is newer"):
        EvalResults.load(path)
    with pytest.raises(FileNotFoundError, match="results file not found"):
        EvalResults.load(tmp_path / "missing.json")


def test_compare_pairs_tasks_of_shared_suites():
    base = EvalResults(
        model="base",
        suites=[
            suite("arith", {"t1": [1.0], "t2": [0.0], "t3": [0.0], "t4": [1.0]}),
            suite("only-base", {"x": [1.0]}),
        ],
    )
    cand = EvalResults(
        model="cand",
        suites=[
            suite("new", {"y": [1.0]}),
            # Listed in another order and with two samples per task: pairing is by task id.
            suite("arith", {"t4": [1.0, 1.0], "t3": [0.0, 1.0], "t2": [1.0, 1.0], "t1": [1.0, 0.0]}),
        ],
    )
    (cmp,) = compare(base, cand)
    assert (cmp.suite, cmp.metric, cmp.base_mean) == ("arith", "accuracy", 0.5)
    # Candidate task means t1..t4: 0.5, 1, 0.5, 1 -> 0.75; per-task deltas -0.5, 1, 0.5, 0.
    assert cmp.candidate_mean == 0.75 and cmp.comparison.delta == pytest.approx(0.25)
    assert cmp.comparison.n == 4 and cmp.to_dict()["comparison"]["delta"] == pytest.approx(0.25)


def test_compare_refuses_suites_that_cannot_pair():
    base = EvalResults(model="b", suites=[suite("arith", {"t1": [1.0], "t2": [0.0]})])
    other_version = EvalResults(model="c", suites=[suite("arith", {"t1": [1.0], "t2": [0.0]}, suite_hash="h2")])
    with pytest.raises(ValueError, match="different suite versions \\(hash h1 vs h2\\)"):
        compare(base, other_version)
    fewer = EvalResults(model="c", suites=[suite("arith", {"t1": [1.0], "t3": [0.0]})])
    with pytest.raises(ValueError, match="different tasks \\(1 only in base, 1 only in candidate\\)"):
        compare(base, fewer)


def test_a_suite_at_one_length_keeps_only_those_tasks_and_recomputes_their_metrics():
    scores = {
        "longctx-noisy-L1024-d0.00-0": [1.0, 1.0],
        "longctx-noisy-L1024-d1.00-1": [0.0, 1.0],
        "longctx-noisy-L4096-d0.00-0": [0.0, 0.0],
        "longctx-noisy-L4096-d1.00-1": [1.0, 0.0],
        "longctx-noisy-L4096-d0.50-2": [1.0, 1.0],
    }
    reward = {t: [0.1 * i] for i, t in enumerate(scores)}
    whole = SuiteResult(
        suite="longctx-noisy",
        suite_hash="h1",
        track="longctx",
        model_id="m",
        metrics={
            "accuracy": MetricResult.from_scores("accuracy", list(scores.values())),
            "mean_reward": MetricResult.from_scores("mean_reward", list(reward.values())),
            "pass@2": MetricResult(name="pass@2", mean=0.8, n=5),  # no per-task scores kept
        },
        primary_metric="accuracy",
        task_scores=scores,
        metric_task_scores={"mean_reward": reward},
        contamination_hits=3,
        truncation_rate=0.1,
    )
    assert whole.lengths() == [1024, 4096]
    at = whole.at_length(4096)
    assert at.suite == "longctx-noisy@4096" and at.suite_hash == whole.suite_hash and at.track == "longctx"
    assert sorted(at.task_scores) == sorted(t for t in scores if "-L4096-" in t)
    assert at.metrics["accuracy"].mean == pytest.approx(0.5) and at.metrics["accuracy"].n == 3  # task means 0, .5, 1
    assert at.metrics["mean_reward"].mean == pytest.approx(0.3)  # 0.2, 0.3, 0.4
    assert sorted(at.metrics) == ["accuracy", "mean_reward"]
    assert (at.contamination_hits, at.truncation_rate) == (0, None)  # what the whole run measured stays with it
    assert whole.at_length(1024).metrics["accuracy"].mean == pytest.approx(0.75)  # task means 1, .5
    with pytest.raises(
        ValueError, match=r"^suite 'longctx-noisy' has no tasks at length 2048 \(lengths: 1024, 4096\)$"
    ):
        whole.at_length(2048)
    split = EvalResults(model="m", suites=[whole, suite("qa", {"q1": [1.0]})]).by_length()
    assert split.suite_names() == ["longctx-noisy@1024", "longctx-noisy@4096"]  # qa names no length
