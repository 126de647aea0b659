"""Speculative decoding behind the `Engine` protocol: a draft proposes k tokens, one target
forward verifies them all (the rule is in `speculative_math`).

    engine = SpeculativeEngine(target, tokenizer, ModelDrafter(draft, "bf16"), k=4)
    engine = SpeculativeEngine(target, tokenizer, PromptLookupDrafter(), k=8)
    groups = engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=64))
    engine.stats.summary()   # acceptance rate, mean acceptance length, per position, ...

Lossless: greedy output is the target's own greedy output, and sampled output has the
target's distribution, whatever the draft, so `identity` is the target's: a cached eval of
the target is an eval of this engine (`tests/rollout/test_speculative.py` checks both).

Batching: rows accept different numbers of drafts per step. Instead of cropping each row's
KV cache, the rejected entries stay and are masked out of attention ("holes"); each row
keeps its own position counter, so RoPE positions stay contiguous. Finished rows leave the
batch (cache rows selected away), like `HFEngine`.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from tempering.config import SamplingParams
from tempering.data.padding import left_pad
from tempering.models.precision import autocast
from tempering.rollout.drafters import Drafter
from tempering.rollout.engine import Completion, HFEngine, cut_at_stop, inference_weights, refuse_grammar
from tempering.rollout.speculative_math import sampling_probs, verify_greedy, verify_sampled

__all__ = ["SpeculativeEngine", "SpeculativeStats"]


@dataclass
class SpeculativeStats:
    """Acceptance bookkeeping over every verification step of every row."""

    k: int
    proposed_at: list[int] = field(default_factory=list)  # per draft position: how often proposed
    accepted_at: list[int] = field(default_factory=list)  # per draft position: how often accepted
    steps: int = 0  # (row, target forward) pairs
    emitted: int = 0  # tokens emitted by those steps (accepted drafts + one target token each)
    target_forwards: int = 0  # batched target forwards (prefill excluded)
    # per row of a `generate` call (prompt-major, `params.n` per prompt): draft tokens proposed and
    # accepted, summed over the calls since these stats were made (new stats per call: per-prompt figures)
    proposed_by_row: dict[int, int] = field(default_factory=dict)
    accepted_by_row: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.proposed_at = self.proposed_at or [0] * self.k
        self.accepted_at = self.accepted_at or [0] * self.k

    def record(self, lengths: Sequence[int], n_accepted: Sequence[int], rows: Sequence[int] | None = None) -> None:
        """One verification step: per live row its draft length, its accepted drafts and (`rows`) its flat row."""
        self.target_forwards += 1
        for i, (length, n) in enumerate(zip(lengths, n_accepted)):
            self.steps += 1
            self.emitted += int(n) + 1
            for j in range(int(length)):
                self.proposed_at[j] += 1
                self.accepted_at[j] += int(j < n)
            if rows is not None:
                row = rows[i]
                self.proposed_by_row[row] = self.proposed_by_row.get(row, 0) + int(length)
                self.accepted_by_row[row] = self.accepted_by_row.get(row, 0) + min(int(n), int(length))

    def summary(self) -> dict[str, Any]:
        proposed, accepted = sum(self.proposed_at), sum(self.accepted_at)
        return {
            "k": self.k,
            "acceptance_rate": accepted / proposed if proposed else 0.0,
            "mean_accepted_drafts": accepted / self.steps if self.steps else 0.0,
            "mean_acceptance_length": self.emitted / self.steps if self.steps else 0.0,
            "acceptance_per_position": [a / p if p else None for a, p in zip(self.accepted_at, self.proposed_at)],
            "target_forwards": self.target_forwards,
        }


class SpeculativeEngine(HFEngine):
    """`Engine` over a target HF causal LM and a `Drafter`; same outputs as the target alone.
    Device, identity (the target's: speculation changes speed, never samples), weight sync
    (a stale draft only lowers acceptance) and chat rendering are `HFEngine`'s."""

    def __init__(self, model: Any, tokenizer: Any, drafter: Drafter, k: int = 4, precision: str = "auto"):
        if k < 1:
            raise ValueError(f"speculative decoding needs k >= 1 draft tokens, got {k}")
        super().__init__(model, tokenizer, precision=precision)
        self.drafter, self.k = drafter, k
        self.stats = SpeculativeStats(k)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        """`params.n` completions per prompt, grouped per prompt (each sample is its own row)."""
        if params.n < 1 or params.max_new_tokens < 1:
            raise ValueError("SamplingParams needs n >= 1 and max_new_tokens >= 1")
        if any(len(p) == 0 for p in prompts):
            raise ValueError("speculative decoding needs non-empty prompts")
        if getattr(params, "top_logprobs", 0):
            raise ValueError("SpeculativeEngine does not report top_logprobs; use HFEngine for them")
        refuse_grammar(self, params)
        self.check_prompts(prompts)
        generator = torch.Generator().manual_seed(params.seed) if params.seed is not None else None
        rows = [list(p) for p in prompts for _ in range(params.n)]
        was_training = self.model.training
        self.model.eval()
        draft_weights = getattr(self.drafter, "weights", nullcontext)
        try:
            with inference_weights(self.model, self.precision), draft_weights():
                completions = self._generate_rows(rows, params, generator)
        finally:
            self.model.train(was_training)
        out: list[list[Completion]] = [[] for _ in prompts]
        for flat, c in enumerate(completions):
            c.prompt_index = flat // params.n
            out[c.prompt_index].append(c)
        return out

    def _target(
        self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any, last_only: bool = False
    ) -> torch.Tensor:
        device = self.device
        extra = {"logits_to_keep": 1} if last_only else {}
        with autocast(self.precision, device):
            out = self.model(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                position_ids=positions.to(device),
                use_cache=True,
                **extra,
                **{self._cache_kw: cache},
            )
        return out.logits.float().cpu()

    @torch.no_grad()
    def _generate_rows(
        self, rows: list[list[int]], params: SamplingParams, generator: torch.Generator | None
    ) -> list[Completion]:
        from transformers import DynamicCache

        stops = set(params.stop_token_ids) | ({self.eos_id} if self.eos_id is not None else set())
        cache = DynamicCache()
        ids, mask = left_pad(rows, self.pad_id)
        logits = self._target(ids, mask, (mask.cumsum(dim=1) - 1).clamp(min=0), cache, last_only=True)[:, -1]
        self.drafter.begin(rows)
        total = len(rows)
        out_tokens: list[list[int]] = [[] for _ in range(total)]
        out_logp: list[list[float]] = [[] for _ in range(total)]
        finish = ["length"] * total
        live = list(range(total))  # batch row -> flat index
        first = self._pick(
            logits[:, None],
            torch.zeros((total, 0), dtype=torch.long),
            None,
            torch.zeros(total, dtype=torch.long),
            params,
            generator,
        )[1]
        self._emit(live, first[:, None], [0] * total, logits[:, None], params, stops, out_tokens, out_logp, finish)
        while True:
            keep = [r for r, flat in enumerate(live) if not self._done(flat, out_tokens, finish, params)]
            if not keep:
                break
            if len(keep) < len(live):
                idx = torch.tensor(keep)
                cache.batch_select_indices(idx.to(self.device))
                mask = mask[idx]
                self.drafter.keep_rows(idx)
                live = [live[r] for r in keep]
            contexts = [rows[flat] + out_tokens[flat] for flat in live]
            budget = min(self.k, max(params.max_new_tokens - len(out_tokens[flat]) for flat in live) - 1)
            if budget > 0:
                draft, q, lengths = self.drafter.propose(contexts, budget, params.temperature, params.top_p, generator)
            else:
                draft, q, lengths = torch.zeros((len(live), 0), dtype=torch.long), None, torch.zeros(len(live))
            lengths = lengths.long()
            width = draft.shape[1]
            step_ids = torch.cat([torch.tensor([[c[-1]] for c in contexts]), draft], dim=1)
            positions = torch.tensor([[len(c) - 1] for c in contexts]) + torch.arange(width + 1)[None, :]
            mask = torch.cat([mask, torch.ones((len(live), width + 1), dtype=torch.long)], dim=1)
            logits = self._target(step_ids, mask, positions, cache)  # (B, width+1, V)
            n, nxt = self._pick(logits, draft, q, lengths, params, generator)
            start = mask.shape[1] - width  # cache column of the first draft token
            mask[:, start:] = (torch.arange(width)[None, :] < n[:, None]).long()  # rejected drafts: holes
            n_list = n.tolist()
            self.drafter.accepted(n_list)
            self.stats.record(lengths.tolist(), n_list, live)
            emitted = torch.cat([draft, nxt[:, None]], dim=1).scatter(1, n[:, None], nxt[:, None])
            self._emit(live, emitted, n_list, logits, params, stops, out_tokens, out_logp, finish)
        return [self._completion(out_tokens[f], out_logp[f], finish[f], params, stops) for f in range(total)]

    def _pick(self, logits, draft, q, lengths, params, generator):
        if params.temperature == 0:
            return verify_greedy(logits, draft, lengths)
        return verify_sampled(sampling_probs(logits, params.temperature, params.top_p), q, draft, lengths, generator)

    def _emit(self, live, emitted, n_accepted, logits, params, stops, out_tokens, out_logp, finish) -> None:
        """Append each row's new tokens (emitted[r, :n_accepted[r] + 1], cut at a stop or at
        max_new_tokens) with the target's log-probs at the sampling temperature (greedy
        reports temperature 1, like `HFEngine`)."""
        temp = params.temperature if params.temperature > 0 else 1.0
        logp = torch.log_softmax(logits / temp, dim=-1).gather(-1, emitted[..., None]).squeeze(-1).tolist()
        tokens = emitted.tolist()
        for r, flat in enumerate(live):
            for j in range(n_accepted[r] + 1):
                if len(out_tokens[flat]) >= params.max_new_tokens:
                    break
                tok = tokens[r][j]
                out_tokens[flat].append(tok)
                out_logp[flat].append(logp[r][j])
                if tok in stops or (params.stop and self._stop_hit(out_tokens[flat], params.stop, stops)):
                    finish[flat] = "stop"
                    break

    def _stop_hit(self, tokens: list[int], stop: tuple[str, ...], stop_ids: set[int]) -> bool:
        window = max(len(s) for s in stop) + 4
        text = self.tokenizer.decode([t for t in tokens[-window:] if t not in stop_ids], skip_special_tokens=False)
        return any(s in text for s in stop)

    @staticmethod
    def _done(flat, out_tokens, finish, params) -> bool:
        return finish[flat] == "stop" or len(out_tokens[flat]) >= params.max_new_tokens

    def _completion(self, toks, logps, finish, params, stops) -> Completion:
        text, cut = cut_at_stop(
            self.tokenizer.decode([t for t in toks if t not in stops], skip_special_tokens=False), params.stop
        )
        return Completion(0, toks, logps, text, "stop" if cut else finish)
