"""Drafts for speculative decoding: a small model (e.g. one `temper distill` trained), or
prompt lookup (n-gram copy from the context) where no model fits.

A `Drafter` sees each live row's context (prompt + tokens emitted so far) and proposes up
to k next tokens; after verification it is told how many of them the target kept. A draft
never changes what is generated (verification is lossless), only how fast.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import torch

from tempering.data.padding import PAD_ID, left_pad, right_pad
from tempering.models.logprobs import cache_keyword
from tempering.models.precision import autocast
from tempering.rollout.engine import bf16_linear_weights
from tempering.rollout.speculative_math import sampling_probs


class Drafter(Protocol):
    """What the speculative loop needs of a draft."""

    def begin(self, prompts: Sequence[Sequence[int]]) -> None:
        """A new batch of rows starts from these prompts."""

    def propose(
        self,
        contexts: Sequence[Sequence[int]],
        k: int,
        temperature: float,
        top_p: float,
        generator: torch.Generator | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """(tokens (B, k'), q (B, k', V) or None for a deterministic draft, lengths (B,)), k' <= k."""
        ...

    def accepted(self, n_accepted: Sequence[int]) -> None:
        """How many of the last proposal's tokens each row kept."""

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Only these rows (indices into the current batch) go on."""


class PromptLookupDrafter:
    """Copies the tokens that followed the latest earlier occurrence of the context's last
    n-gram (n from `max_ngram` down to `min_ngram`); proposes nothing when none matches.
    Pays where outputs quote their input (code edits, extraction, summaries)."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"prompt lookup needs 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def begin(self, prompts: Sequence[Sequence[int]]) -> None:
        pass

    def lookup(self, context: Sequence[int], k: int) -> list[int]:
        """Up to k tokens copied after the latest earlier match of the trailing n-gram."""
        ctx = list(context)
        for n in range(min(self.max_ngram, len(ctx) - 1), self.min_ngram - 1, -1):
            tail = ctx[-n:]
            for start in range(len(ctx) - n - 1, -1, -1):  # latest first, never the tail itself
                if ctx[start : start + n] == tail:
                    return ctx[start + n : start + n + k]
        return []

    def propose(self, contexts, k, temperature, top_p, generator):
        found = [self.lookup(c, k) for c in contexts]
        tokens, _ = right_pad(found, PAD_ID)
        return tokens, None, torch.tensor([len(f) for f in found])

    def accepted(self, n_accepted: Sequence[int]) -> None:
        pass

    def keep_rows(self, rows: torch.Tensor) -> None:
        pass


