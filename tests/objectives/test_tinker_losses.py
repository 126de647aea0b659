"""The Tinker API's built-in losses on hand-derived numbers (sums over positions, never means),
looked up by name in the one registry of algorithms."""

from __future__ import annotations

import math

import pytest
import torch

from tempering import algorithms


def loss(name: str, logp: torch.Tensor, inputs: dict[str, torch.Tensor], **config: float) -> torch.Tensor:
    """The registered loss with its defaults under `config` (what the server computes per datum)."""
    registered = algorithms.lookup("tinker_loss", name)
    return registered.fn(logp, inputs, **{**registered.options["config"], **config})


def test_the_tinker_losses_are_registered_with_their_inputs_and_settings():
    algorithms.load()
    assert algorithms.names("tinker_loss") == [
        "cispo",
        "cross_entropy",
        "dro",
        "importance_sampling",
        "ppo",
        "stable_reinforce",
    ]
    assert algorithms.lookup("tinker_loss", "dro").options["config"] == {"beta": None}
    assert algorithms.lookup("tinker_loss", "cispo").options["config"] == {
        "clip_low_threshold": 0.8,
        "clip_high_threshold": 1.2,
    }
    sr = algorithms.lookup("tinker_loss", "stable_reinforce").options
    assert sr["provenance"] and sr["inputs"] == ("target_tokens", "logprobs", "advantages")
    assert not algorithms.lookup("tinker_loss", "ppo").options["provenance"]


def test_cross_entropy_is_the_weighted_sum_of_negative_log_probs():
    logp = torch.tensor([-1.0, -2.0, -0.5])
    assert float(loss("cross_entropy", logp, {"weights": torch.tensor([0.0, 1.0, 2.0])})) == pytest.approx(2.0 + 1.0)


def test_importance_sampling_weights_advantages_by_the_unclipped_ratio():
    # ratios e^0.5, 1, e^-1; advantages 1, -2, 3: -(1.6487 - 2 + 1.1036) = -0.7523
    logp = torch.tensor([-1.0, -1.0, -2.0])
    inputs = {"logprobs": torch.tensor([-1.5, -1.0, -1.0]), "advantages": torch.tensor([1.0, -2.0, 3.0])}
    expected = -(math.exp(0.5) * 1 - 2 + math.exp(-1) * 3)
    assert float(loss("importance_sampling", logp, inputs)) == pytest.approx(expected)


def test_ppo_clips_the_ratio_to_its_thresholds_pessimistically():
    # ratio e^0.5 = 1.65: with A = +1 the clipped 1.2 counts (min), with A = -1 the unclipped -1.65
    logp = torch.tensor([0.0, 0.0])
    inputs = {"logprobs": torch.tensor([-0.5, -0.5]), "advantages": torch.tensor([1.0, -1.0])}
    assert float(loss("ppo", logp, inputs)) == pytest.approx(-1.2 + math.exp(0.5))
    # thresholds from the request: [0.5, 1.5] clips A = +1 at 1.5
    loose = loss("ppo", logp, inputs, clip_low_threshold=0.5, clip_high_threshold=1.5)
    assert float(loose) == pytest.approx(-1.5 + math.exp(0.5))


def test_the_gradient_of_importance_sampling_is_ratio_times_advantage():
    logp = torch.tensor([-1.0], requires_grad=True)
    inputs = {"logprobs": torch.tensor([-1.0]), "advantages": torch.tensor([2.0])}
    loss("importance_sampling", logp, inputs).backward()
    assert logp.grad is not None and float(logp.grad[0]) == pytest.approx(-2.0)  # d(-r*A)/dlogp = -r*A, r = 1


