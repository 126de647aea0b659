"""The token round-trip check: decode -> encode of a sampled completion gives the sampled ids, or
the sample is flagged `token_roundtrip` and counted in the step's `roundtrip_mismatch_rate`."""

from tempering.config import GRPOSettings
from tempering.data.builtin import arithmetic_tasks
from tempering.rollout.engine import HFEngine
from tempering.rollout.roundtrip import ROUNDTRIP_FLAG, roundtrip_ok
from tempering.rollout.source import RolloutSource
from tests.conftest import tiny_llama


def test_canonical_ids_round_trip_and_a_split_word_does_not(smol_tokenizer):
    ids = smol_tokenizer.encode("The answer is 4181.", add_special_tokens=False)
    assert roundtrip_ok(smol_tokenizer, ids)
    assert roundtrip_ok(smol_tokenizer, [*ids, smol_tokenizer.eos_token_id])  # a stop token re-encodes too
    split = [t for ch in "answer" for t in smol_tokenizer.encode(ch, add_special_tokens=False)]
    assert split != smol_tokenizer.encode("answer", add_special_tokens=False)
    assert not roundtrip_ok(smol_tokenizer, split)  # a non-canonical tokenisation of the same text


def test_the_grpo_source_flags_and_counts_samples_that_do_not_round_trip(smol_tokenizer):
    """A random model samples arbitrary ids, many of which re-encode differently: each such sample
    carries the flag, and the rate in the step's stats is their share."""
    model = tiny_llama(vocab=49152, seed=1).eval()
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    engine = HFEngine(model, smol_tokenizer, precision="fp32")
    settings = GRPOSettings(prompts_per_step=2, group_size=4, max_new_tokens=8, dynamic_sampling=False)
    source = RolloutSource(arithmetic_tasks(8, 0), engine, settings, 1, 0, tokenizer=smol_tokenizer)
    _, seen, _, _, _, _ = source._sample()
    trajectories = [t for g in seen for t in g.trajectories]
    flagged = [ROUNDTRIP_FLAG in t.reward.flags for t in trajectories]
    expected = [not roundtrip_ok(smol_tokenizer, t.completion_ids) for t in trajectories]
    assert flagged == expected and any(flagged)
    source._build(*source._sample(), staleness=0)
    rate = source.stats()["roundtrip_mismatch_rate"]
    assert 0 < rate <= 1
    source.close()
