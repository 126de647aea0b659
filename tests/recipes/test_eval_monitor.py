"""`HeldoutMonitor`: which evaluation saves the best model and which one stops the run, by hand."""

import json

from tempering.config import TrainSettings
from tempering.recipes.monitor import HeldoutMonitor, eval_metrics
from tempering.tracking.context import RunContext


def monitor(tmp_path, values, **train):
    settings = TrainSettings(steps=100, eval_every=10, **train)
    saved, stops = [], []
    it = iter(values)
    run = RunContext.open(tmp_path)
    m = HeldoutMonitor(settings, lambda step, run: eval_metrics(next(it)), run, saved.append, stops.append)
    return m, saved, stops


def test_the_best_is_saved_when_the_metric_improves_in_its_direction(tmp_path):
    # eval_loss is minimised: 2.0 (save), 2.5, 1.5 (save), 1.5 (a tie is no improvement)
    m, saved, _ = monitor(tmp_path, [2.0, 2.5, 1.5, 1.5], keep_best="eval_loss")
    for step in range(1, 41):
        m(step, {})
    assert saved == [10, 30] and m.best == {"step": 30, "value": 1.5}
    # a metric without "loss" in its name is maximised
    (tmp_path / "b").mkdir()
    accuracies = [{"reward_accuracy": 0.5}, {"reward_accuracy": 0.4}, {"reward_accuracy": 0.7}]
    m, saved, _ = monitor(tmp_path / "b", accuracies, keep_best="eval_reward_accuracy")
    for step in (10, 20, 30):
        m(step, {})
    assert saved == [10, 30]


def test_early_stopping_counts_evaluations_without_an_improvement_of_min_delta(tmp_path):
    # best 1.0; 0.95 improves by less than min_delta 0.1 (stale 1); 0.85 improves (reset); 0.8, 0.9 stale -> stop
    rule = {"metric": "eval_loss", "patience": 2, "min_delta": 0.1}
    m, _, stops = monitor(tmp_path, [1.0, 0.95, 0.85, 0.8, 0.9], early_stopping=rule)
    for step in (10, 20, 30, 40):
        m(step, {})
        assert stops == []
    m(50, {})
    assert len(stops) == 1 and "eval_loss did not improve by more than 0.1 in 2 evaluations (best 0.85)" in stops[0]


def test_a_resumed_run_takes_up_the_evaluations_logged_before_it(tmp_path):
    # logged before a kill: steps 10 (1.0) and 20 (0.5), and 30 (0.1), a step the resumed run does again
    rows = [{"event": "eval", "step": s, "eval_loss": v} for s, v in ((10, 1.0), (20, 0.5), (30, 0.1))]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    m, saved, _ = monitor(tmp_path, [0.7, 0.4], keep_best="eval_loss")
    m(30, {})  # 0.7 is worse than the 0.5 of step 20: not saved (the 0.1 of the old step 30 does not count)
    m(40, {})
    assert saved == [40] and m.best == {"step": 40, "value": 0.4}


def test_a_measure_is_named_by_its_keys():
    assert eval_metrics(1.25) == {"eval_loss": 1.25}
    assert eval_metrics({"loss": 1.0, "reward_accuracy": 0.5, "flag": True, "eval_x": 2}) == {
        "eval_loss": 1.0,
        "eval_reward_accuracy": 0.5,
        "eval_x": 2.0,
    }
