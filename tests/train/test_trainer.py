"""The one Trainer: accumulation, exact resume, anomaly guard, checkpoint integrity."""

import json
import math

import pytest
import torch

from tempering.config import GuardSettings, TrainSettings
from tempering.data.batches import SFTBatches
from tempering.objectives.sft import SFTObjective
from tempering.tracking.events import read_metrics
from tempering.train.checkpoint import CheckpointError, list_checkpoints, load_checkpoint
from tempering.train.guard import AnomalyGuard
from tempering.train.trainer import Trainer, TrainingDiverged
from tests.conftest import random_examples, tiny_llama

EXAMPLES = random_examples(40, seed=7)


def settings(**kw):
    base = {
        "steps": 20,
        "batch_size": 4,
        "precision": "fp32",
        "seed": 0,
        "optim": {"lr": 3e-3, "warmup_steps": 2},
        "checkpoint": {"every": 5, "keep_last": 3},
    }
    for key, value in kw.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return TrainSettings.model_validate(base)


def make_trainer(run_dir, objective=None, callbacks=(), packing=True, **kw):
    s = settings(**kw)
    model = tiny_llama(seed=0)
    batches = SFTBatches(EXAMPLES, s.batch_size, 128, 0, packing, seed=s.seed)
    return Trainer(model, objective or SFTObjective(), batches, s, run_dir, callbacks=list(callbacks))


class Killed(Exception):
    pass


def kill_at(step_to_die):
    def cb(step, record):
        if step == step_to_die:
            raise Killed()

    return cb


def weights(trainer):
    return {n: p.detach().clone() for n, p in trainer.named}


def test_loss_falls_on_tiny_model(tmp_path):
    result = make_trainer(tmp_path).fit()
    assert result.steps == 20
    assert sum(result.losses[-3:]) / 3 < sum(result.losses[:3]) / 3 - 0.1


def test_kill_and_resume_is_bit_identical(tmp_path):
    straight = make_trainer(tmp_path / "a")
    straight.fit()
    with pytest.raises(Killed):
        make_trainer(tmp_path / "b", callbacks=[kill_at(10)]).fit()
    resumed = make_trainer(tmp_path / "b")
    result = resumed.fit()
    assert result.resumed_from == 10
    a, b = weights(straight), weights(resumed)
    assert all(torch.equal(a[n], b[n]) for n in a)
    # and the optimizer state too
    sa, sb = straight.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
    assert all(torch.equal(sa[k]["exp_avg_sq"], sb[k]["exp_avg_sq"]) for k in sa)


def test_grad_accumulation_4x2_matches_batch_8(tmp_path):
    one = make_trainer(tmp_path / "one", batch_size=8, grad_accum=1)
    two = make_trainer(tmp_path / "two", batch_size=4, grad_accum=2)
    loss_one, _ = one._forward_backward([one.batches.next_batch()])
    loss_two, _ = two._forward_backward([two.batches.next_batch() for _ in range(2)])
    assert math.isclose(loss_one, loss_two, rel_tol=1e-5)
    g1 = {n: p.grad for n, p in one.named}
    g2 = {n: p.grad for n, p in two.named}
    assert all(torch.allclose(g1[n], g2[n], atol=1e-6, rtol=1e-4) for n in g1)
    # and whole runs stay together
    r1 = make_trainer(tmp_path / "r1b", steps=5, batch_size=8, grad_accum=1)
    r2 = make_trainer(tmp_path / "r2b", steps=5, batch_size=4, grad_accum=2)
    r1.fit()
    r2.fit()
    w1, w2 = weights(r1), weights(r2)
    assert all(torch.allclose(w1[n], w2[n], atol=1e-4) for n in w1)


class Poisoned:
    """Wraps an objective; makes chosen calls' loss (or gradient) non-finite, or spike."""

    name = "sft"

    def __init__(self, inner, bad_calls, kind="loss"):
        self.inner, self.bad_calls, self.kind, self.calls = inner, set(bad_calls), kind, 0

    def units(self, batch):
        return self.inner.units(batch)

    def loss(self, model, batch):
        loss, extra = self.inner.loss(model, batch)
        self.calls += 1
        if self.calls in self.bad_calls:
            if self.kind == "loss":
                loss = loss * float("nan")
            elif self.kind == "grad":  # finite loss, NaN gradient: d sqrt(x)/dx at 0 is inf, times 0
                p = next(q for q in model.parameters() if q.requires_grad)
                loss = loss + torch.sqrt(p.sum() * 0.0)
            else:
                loss = loss * 100.0
        return loss, extra


