"""The asynchronous orchestrator (`rollout/orchestrator.py`): no trained token older than K versions
whatever the sampler's and trainer's pace, truthful version stamps, the bound's drops counted, the
stale tokens' importance ratio against the engine's recorded log-probs, and exact checkpoints."""

import copy
import random
import threading
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tempering.config import GRPOSettings
from tempering.models.logprobs import grouped_logprobs
from tempering.objectives import policy_losses
from tempering.objectives.grpo import GRPOObjective
from tempering.rollout.engine import Completion, HFEngine
from tempering.rollout.source import RolloutSource
from tempering.types import Task
from tempering.versions import NOT_SAMPLED
from tests.conftest import tiny_llama

TASKS = [Task(id=f"t{i}", prompt=f"say {i}", verifier={"type": "exact", "answer": "1"}, source="t") for i in range(8)]


class VersionModel(torch.nn.Module):
    """A trainer 'model' whose one weight is its version: an engine synced from it knows which it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))


class SlowEngine:
    """An engine with its own weights that sleeps a random while per call and writes the version its
    weights hold into every log-prob it returns (-version - 1), so a sample tells who sampled it."""

    precision, identity = "fp32", "fake"

    def __init__(self, delays: random.Random, max_delay: float):
        self.delays, self.max_delay, self.held = delays, max_delay, -1
        self.lock = threading.Lock()

    def chat_prompt(self, messages):
        return [5 + ord(c) % 50 for c in messages[-1]["content"]]  # each task its own prompt

    def sync_weights(self, weights):
        state = dict(weights.named_parameters()) if hasattr(weights, "named_parameters") else weights
        self.held = int(state["w"].item())

    def generate(self, prompts, params):
        with self.lock:  # one caller at a time (the sampler thread; the assertion below would catch two)
            time.sleep(self.delays.uniform(0, self.max_delay))
            held = self.held
            return [
                [Completion(i, [3, 4], [-held - 1.0] * 2, "1", "stop") for _ in range(params.n)]
                for i in range(len(prompts))
            ]


def _source(engine, model, K, grad_accum=2, **extra):
    s = GRPOSettings(
        prompts_per_step=2,
        group_size=2,
        max_new_tokens=2,
        dynamic_sampling=False,
        max_off_policy_steps=K,
        generation_chunks=1,
        reward_workers=1,
        **extra,
    )
    source = RolloutSource(TASKS, engine, s, grad_accum=grad_accum, seed=0, model=model)
    source._check = None  # the fake model is no language model: the weight-sync replay has nothing to score
    return source


def _update(model, version):
    with torch.no_grad():
        model.w.fill_(version)


@settings(max_examples=8, deadline=None)
@given(K=st.integers(1, 3), seed=st.integers(0, 1000), rollbacks=st.sets(st.integers(1, 9), max_size=2))
def test_no_trained_token_is_older_than_K_and_every_stamp_is_the_syncing_weights(K, seed, rollbacks):
    """Random sampler and trainer pace. `rollbacks` plants an extra version after those steps (a
    rollback gives the sampler new weights without a batch), so batches sampled ahead of it reach the
    trainer more than K versions old: those groups are dropped and counted."""
    pace = random.Random(seed)
    model = VersionModel()
    source = _source(SlowEngine(random.Random(seed + 1), 0.004), model, K)
    version, at_take, sampled_from, dropped = 0, [], [], 0.0
    try:
        for step in range(1, 11):
            at_take.append(version)
            batches = [source.next_batch() for _ in range(2)]  # one group each: rollout batch step - 1
            seen = set()
            for b in batches:
                if b.n_real_tokens == 0:
                    continue
                sampled = b.versions[b.sampled_mask.bool()]
                assert bool((sampled >= 0).all()) and bool((b.versions[~b.sampled_mask.bool()] == NOT_SAMPLED).all())
                assert int((version - sampled).max()) <= K  # never older than K versions where it trains
                # the stamp is the version of the weights the engine held: it wrote them into the log-probs
                mask = b.completion_mask.bool()
                assert torch.equal(b.engine_logprobs[mask], (-b.versions[mask] - 1).float())
                seen |= set(sampled.tolist())
            sampled_from.append(seen)
            dropped += source.stats().get("stale_dropped_groups", 0.0)
            time.sleep(pace.uniform(0, 0.004))  # the trainer's update
            version += 1 + (step in rollbacks)
            _update(model, version)
            source.on_weights(version, step)
    finally:
        source.close()
    # the gate's rule: batch i samples from the weights of when batch i - K was taken
    pinned = [at_take[max(i - K, 0)] for i in range(10)]
    too_old = [at_take[i] - pinned[i] > K for i in range(10)]
    assert sampled_from == [set() if old else {pinned[i]} for i, old in enumerate(too_old)]
    assert dropped == 2 * sum(too_old)  # two groups a batch


def test_a_planted_rollback_drops_exactly_the_groups_sampled_before_it():
    """K = 2, a rollback after step 3 (versions 0, 1, 2, 3, then 5): batch 4 was sampled from version 1
    (gate: batch i pins the weights of when batch i - K was taken) and trains at version 5, 4 old: its
    two groups are dropped and counted; batch 5 (version 2, trained at 6) likewise; batch 6 (version 5,
    pinned after the rollback) trains at 7, 2 old: kept."""
    model = VersionModel()
    source = _source(SlowEngine(random.Random(0), 0.0), model, K=2, grad_accum=1)
    version, log = 0, []
    try:
        for step in range(1, 8):
            batch = source.next_batch()
            stats = source.stats()
            sampled = batch.versions[batch.sampled_mask.bool()] if batch.n_real_tokens else torch.tensor([])
            log.append((version, sorted(set(sampled.tolist())), stats["stale_dropped_groups"]))
            version += 2 if step == 4 else 1
            _update(model, version)
            source.on_weights(version, step)
    finally:
        source.close()
    assert log == [
        (0, [0], 0.0),
        (1, [0], 0.0),
        (2, [0], 0.0),
        (3, [1], 0.0),
        (5, [], 2.0),  # batch 4, sampled from 2 (pinned when batch 2 was taken), 3 old: dropped
        (6, [], 2.0),  # sampled from 3, 3 old: dropped
        (7, [5], 0.0),
    ]


def _logps(model, batch):
    args = [getattr(batch, k) for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")]
    with torch.no_grad():
        logp, _ = grouped_logprobs(model, *args, 1.0)
    return logp


def test_the_ratio_of_a_two_step_stale_token_is_against_its_recorded_engine_logprob(smol_tokenizer, monkeypatch):
    """K = 2 with an engine holding its own copy: rollout batch 2 is sampled from W0 and trains at W2.
    The GRPO objective's own ratio on it is exp(log p_W2 - the engine's recorded log-prob), per token,
    and that recorded log-prob is W0's, not W2's."""
    trainer = tiny_llama(vocab=49152, seed=3)
    trainer.config.eos_token_id = smol_tokenizer.eos_token_id
    engine = HFEngine(copy.deepcopy(trainer), smol_tokenizer, precision="fp32")
    tasks = [Task(id=f"t{i}", prompt=f"say {i}", verifier={"type": "exact", "answer": str(i)}) for i in range(8)]
    s = GRPOSettings(prompts_per_step=2, group_size=2, max_new_tokens=4, dynamic_sampling=False, max_off_policy_steps=2)
    source = RolloutSource(tasks, engine, s, grad_accum=1, seed=0, model=trainer, precision="fp32")
    w0 = copy.deepcopy(trainer)
    try:
        for version in (1, 2):  # two updates: W0 -> W1 -> W2
            source.next_batch()
            with torch.no_grad():
                for p in trainer.parameters():
                    p.add_(0.05 * torch.randn_like(p))
            source.on_weights(version, step=version)
        batch = source.next_batch()
    finally:
        source.close()
    sampled = batch.sampled_mask.bool()
    assert bool((batch.versions[sampled] == 0).all()) and source.stats()["staleness"] == 2
    assert torch.equal(batch.old_logprobs, batch.engine_logprobs)  # the behaviour policy: the engine's record
    mask = batch.completion_mask.bool()
    torch.testing.assert_close(batch.engine_logprobs[mask], _logps(w0.eval(), batch)[mask], atol=1e-4, rtol=0)
    assert not torch.allclose(batch.engine_logprobs[mask], _logps(trainer.eval(), batch)[mask], atol=1e-2)

    seen = []
    real = policy_losses.clipped_surrogate
    monkeypatch.setattr(
        policy_losses, "clipped_surrogate", lambda ratio, *a: seen.append(ratio.detach()) or real(ratio, *a)
    )
    GRPOObjective(s).loss(trainer, batch)
    (ratio,) = seen
    by_hand = torch.exp(_logps(trainer, batch) - batch.engine_logprobs)
    torch.testing.assert_close(ratio[mask], by_hand[mask], atol=1e-6, rtol=0)
    assert float((ratio[mask] - 1).abs().max()) > 1e-3  # the ratio corrects: the policy moved


def _steps(source, model, first, last, version):
    """Train steps first..last on `source` (one update each); (what each step trained on, the version after)."""
    out = []
    for step in range(first, last + 1):
        b = source.next_batch()
        out.append((b.prompt_ids.tolist(), b.versions.tolist(), b.engine_logprobs.tolist(), source.consumed()))
        version += 1
        _update(model, version)
        source.on_weights(version, step)
    return out, version


def test_a_checkpoint_records_the_batches_sampled_ahead_and_a_resume_trains_them_as_recorded():
    """K = 2: a checkpoint after step 3 holds rollout batches 3 and 4 (sampled from versions 1 and 2);
    a fresh source resumed from it trains steps 4-7 exactly as the uninterrupted one did."""
    model = VersionModel()
    source = _source(SlowEngine(random.Random(0), 0.002), model, K=2, grad_accum=1)
    try:
        _, version = _steps(source, model, 1, 3, 0)
        state = source.state_dict()
        rest, _ = _steps(source, model, 4, 7, version)
    finally:
        source.close()
    assert [(a["index"], a["version"]) for a in state["ahead"]] == [(3, 1), (4, 2)]
    assert (state["cursor"], state["rollouts"]) == (10, 5)  # batches 0-4 drew their prompts

    model = VersionModel()
    _update(model, version)
    resumed = _source(SlowEngine(random.Random(1), 0.002), model, K=2, grad_accum=1)
    try:
        resumed.load_state_dict(state)
        resumed.on_weights(version, 3)  # what the Trainer tells its source on resume
        again, _ = _steps(resumed, model, 4, 7, version)
    finally:
        resumed.close()
    assert again == rest
    assert [sorted({v for row in versions for v in row} - {-1}) for _, versions, _, _ in again] == [[1], [2], [3], [4]]


def test_a_held_out_eval_borrowing_the_engine_never_changes_the_weights_under_a_batch():
    """K = 2: after step 1 the held-out eval syncs the trainer's newest weights (version 1) into the
    engine; batch 2, pinned to version 0 when batch 0 was taken, must still sample from version 0."""
    from types import SimpleNamespace

    model = VersionModel()
    engine = SlowEngine(SimpleNamespace(uniform=lambda lo, hi: hi), 0.1)  # 0.1 s a batch: batch 2 waits
    source = _source(engine, model, K=2, grad_accum=1)
    try:
        first, version = _steps(source, model, 1, 1, 0)
        with source.orchestrator.borrowed_engine():  # what GRPOHeldout.evaluate does
            engine.sync_weights(model)
            assert engine.held == 1
        rest, _ = _steps(source, model, 2, 4, version)
    finally:
        source.close()
    stamps = [sorted({v for row in versions for v in row} - {-1}) for _, versions, _, _ in first + rest]
    held = [sorted({int(-lp - 1) for row in logps for lp in row if lp}) for _, _, logps, _ in first + rest]
    assert stamps == held == [[0], [0], [0], [1]]


class ExplodingEngine(SlowEngine):
    """Samples its first call, then raises inside its own `generate` (a bug in the engine)."""

    def generate(self, prompts, params):
        if self.held >= 0 and getattr(self, "called", False):
            raise ZeroDivisionError("the engine's own bug")
        self.called = True
        return super().generate(prompts, params)


def _trained_until_it_raises(source, model, steps):
    """Steps of `source` on a worker thread (a hang fails the test instead of stalling it); what it raised."""
    out: list[BaseException] = []

    def train():
        try:
            _steps(source, model, 1, steps, 0)
        except BaseException as exc:
            out.append(exc)

    worker = threading.Thread(target=train, daemon=True)
    worker.start()
    worker.join(120)  # a guard against a hang, not a timing: the case ends in seconds
    assert not worker.is_alive(), "the trainer is still waiting on the sampler"
    assert len(out) == 1, out
    return out[0]


def test_an_error_on_the_sampler_thread_reaches_the_trainer_with_its_traceback():
    """K = 1: batch 1 samples on the sampler thread and the engine raises there; the trainer's
    `next_batch` raises that very exception, its traceback still through the engine's frame."""
    import traceback

    model = VersionModel()
    source = _source(ExplodingEngine(random.Random(0), 0.0), model, K=1, grad_accum=1)
    try:
        exc = _trained_until_it_raises(source, model, 3)
    finally:
        source.close()
    assert isinstance(exc, ZeroDivisionError) and str(exc) == "the engine's own bug"
    frames = [f.name for f in traceback.extract_tb(exc.__traceback__)]
    assert frames[-1] == "generate" and "_sample" in frames and "take" in frames