def test_cispo_weighs_log_probs_by_the_ratio_clipped_on_both_sides_and_detached():
    # ratios e^0.5 = 1.65 -> 1.2, e^-0.5 = 0.61 -> 0.8, 1 -> 1; loss -(1.2*1*0 + 0.8*1*0 + 1*2*-1) = 2
    logp = torch.tensor([0.0, 0.0, -1.0], requires_grad=True)
    inputs = {"logprobs": torch.tensor([-0.5, 0.5, -1.0]), "advantages": torch.tensor([1.0, 1.0, 2.0])}
    value = loss("cispo", logp, inputs)
    assert value.item() == pytest.approx(2.0)
    value.backward()  # the weight is a constant: d/dlogp = -clip(r) * A
    assert logp.grad is not None and logp.grad.tolist() == pytest.approx([-1.2, -0.8, -2.0])
    # log-probs -1 under ratios e^0.5, e^-0.5 and A = 1, 2: -(1.2*-1 + 0.8*2*-1) = 2.8 by default,
    # -(1.1*-1 + 0.9*2*-1) = 2.9 with the request's thresholds [0.9, 1.1]
    logp2 = torch.tensor([-1.0, -1.0])
    inputs2 = {"logprobs": torch.tensor([-1.5, -0.5]), "advantages": torch.tensor([1.0, 2.0])}
    assert float(loss("cispo", logp2, inputs2)) == pytest.approx(2.8)
    tight = loss("cispo", logp2, inputs2, clip_low_threshold=0.9, clip_high_threshold=1.1)
    assert float(tight) == pytest.approx(2.9)


def test_dro_is_reinforce_with_a_quadratic_pull_to_the_sampler():
    # beta 0.5: -[(-1*1 - 0.25*0.5^2) + (-2*-1 - 0)] = -(-1.0625 + 2) = -0.9375
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    inputs = {"logprobs": torch.tensor([-1.5, -2.0]), "advantages": torch.tensor([1.0, -1.0])}
    value = loss("dro", logp, inputs, beta=0.5)
    assert value.item() == pytest.approx(-0.9375)
    value.backward()  # -A + beta * (logp - q)
    assert logp.grad is not None and logp.grad.tolist() == pytest.approx([-0.75, 1.0])


def stable_inputs() -> dict[str, torch.Tensor]:
    return {
        "logprobs": torch.tensor([9.0, 9.0, 9.0, 9.0]),  # the client's copy: not what the loss reads
        "advantages": torch.tensor([0.0, 1.0, 1.0, -1.0]),
        "sampled": torch.tensor([0.0, 1.0, 1.0, 1.0]),
        "sampler_logprobs": torch.tensor([0.0, -2.0, -2.0, -0.5]),
    }


def test_stable_reinforce_truncates_the_recorded_ratio_on_sampled_tokens_only():
    # position 0 is a prompt token (adds 0); ratios p/q' = e^1 -> capped at 2, 1, 1:
    # -(2*1*-1) - (1*1*-2) - (1*-1*-0.5) = 2 + 2 - 0.5 = 3.5; gradient -min(r', 2) * A
    logp = torch.tensor([-1.0, -1.0, -2.0, -0.5], requires_grad=True)
    value = loss("stable_reinforce", logp, stable_inputs())
    assert value.item() == pytest.approx(3.5)
    value.backward()
    assert logp.grad is not None and logp.grad.tolist() == pytest.approx([0.0, -2.0, -1.0, 1.0])
    # a cap of 3 lets e^1 = 2.718 through: 2.718 + 2 - 0.5
    looser = loss("stable_reinforce", logp.detach(), stable_inputs(), clip_high_threshold=3.0)
    assert float(looser) == pytest.approx(math.e + 1.5)


def test_stable_reinforce_adds_a_k3_kl_to_the_sampler_with_kl_coeff():
    # k3 at position 1: q' - logp = -1 -> e^-1 + 1 - 1 = 0.3679; 0 where p = q'; 3.5 + 0.1 * 0.3679
    logp = torch.tensor([-1.0, -1.0, -2.0, -0.5])
    value = loss("stable_reinforce", logp, stable_inputs(), kl_coeff=0.1)
    assert float(value) == pytest.approx(3.5 + 0.1 * math.exp(-1))