def events(run_dir, kind):
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if r.get("event") == kind]


def test_injected_nan_is_skipped(tmp_path):
    trainer = make_trainer(tmp_path, objective=Poisoned(SFTObjective(), {4}), steps=8)
    result = trainer.fit()
    assert result.steps == 8 and result.counts["nonfinite_loss"] == 1 and result.counts["skipped"] == 1
    assert "rollbacks" not in result.counts
    assert all(torch.isfinite(p).all() for _, p in trainer.named)
    assert events(tmp_path, "skip")[0]["reason"] == "nonfinite_loss"


def test_nonfinite_gradient_is_skipped(tmp_path):
    result = make_trainer(tmp_path, objective=Poisoned(SFTObjective(), {3}, "grad"), steps=6).fit()
    assert result.counts["nonfinite_grad"] == 1


def test_loss_spike_is_skipped(tmp_path):
    result = make_trainer(tmp_path, objective=Poisoned(SFTObjective(), {9}, "spike"), steps=10).fit()
    assert result.counts["loss_spike"] == 1


def test_repeated_nans_roll_back_with_lower_lr(tmp_path):
    trainer = make_trainer(
        tmp_path,
        objective=Poisoned(SFTObjective(), {8, 9, 10}),
        steps=12,
        guard={"max_bad_in_row": 3, "rollback_lr_factor": 0.5},
    )
    result = trainer.fit()
    assert result.counts["rollbacks"] == 1 and result.counts["skipped"] == 3
    (rb,) = events(tmp_path, "rollback")
    assert rb["to"] == "step-00000005" and rb["step"] == 5 and rb["lr_scale"] == 0.5
    assert result.steps == 12 and trainer.lr_scale == 0.5
    applied = [(r["step"], r["lr"]) for r in read_metrics(tmp_path / "metrics.jsonl") if "lr" in r]
    # steps 1..7 applied, three NaNs, back to step 5, then steps 6..12 again at half the LR
    assert [s for s, _ in applied] == list(range(1, 8)) + list(range(6, 13))
    assert applied[7][1] == pytest.approx(0.5 * applied[5][1])


def test_a_rollback_takes_the_checkpoints_loss_history_with_it(tmp_path):
    trainer = make_trainer(
        tmp_path,
        objective=Poisoned(SFTObjective(), {8, 9, 10}),
        steps=12,
        guard={"max_bad_in_row": 3, "rollback_lr_factor": 0.5},
    )
    trainer.fit()
    good = [r["loss"] for r in read_metrics(tmp_path / "metrics.jsonl") if "lr" in r]
    # applied: steps 1..7, then (back at step 5, whose history is steps 1..5) steps 6..12 again;
    # the history spikes are judged against is steps 1..5 and the re-applied 6..12, not 1..7 + 6..12
    assert list(trainer.guard.recent) == pytest.approx(good[:5] + good[7:])


def test_judged_against_an_early_checkpoints_losses_its_steps_are_not_spikes():
    guard = AnomalyGuard(GuardSettings(min_history=3, spike_factor=5.0))
    for _ in range(5):
        guard.record_good(1.0)  # trained: loss ~1
    assert guard.check(27.0, 1.0) == "loss_spike"
    guard.record_rollback([30.0, 28.0, 26.0])  # back to a checkpoint taken while the loss was ~28
    assert guard.check(27.0, 1.0) is None  # 27 < 5 x 28: the early model's own loss, not a spike
    assert guard.check(141.0, 1.0) == "loss_spike"  # 141 > 5 x 28
    guard.record_rollback([])  # a checkpoint with no history (step 0): no spike judged until min_history
    assert guard.check(1e6, 1.0) is None and guard.counts["rollbacks"] == 2


def test_endless_nans_stop_with_a_clear_error(tmp_path):
    trainer = make_trainer(
        tmp_path,
        objective=Poisoned(SFTObjective(), set(range(1, 100))),
        steps=5,
        guard={"max_bad_in_row": 2, "max_rollbacks": 2},
    )
    with pytest.raises(TrainingDiverged, match="after 2 rollbacks"):
        trainer.fit()