class ModelDrafter:
    """A small causal LM with the target's tokenizer, drafting autoregressively with its own
    KV cache. Rejected draft entries stay in the cache but are masked out (per-row "holes"),
    so rows of a batch may accept different numbers of tokens without recomputing anything.

    Greedy calls draft greedily (q is one-hot); sampled calls draw from the draft's own
    softmax at the same temperature/top-p and hand q to the rejection test.

    `vocab` (optional) restricts the draft's LM head to a subset of token ids, e.g. the most
    frequent ones in the target's outputs (FR-Spec, Zhao et al. 2025): on a small model the
    49k-wide head is most of a draft forward. Tokens outside it are never proposed (q = 0
    there), which costs acceptance, never correctness.

    `min_confidence` (optional) ends a row's proposal early: after a drafted token whose draft
    probability (softmax at temperature 1) is below it, that row drafts no further this step,
    and drafting stops once every row has (HF's `assistant_confidence_threshold`, an
    unsupervised dynamic lookahead; Mamou et al. 2024). Late draft positions are rarely
    accepted, so their draft forwards are mostly wasted; a shorter proposal is verified as
    such (positions past a row's length are not drafts), so output is unchanged.
    """

    def __init__(
        self,
        model: Any,
        precision: str,
        pad_id: int = 0,
        vocab: torch.Tensor | list[int] | None = None,
        min_confidence: float = 0.0,
    ):
        self.model, self.precision, self.pad_id = model, precision, pad_id
        self.min_confidence = min_confidence
        self.vocab = None if vocab is None else torch.as_tensor(vocab, dtype=torch.long).unique()
        self._head = None
        if self.vocab is not None:
            weight = model.get_output_embeddings().weight
            self._head = weight.detach()[self.vocab.to(weight.device)].clone()  # (V', H)
            if precision == "bf16":
                self._head = self._head.to(torch.bfloat16)
        self._cache_kw = cache_keyword(model)
        self.cache: Any = None
        self.mask = torch.zeros(0, 0, dtype=torch.long)
        self.fed: list[int] = []  # per row: context tokens already in the cache (valid entries)
        self._proposed: list[int] = []  # per row: context length when the last proposal began
        self._draft_start = 0  # cache column of the last proposal's first fed draft token

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def weights(self) -> Any:
        """Context the engine holds while it drafts: the draft's Linears in its precision."""
        return bf16_linear_weights(self.model, self.precision)

    def _forward(self, ids: torch.Tensor, new_mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Full-vocabulary logits (B, V) of the last position (-inf outside `vocab`)."""
        self.mask = torch.cat([self.mask, new_mask], dim=1)
        inputs = dict(
            input_ids=ids.to(self.device),
            attention_mask=self.mask.to(self.device),
            position_ids=positions.to(self.device),
            use_cache=True,
            **{self._cache_kw: self.cache},
        )
        with autocast(self.precision, self.device):
            if self._head is None:
                return self.model(**inputs, logits_to_keep=1).logits[:, -1].float().cpu()
            hidden = self.model.get_decoder()(**inputs).last_hidden_state[:, -1]
            small = (hidden @ self._head.T).float().cpu()
        full = torch.full((small.shape[0], self.model.config.vocab_size), float("-inf"))
        assert self.vocab is not None  # the head is cut exactly when a vocabulary is given
        return full.index_copy_(1, self.vocab, small)

    @torch.no_grad()
    def begin(self, prompts: Sequence[Sequence[int]]) -> None:
        from transformers import DynamicCache

        self.model.eval()
        self.cache = DynamicCache()
        self.mask = torch.zeros((len(prompts), 0), dtype=torch.long)
        # the last prompt token is fed with the first proposal (it predicts the first draft)
        heads = [list(p[:-1]) or [self.pad_id] for p in prompts]
        ids, mask = left_pad(heads, self.pad_id)
        for i, p in enumerate(prompts):
            if len(p) == 1:
                mask[i] = 0
        self._forward(ids, mask, (mask.cumsum(dim=1) - 1).clamp(min=0))
        self.fed = [len(p) - 1 for p in prompts]

    @torch.no_grad()
    def propose(self, contexts, k, temperature, top_p, generator):
        unfed = [list(c[f:]) for c, f in zip(contexts, self.fed)]
        self._proposed = [len(c) for c in contexts]
        ids, mask = left_pad(unfed, self.pad_id)
        width = ids.shape[1]
        positions = torch.tensor(
            [[max(f + j - (width - len(u)), 0) for j in range(width)] for f, u in zip(self.fed, unfed)]
        )
        logits = self._forward(ids, mask, positions)
        self._draft_start = self.mask.shape[1]
        next_pos = torch.tensor([[len(c)] for c in contexts])
        tokens, probs = [], []
        lengths = torch.zeros(len(contexts), dtype=torch.long)
        drafting = torch.ones(len(contexts), dtype=torch.bool)  # rows still proposing
        for step in range(k):
            if temperature == 0:
                tok = logits.argmax(dim=-1)
            else:
                q = sampling_probs(logits, temperature, top_p)
                tok = torch.multinomial(q, 1, generator=generator).squeeze(1)
                probs.append(q)
            tokens.append(tok)
            lengths += drafting.long()
            if self.min_confidence > 0:
                confidence = torch.softmax(logits, dim=-1).gather(1, tok[:, None]).squeeze(1)
                drafting &= confidence >= self.min_confidence
            if step == k - 1 or not bool(drafting.any()):
                break
            logits = self._forward(
                tok[:, None].cpu(), torch.ones((len(contexts), 1), dtype=torch.long), next_pos + step
            )
        q_all = torch.stack(probs, dim=1) if probs else None
        return torch.stack(tokens, dim=1).cpu(), q_all, lengths

    def accepted(self, n_accepted: Sequence[int]) -> None:
        # the cache holds the unfed context, then drafts d_1..d_{k-1}; keep d_1..d_n only
        n = torch.tensor(list(n_accepted))
        fed_drafts = self.mask.shape[1] - self._draft_start
        kept = n.clamp(max=fed_drafts)
        self.mask[:, self._draft_start :] = (torch.arange(fed_drafts)[None, :] < kept[:, None]).long()
        self.fed = [p + int(c) for p, c in zip(self._proposed, kept.tolist())]

    def keep_rows(self, rows: torch.Tensor) -> None:
        self.cache.batch_select_indices(rows.to(self.device))
        self.mask = self.mask[rows]
        kept = rows.tolist()
        self.fed = [self.fed[r] for r in kept]