def test_a_reward_thread_stuck_under_the_sampler_thread_stops_the_trainer_with_the_named_line(tmp_path, monkeypatch):
    """K = 1: a reward thread hangs (the fault battery's `reward_thread:hang`) while the sampler thread
    scores batch 1; its verdict times out, the sampler's next submit finds the thread stuck, and the
    trainer waiting in `next_batch` gets the one `WorkerStuck` line naming it: the sampler's own
    deadlines bound the trainer's wait."""
    from tempering import faults
    from tempering.deadlines import WorkerStuck

    monkeypatch.setenv(faults.DIR_ENV, str(tmp_path))
    monkeypatch.setenv(faults.ENV, "reward_thread:hang:6")  # batch 1's second completion (4 a batch)
    model = VersionModel()
    engine = SlowEngine(random.Random(0), 0.0)
    source = _source(engine, model, K=1, grad_accum=1, verifier_timeout_s=0.5, hang_grace_s=0.01)
    try:
        exc = _trained_until_it_raises(source, model, 6)
    finally:
        source.close()
    assert faults.fired(tmp_path, "reward_thread") is not None
    assert isinstance(exc, WorkerStuck), repr(exc)
    assert str(exc).startswith("reward worker thread stuck: scoring task t")


# -- the local engine process ------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, smol_tokenizer):
    path = tmp_path_factory.mktemp("tiny")
    model = tiny_llama(vocab=49152, seed=5)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    model.save_pretrained(path)
    smol_tokenizer.save_pretrained(path)
    return path


