"""Multi-domain rollouts: priority shares by hand, stride draws, health pauses, and a planted flaky verifier."""

import itertools
import threading

import pytest
import torch

from tempering.config import GRPOSettings, HealthSettings, MixtureSettings
from tempering.rollout.domains import DomainSchedule, learnability, priority_shares
from tempering.rollout.engine import HFEngine
from tempering.rollout.source import RolloutSource
from tempering.rollout.store import TrajectoryStore, read_trajectories
from tempering.types import Reward, Task, Trajectory
from tempering.verifiers import VERIFIERS, register
from tests.conftest import tiny_llama

VOWEL = {"type": "test_md_any_vowel"}
_calls = itertools.count()
_lock = threading.Lock()


@register("test_md_flaky_half")
def _flaky_half(spec, completion, ctx):
    """Raises on every second call (a broken environment); passes otherwise."""
    with _lock:
        n = next(_calls)
    if n % 2:
        raise ConnectionError("environment unreachable")
    return Reward(value=1.0)


@register("test_md_any_vowel")
def _any_vowel(spec, completion, ctx):
    return Reward(value=float(any(c in "aeiou" for c in completion)))


def teardown_module():
    for name in ("test_md_flaky_half", "test_md_any_vowel"):
        VERIFIERS.pop(name, None)


def _tasks(domain, n, spec):
    return [Task(id=f"{domain}/t{i}", prompt=f"{domain} question {i}", verifier=spec, source=domain) for i in range(n)]


def assert_shares_sum_to_one(shares):
    assert sum(shares) == pytest.approx(1.0)


# -- the pure schedule -------------------------------------------------------------------
def test_learnability_peaks_at_half():
    assert [learnability(p) for p in (0.0, 0.25, 0.5, 1.0)] == [0.0, 0.75, 1.0, 0.0]


def test_priority_shares_by_hand():
    # learnable (p .5), mastered (p 1), hopeless (p 0): floor .05 each, the other .85 to the learnable one
    shares = priority_shares([1, 1, 1], [0.5, 1.0, 0.0], [True, True, True], floor=0.05)
    assert shares == pytest.approx([0.9, 0.05, 0.05])
    # weight 2 at p .25 (2 x .75 = 1.5) against weight 1 at p .5 (1): .1 floors, .8 split 1.5 : 1
    shares = priority_shares([2, 1], [0.25, 0.5], [True, True], floor=0.1)
    assert shares == pytest.approx([0.1 + 0.8 * 0.6, 0.1 + 0.8 * 0.4])
    # a paused domain gets nothing; uniform ignores pass rates; nothing learnable falls back to weights
    assert priority_shares([1, 1, 2], [0.5, 0.5, 0.5], [True, False, True], 0.0) == pytest.approx([1 / 3, 0, 2 / 3])
    assert priority_shares([1, 3], [0.5, 1.0], [True, True], 0.0, priority=False) == pytest.approx([0.25, 0.75])
    assert priority_shares([1, 3], [1.0, 0.0], [True, True], 0.0) == pytest.approx([0.25, 0.75])
    assert_shares_sum_to_one(priority_shares([1, 1], [0.5, 0.5], [False, False], 0.1))  # all paused: all retried


def _scored(passed: bool, ok: bool = True) -> Trajectory:
    return Trajectory(
        task_id="x",
        messages=[],
        token_ids=[1],
        loss_mask=[1],
        logprobs=[0.0],
        prompt_length=0,
        rewards=[Reward(value=float(passed))],
        status="scored" if ok else "verifier_error",
    )


def test_stride_draws_follow_the_shares_and_a_mastered_domain_falls():
    tasks = {"easy": _tasks("easy", 5, VOWEL), "mid": _tasks("mid", 5, VOWEL)}
    sched = DomainSchedule(
        tasks, {"easy": 1.0, "mid": 1.0}, MixtureSettings.model_validate({"floor": 0.1, "smoothing": 1.0}), seed=0
    )
    first = sched.draw(10)
    assert sum(t.id.startswith("easy") for t in first) == 5  # both at the prior pass rate: an even split
    sched.observe(0, {"easy": [_scored(True)] * 8, "mid": [_scored(True)] * 4 + [_scored(False)] * 4})
    assert sched.shares() == pytest.approx({"easy": 0.1, "mid": 0.9})
    drawn = [t.id.split("/")[0] for t in sched.draw(10)]
    assert drawn.count("easy") == 1 and drawn.count("mid") == 9
    assert len({t.id for t in first}) == 10  # each domain walks its own seeded order: no repeat within a pass


