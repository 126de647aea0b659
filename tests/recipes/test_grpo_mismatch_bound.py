"""`grpo.max_logprob_mismatch`: the run stops, with a one-line reason, when the trainer's and
the rollout engine's log-probs of the sampled tokens drift apart."""

import pytest

from tempering.recipes.grpo import MismatchExceeded, mismatch_bound


def test_the_bound_stops_only_above_it():
    check = mismatch_bound(0.05)
    check(1, {"logprob_mismatch": 0.05})  # at the bound: fine
    check(2, {"loss": 1.0})  # a step without the metric: nothing to judge
    with pytest.raises(
        MismatchExceeded,
        match=r"step 3: mean \|log p_train - log p_rollout\| = 0.07 exceeds "
        r"grpo.max_logprob_mismatch 0.05",
    ):
        check(3, {"logprob_mismatch": 0.07})
    mismatch_bound(None)(4, {"logprob_mismatch": 9.0})  # no bound: only logged