def _process_and_local(tiny_dir):
    """A trainer model with weights the process's own load does not have (only a sync gives them),
    the in-process engine on it, three prompts."""
    from tempering.models.load import load_tokenizer
    from tempering.models.lora import load_for_training

    trainer = load_for_training(str(tiny_dir), None)
    with torch.no_grad():
        for p in trainer.parameters():
            p.add_(0.01 * torch.randn_like(p))
    local = HFEngine(trainer, load_tokenizer(str(tiny_dir)), precision="fp32")
    prompts = [local.chat_prompt([{"role": "user", "content": f"say {i}"}]) for i in range(3)]
    return trainer, local, prompts


def _tokens(groups):
    return [[(c.token_ids, c.logprobs) for c in g] for g in groups]


def test_the_engine_process_samples_as_the_in_process_engine_and_a_dead_one_is_replaced_with_its_weights(tiny_dir):
    """Killed between two calls, the process is replaced by a fresh one given the last synced weights:
    the next call samples what the in-process engine samples on the trainer's weights, seed for seed."""
    import os
    import signal

    from tempering.config import SamplingParams
    from tempering.scale.process_engine import ProcessEngine

    params = SamplingParams(max_new_tokens=5, temperature=1.0, n=2, seed=11)
    trainer, local, prompts = _process_and_local(tiny_dir)
    engine = ProcessEngine(str(tiny_dir), None, "fp32", threads=torch.get_num_threads(), call_timeout_s=120)
    try:
        engine.sync_weights(trainer)
        assert engine.last_sync["sync_mb"] > 0
        here = _tokens(local.generate(prompts, params))
        assert _tokens(engine.generate(prompts, params)) == here
        first = engine.process.pid
        os.kill(first, signal.SIGKILL)
        engine.process.join(10)
        with torch.no_grad():  # the trainer moves on: the replacement must get the synced weights, not these
            for p in trainer.parameters():
                p.add_(0.01)
        assert _tokens(engine.generate(prompts, params)) == here
        assert (engine.replaced, engine.hung) == (1, 0) and engine.process.pid != first
    finally:
        engine.close()