def test_a_failing_verifier_pauses_its_domain_and_it_is_retried():
    health = HealthSettings.model_validate(
        {"max_failure_rate": 0.25, "window": 2, "min_verdicts": 4, "pause_batches": 2}
    )
    tasks = {"ok": _tasks("ok", 4, VOWEL), "flaky": _tasks("flaky", 4, VOWEL)}
    sched = DomainSchedule(
        tasks, {"ok": 1.0, "flaky": 1.0}, MixtureSettings.model_validate({"health": health, "smoothing": 1.0}), seed=0
    )
    half = [_scored(True), _scored(False, ok=False)] * 2
    events = sched.observe(0, {"ok": [_scored(False)] * 4, "flaky": half})
    assert [e["event"] for e in events] == ["domain_paused"] and events[0]["domain"] == "flaky"
    assert "'flaky'" in events[0]["warning"] and events[0]["failure_rate"] == 0.5
    assert sched.state["flaky"].pass_rate == 1.0  # the judged half all passed: failures are no model failures
    assert sched.shares()["flaky"] == 0 and all(t.id.startswith("ok") for t in sched.draw(4))
    assert sched.observe(1, {"ok": [_scored(True)]}) == []
    assert sched.observe(2, {"ok": [_scored(True)]}) == []
    assert sched.shares()["flaky"] > 0  # batch 3: retried
    # still broken when retried: paused again
    assert [e["event"] for e in sched.observe(3, {"flaky": half})] == ["domain_retried", "domain_paused"]
    assert sched.state["flaky"].pauses == 2


def test_the_schedule_state_round_trips_through_json():
    import json

    tasks = {"a": _tasks("a", 3, VOWEL), "b": _tasks("b", 3, VOWEL)}
    one = DomainSchedule(tasks, {"a": 1.0, "b": 2.0}, MixtureSettings.model_validate({}), seed=3)
    one.draw(5)
    one.observe(0, {"a": [_scored(True), _scored(False)], "b": [_scored(False, ok=False)]})
    two = DomainSchedule(tasks, {"a": 1.0, "b": 2.0}, MixtureSettings.model_validate({}), seed=3)
    two.load_state_dict(json.loads(json.dumps(one.state_dict())))
    assert [t.id for t in two.draw(7)] == [t.id for t in one.draw(7)]
    with pytest.raises(ValueError, match="domains"):
        DomainSchedule({"a": tasks["a"]}, {"a": 1.0}, MixtureSettings.model_validate({}), seed=3).load_state_dict(
            one.state_dict()
        )


# -- through the rollout source, on a tiny model ---------------------------------------
@pytest.fixture(scope="module")
def engine(smol_tokenizer):
    model = tiny_llama(vocab=49152, seed=7)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    return HFEngine(model, smol_tokenizer, precision="fp32")


def test_a_planted_flaky_domain_is_paused_and_the_others_train_on(engine, tmp_path):
    """The flaky domain's verifier fails half its calls: paused and named, its groups never enter the
    loss, its failed verdicts are not model failures, and the healthy domains keep every slot."""
    tasks = {
        "vowels": _tasks("vowels", 12, {"type": "test_md_any_vowel"}),
        "flaky": _tasks("flaky", 12, {"type": "test_md_flaky_half"}),
    }
    health = HealthSettings.model_validate(
        {"max_failure_rate": 0.25, "window": 1, "min_verdicts": 4, "pause_batches": 3}
    )
    sched = DomainSchedule(
        tasks, {"vowels": 1.0, "flaky": 1.0}, MixtureSettings.model_validate({"health": health}), seed=0
    )
    settings = GRPOSettings.model_validate(
        {
            "prompts_per_step": 4,
            "group_size": 4,
            "max_new_tokens": 6,
            "max_refills": 0,
            "advantage": "per_domain",
            "truncation": "keep",
        }
    )
    src = RolloutSource(
        [t for ts in tasks.values() for t in ts],
        engine,
        settings,
        grad_accum=1,
        seed=0,
        store=TrajectoryStore(tmp_path, "md"),
        schedule=sched,
    )
    batch = src.next_batch()
    stats = src.stats()
    (event,) = stats["domain_events"]
    assert event["event"] == "domain_paused" and event["domain"] == "flaky"
    assert stats["domain/flaky/failure_rate"] == 0.5 and stats["domain/flaky/paused"] == 1.0
    assert stats["domain/flaky/groups_kept"] == 0 and stats["domain/flaky/success"] == 1.0
    assert sched.state["flaky"].pass_rate > 0.5  # judged verdicts all passed; failures did not pull it down
    assert batch.advantages.shape[0] == 4 * int(stats["groups_kept"])
    rows = read_trajectories(tmp_path, step=1)
    assert not any(r["kept"] for r in rows if r["task_id"].startswith("flaky/"))
    for key in ("reward", "success", "failure_rate", "tokens", "sample_cost_s", "share", "pass_rate_ema"):
        assert f"domain/vowels/{key}" in stats, key
    src.next_batch()
    stats = src.stats()
    assert "domain_events" not in stats and stats["domain/vowels/samples"] == 16  # every slot to the healthy one
    assert "domain/flaky/samples" not in stats and torch.isfinite(batch.advantages).all()