def test_corrupted_checkpoint_is_refused(tmp_path):
    make_trainer(tmp_path, steps=5).fit()
    ckpt = list_checkpoints(tmp_path / "checkpoints")[-1]
    load_checkpoint(ckpt)  # intact: loads
    data = bytearray((ckpt / "weights.safetensors").read_bytes())
    data[-3] ^= 0xFF
    (ckpt / "weights.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"weights.safetensors is corrupted .*refusing to load"):
        load_checkpoint(ckpt)
    with pytest.raises(CheckpointError, match="corrupted"):
        make_trainer(tmp_path, steps=10).fit()  # resume refuses it too
    (ckpt / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match="no manifest.json"):
        load_checkpoint(ckpt)


def test_checkpoints_are_pruned_and_atomic(tmp_path):
    make_trainer(tmp_path, steps=20, checkpoint={"every": 5, "keep_last": 2}).fit()
    names = [p.name for p in list_checkpoints(tmp_path / "checkpoints")]
    assert names == ["step-00000015", "step-00000020"]
    assert not list((tmp_path / "checkpoints").glob(".step-*"))
    manifest = json.loads((tmp_path / "checkpoints" / names[-1] / "manifest.json").read_text())
    assert set(manifest["files"]) == {"weights.safetensors", "optimizer.pt", "rng.safetensors", "state.json"}


def _rollback_then_kill(tmp_path):
    """Steps 1..7, poisoned 8-10: a rollback to step 5 (re-saved there), then 6, 7 -> killed."""
    seen = []

    def kill_second_step_7(step, record):
        seen.append(step)
        if seen.count(7) == 2:
            raise Killed()

    with pytest.raises(Killed):
        make_trainer(
            tmp_path,
            objective=Poisoned(SFTObjective(), {8, 9, 10}),
            steps=12,
            callbacks=[kill_second_step_7],
            guard={"max_bad_in_row": 3},
        ).fit()


def test_rollback_survives_a_resume(tmp_path):
    _rollback_then_kill(tmp_path)
    # steps 1..7, rollback to 5 (re-saved with the halved LR), 6, 7 -> killed
    resumed = make_trainer(tmp_path, steps=12)
    result = resumed.fit()
    assert result.resumed_from == 5 and resumed.lr_scale == 0.5 and resumed.guard.counts["rollbacks"] == 1


def test_nan_with_guard_disabled_stops_loudly(tmp_path):
    trainer = make_trainer(tmp_path, objective=Poisoned(SFTObjective(), {2}), steps=4, guard={"enabled": False})
    with pytest.raises(TrainingDiverged, match="guard disabled"):
        trainer.fit()


def test_resume_on_changed_data_is_refused(tmp_path):
    make_trainer(tmp_path, steps=5).fit()
    s = settings(steps=8)
    other = SFTBatches(random_examples(40, seed=8), s.batch_size, 128, 0, True, seed=s.seed)
    trainer = Trainer(tiny_llama(), SFTObjective(), other, s, tmp_path)
    with pytest.raises(ValueError, match="training data changed since the checkpoint"):
        trainer.fit()


def test_compiled_layers_train_like_eager_and_checkpoint_the_same_names(tmp_path):
    eager = make_trainer(tmp_path / "eager", steps=3)
    compiled = make_trainer(tmp_path / "compiled", steps=3, compile=True)
    r1, r2 = eager.fit(), compiled.fit()
    assert [n for n, _ in eager.named] == [n for n, _ in compiled.named]
    assert all(abs(a - b) < 1e-3 for a, b in zip(r1.losses, r2.losses))
    w1, w2 = weights(eager), weights(compiled)
    assert all(torch.allclose(w1[n], w2[n], atol=1e-4) for n in w1)


def test_compile_without_a_cxx_compiler_trains_eagerly_with_the_eager_losses(tmp_path, monkeypatch, capsys):
    """`train.compile: true` where inductor's CPU probe is refused (no C++ compiler here): the
    layers are left eager, said in one line, and the losses are the eager run's, bit for bit."""
    from torch._inductor import config

    from tempering.models import cpu_features

    monkeypatch.setattr(config.cpp, "cxx", ("no-such-cxx-for-tempering",), raising=False)
    cpu_features.clear()
    try:
        refused = make_trainer(tmp_path / "refused", steps=3, compile=True)
        assert all(layer._compiled_call_impl is None for layer in refused.model.get_decoder().layers)
        assert "train.compile: layers run eagerly (InvalidCxxCompiler" in " ".join(capsys.readouterr().err.split())
        eager = make_trainer(tmp_path / "eager", steps=3)
        assert refused.fit().losses == eager.fit().losses
    finally:
        cpu_features.clear()


def test_guard_spike_rule_only_for_positive_losses_and_never_for_policy_gradient():
    guard = AnomalyGuard(GuardSettings(min_history=2, spike_factor=5.0))
    for loss in (0.001, -0.002, 0.001):
        guard.record_good(loss)
    assert guard.check(0.05, 1.0) is None  # running mean 0: "5x the mean" means nothing
    pg = AnomalyGuard(GuardSettings(min_history=2, spike_factor=5.0))
    for loss in (1.0, 1.0):
        pg.record_good(loss)
    assert pg.check(6.0, 1.0) == "loss_spike" and pg.check(6.0, 1.0, spikes=False) is None
    assert pg.check(float("nan"), 1.0, spikes=False) == "nonfinite_loss"


def test_a_resumed_run_keeps_the_first_loss_of_its_first_attempt(tmp_path):
    seen = []
    with pytest.raises(Killed):
        make_trainer(tmp_path, steps=8, callbacks=[lambda step, record: seen.append(record["loss"]), kill_at(6)]).fit()
    result = make_trainer(tmp_path, steps=8).fit()
    assert result.resumed_from == 5 and len(result.losses) == 3  # steps 6, 7, 8 of this attempt
    assert result.loss_first == seen[0] and result.loss_first != result.losses[0]


def listening(trainer):
    """The (version, step) pairs the trainer tells its batch source (its optional `on_weights`)."""
    heard = []
    trainer.batches.on_weights = lambda version, step: heard.append((version, step))
    return heard


def test_weights_version_counts_applied_steps_not_skipped_ones(tmp_path):
    trainer = make_trainer(tmp_path, objective=Poisoned(SFTObjective(), {4}), steps=6)
    heard = listening(trainer)
    trainer.fit()
    # 7 optimizer steps tried, the 4th skipped (NaN): 6 weight changes, each told with its step
    assert trainer.weights_version == 6 and heard == [(v, v) for v in range(1, 7)]
    last = list_checkpoints(tmp_path / "checkpoints")[-1]
    assert load_checkpoint(last)["state"]["weights_version"] == 6


def test_a_rollback_is_a_new_weights_version(tmp_path):
    trainer = make_trainer(
        tmp_path, objective=Poisoned(SFTObjective(), {8, 9, 10}), steps=12, guard={"max_bad_in_row": 3}
    )
    heard = listening(trainer)
    trainer.fit()
    # steps 1..7, three NaNs, back to step 5's weights (version 8), steps 6..12 again (versions 9..15)
    assert heard == [(v, v) for v in range(1, 8)] + [(8, 5)] + [(v + 3, v) for v in range(6, 13)]
    assert trainer.weights_version == 15


def test_a_resume_restores_the_weights_version_and_tells_the_source(tmp_path):
    _rollback_then_kill(tmp_path)
    # steps 1..7, the rollback to step 5 (version 8, re-saved there), 6, 7 -> killed
    resumed = make_trainer(tmp_path, steps=12)
    heard = listening(resumed)
    result = resumed.fit()
    # the checkpoint's version (8), not its step (5): the rollback's weights are not step 5's first ones
    assert result.resumed_from == 5 and heard[0] == (8, 5) and resumed.weights_version == 15


def test_a_checkpoint_without_a_weights_version_resumes_at_its_step(tmp_path, monkeypatch):
    state = Trainer._state
    monkeypatch.setattr(
        Trainer, "_state", lambda self: {k: v for k, v in state(self).items() if k != "weights_version"}
    )
    make_trainer(tmp_path, steps=5).fit()  # checkpoints as written before versions were kept
    assert "weights_version" not in load_checkpoint(list_checkpoints(tmp_path / "checkpoints")[-1])["state"]
    monkeypatch.setattr(Trainer, "_state", state)
    resumed = make_trainer(tmp_path, steps=7)
    heard = listening(resumed)
    resumed.fit()
    assert heard == [(5, 5), (6, 6), (7, 7)] and resumed.weights_version == 7