def test_an_engine_process_that_fails_again_after_its_replacement_stops_with_one_named_line(
    tiny_dir, tmp_path, monkeypatch
):
    """The first process hangs on its first generation (killed at its deadline), its replacement is
    killed on the resend: the run stops with one line naming the engine process and the call."""
    from tempering import faults
    from tempering.config import SamplingParams
    from tempering.deadlines import WorkerDied
    from tempering.scale.process_engine import ProcessEngine

    params = SamplingParams(max_new_tokens=5, temperature=1.0, n=2, seed=11)
    trainer, _, prompts = _process_and_local(tiny_dir)
    monkeypatch.setenv(faults.DIR_ENV, str(tmp_path))
    monkeypatch.setenv(faults.ENV, "engine_process:hang:1")  # the first process's environment
    engine = ProcessEngine(str(tiny_dir), None, "fp32", threads=1, call_timeout_s=120)
    try:
        engine.sync_weights(trainer)
        monkeypatch.setenv(faults.ENV, "engine_process:kill:2")  # its replacement's: the resend is call 2
        engine.call_timeout_s = 1.0  # the hang's deadline (the replacement's calls get the grace on top)
        with pytest.raises(WorkerDied) as err:
            engine.generate(prompts, params)
        assert str(err.value.at_step(4)) == (
            "engine process (a replacement) died at step 4: sampling 3 prompts (resent: the first was killed "
            "after no answer within 1 s): it died (exit code -9); the run stopped, and `--resume-from` its last "
            "checkpoint resumes it exactly"
        )
        assert (engine.replaced, engine.hung, faults.calls(tmp_path, "engine_process")) == (1, 1, 2)
        assert faults.calls(tmp_path, "engine") == 0  # the process's calls are its own point's, not the replicas'
    finally:
        engine.close()


def test_a_replacement_engine_process_that_hangs_stops_with_the_stuck_line_and_its_bound():
    from tempering.deadlines import WorkerStuck
    from tempering.scale.process_engine import EngineProcessError, _stop

    hung = EngineProcessError("no answer", waited_s=31.2, timeout_s=30.0, exitcode=None)
    line = _stop("engine process (a replacement)", "sampling 3 prompts (resent: the first died (exit code -9))", hung)
    assert type(line) is WorkerStuck
    assert str(line.at_step(2)) == (
        "engine process (a replacement) stuck at step 2: sampling 3 prompts (resent: the first died (exit code -9)): "
        "no answer after 31 s (deadline + grace 30 s); the run stopped, and `--resume-from` its last checkpoint "
        "resumes it exactly"
    )


# -- K = 0 through the orchestrator: the synchronous path, whichever engine holds the weights --------


def _grpo_run(tmp_path, tiny_dir, name, extra, steps=10):
    import json

    import yaml
    from safetensors.torch import load_file
    from typer.testing import CliRunner

    from tempering.cli import app

    cfg = {
        "model": str(tiny_dir),
        "lora": {"r": 4, "alpha": 8, "last_layers": 1},
        "tasks": {"source": "builtin:arithmetic", "ops": "+", "n": 64},
        "heldout": None,
        # a reward the random tiny model earns about every other reply: a k, q, x or z in it
        "reward": [
            {"name": "rare", "weight": 1.0, "verifier": {"type": "regex", "pattern": "[kqxz]", "on": "completion"}}
        ],
        "grpo": {
            "prompts_per_step": 2,
            "group_size": 4,
            "max_new_tokens": 6,
            "dynamic_sampling": False,
            "truncation": "keep",
        },
        "train": {"steps": steps, "precision": "fp32", "threads": 1, "optim": {"lr": 1e-2}},
        "out": str(tmp_path / "runs"),
        "name": name,
    } | extra
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = CliRunner().invoke(app, ["grpo", str(path)])
    assert res.exit_code == 0, res.output
    run = tmp_path / "runs" / name
    steps_ = [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    return steps_, load_file(run / "final" / "adapter_model.safetensors")


def assert_same_run(a, b):
    """The two runs trained the same 10 steps (losses, gradients, rewards, staleness) to the same weights, bit for bit."""
    (steps_a, weights_a), (steps_b, weights_b) = a, b
    assert len(steps_a) == len(steps_b) == 10
    for key in ("loss", "grad_norm", "reward_mean", "staleness_max"):
        assert [r[key] for r in steps_a] == [r[key] for r in steps_b], key
    assert weights_a.keys() == weights_b.keys() and all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)


def test_synchronous_grpo_on_the_engine_process_is_the_in_process_run_bit_for_bit(tmp_path, tiny_dir):
    """The engine process holds a synced copy and samples with the same seeds and one thread, as the
    trainer: the same 10 steps (losses, gradients, rewards) and final weights, bit for bit."""
    here = _grpo_run(tmp_path, tiny_dir, "here", {"engine": {"kind": "hf"}})
    there = _grpo_run(tmp_path, tiny_dir, "there", {"sampler": {"threads": 1}, "engine": {"kind": "hf"}})
    assert sum(r["grad_norm"] > 0 for r in here[0]) >= 5, [
        (r["grad_norm"], r["reward_mean"]) for r in here[0]
    ]  # the weights move
    assert all(r["staleness_max"] == 0.0 for r in here[0])
    assert_same_run(here, there)


def test_the_engine_process_samples_with_the_runs_batching_engine_as_the_in_process_one_does(tmp_path, tiny_dir):
    """The default engine (batching) in the engine process: the same 10 steps and weights, bit for
    bit, as the batching engine in the trainer's process; the process's actor is built on that engine."""
    from tempering.config import EngineSettings
    from tempering.rollout.batching_engine import BatchingEngine
    from tempering.rollout.engine import HFEngine
    from tempering.scale.engines import EngineActor

    here = _grpo_run(tmp_path, tiny_dir, "here", {})
    there = _grpo_run(tmp_path, tiny_dir, "there", {"sampler": {"threads": 1}})
    assert_same_run(here, there)
    assert isinstance(EngineActor(str(tiny_dir), None, "fp32", engine=EngineSettings()).engine, BatchingEngine)
    assert isinstance(EngineActor(str(tiny_dir), None, "fp32").engine, HFEngine)  # Ray's replicas, as before


def test_synchronous_grpo_on_ray_replicas_is_the_in_process_run_bit_for_bit(tmp_path, tiny_dir):
    pytest.importorskip("ray")
    here = _grpo_run(tmp_path, tiny_dir, "here", {"engine": {"kind": "hf"}})
    scale = {"scale": {"reward_workers": 1, "engine_replicas": 1, "num_cpus": 2}}
    ray_run = _grpo_run(tmp_path, tiny_dir, "ray", scale)
    assert_same_run(here, ray_run)


def test_two_steps_off_policy_on_the_engine_process_trains_up_to_two_steps_stale(tmp_path, tiny_dir):
    """`max_off_policy_steps: 2` with `sampler:`: batches 0-2 sample from the start's weights, then
    batch i from those of when batch i - 2 was taken, so steps read staleness 0, 1, 2, 2, 2; none dropped."""
    grpo = {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 6, "dynamic_sampling": False}
    extra = {"sampler": {"threads": 1}, "grpo": grpo | {"truncation": "keep", "max_off_policy_steps": 2}}
    steps, _ = _grpo_run(tmp_path, tiny_dir, "ahead", extra, steps=5)
    assert [r["staleness_max"] for r in steps] == [0.0, 1.0, 2.0, 2.0, 2.0]
    assert [r["staleness"] for r in steps] == [0, 1, 2, 2, 2]
    assert all(r["stale_dropped_groups"] == 0.0 for r in steps)
