"""The rollout engine: the `Engine` protocol and `HFEngine`, batched sampling over an HF model.

    engine: Engine = HFEngine(model, tokenizer)
    groups = engine.generate([prompt_ids, ...], SamplingParams(n=8, max_new_tokens=32))
    groups[i][j].token_ids, .logprobs, .text, .finish_reason      # prompt i, sample j

Callers (GRPO's batch source, the eval runner, held-out monitoring) use only the protocol,
so another implementation (vLLM, a remote server) can replace `HFEngine` without them
changing: they never touch a model or tokenizer through the engine.

How an `HFEngine` call runs:
  1. prompts are left-padded into one batch and prefilled once (the LM head only on the
     last position);
  2. the KV cache is repeated `n` times along the batch (each prompt's prefix shared by its
     n samples; no prompt is recomputed per sample);
  3. a decode loop samples one token per live row (temperature, top-p; temperature 0 is
     greedy), records its log-prob, and drops finished rows from the batch and the cache
     (a row finishes on eos, a stop token, a completed stop string, or `max_new_tokens`).

Log-probs are of the sampled token under softmax(logits / temperature) before top-p
filtering, i.e. the distribution the trainer recomputes (`tempering.models.logprobs`), so the
engine-vs-trainer mismatch metric compares like with like. Greedy calls report log-probs
at temperature 1.

Images (vision-language models): `chat_prompt` of a conversation with `image_url` parts returns an
`ImagePrompt`, the token ids with the processor's pixel inputs attached; the prefill passes the
pixels of the chunk's prompts (stacked in prompt order) and decoding runs on the cache as for
text. Tested on the LLaVA-shaped model assembled here; models with 3-D rope positions
(Qwen2-VL) are not driven by `HFEngine` yet (the batching engine takes no images either: the
vision paths build `HFEngine`).

Precision follows the trainer (`auto`: bf16 only where the hardware has native bf16).
LoRA adapters are merged into the base weights for the duration of a `generate` call (the
adapter's extra small matmuls doubled decode time on CPU) and the base weights are restored
bit-exactly afterwards, so training and checkpoints never see the merge.
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, overload, runtime_checkable

import torch

from tempering.batches import check_token_ids, embedding_rows
from tempering.config import SamplingParams, SamplingSettings
from tempering.data.padding import left_pad, pad_id
from tempering.hashing import model_state_hash
from tempering.models.logprobs import cache_keyword
from tempering.models.precision import autocast, resolve_precision
from tempering.models.rope import context_window

__all__ = [
    "Completion",
    "Engine",
    "HFEngine",
    "ImagePrompt",
    "SamplingParams",
    "SamplingSettings",
    "bf16_linear_weights",
    "chat_prompt_ids",
    "cut_at_stop",
    "host_lists",
    "inference_weights",
    "merged_lora",
    "prompt_seed",
    "row_uniforms",
    "sample_seed",
    "sample_tokens",
    "top_logprobs",
]


@dataclass
class Completion:
    prompt_index: int
    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    """"stop" (a stop token was sampled and is included in token_ids, or a stop string was
    completed: the text ends before it) or "length"."""
    top_logprobs: list[list[tuple[int, float]]] | None = None
    """Per generated token, the `params.top_logprobs` most likely (token id, log-prob), when asked."""
    routing: torch.Tensor | None = None
    """MoE models, when the engine records routing: (prompt + completion tokens, layers, k) experts
    each token was sent to; -1 for the last token, which no forward pass read."""
    versions: list[int] | None = None
    """Per generated token, the policy version of the weights that sampled it, when they changed during
    the call (partial rollouts, `rollout/partial.py`); None: the call ran on one version throughout."""

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


class ImagePrompt(list):
    """A prompt's token ids (a list, as every engine takes them) with its images' pixel inputs
    (`pixel_values`, `image_grid_thw`: the processor's outputs for this prompt alone)."""

    def __init__(self, ids: Sequence[int], pixels: dict[str, torch.Tensor]):
        super().__init__(ids)
        self.pixels = pixels


def prompt_pixels(prompts: Sequence[Sequence[int]], device: torch.device) -> dict[str, torch.Tensor]:
    """The pixel inputs of a batch of prompts, concatenated in prompt order ({} for text prompts)."""
    parts = [p.pixels for p in prompts if isinstance(p, ImagePrompt) and p.pixels]
    return {k: torch.cat([x[k] for x in parts]).to(device) for k in (parts[0] if parts else {})}


@contextmanager
def merged_lora(model: Any):
    """Merge active LoRA adapters into the base weights; restore the exact base weights after."""
    if not hasattr(model, "merge_adapter"):
        yield
        return
    from peft.tuners.lora import LoraLayer

    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    saved = [_base_weight(m).detach().clone() for m in layers]
    with torch.no_grad():
        model.merge_adapter()
    try:
        yield
    finally:
        with torch.no_grad():
            model.unmerge_adapter()
            for m, w in zip(layers, saved):  # unmerge is W - BA in floating point: restore exactly
                _base_weight(m).copy_(w)


def _base_weight(layer: Any) -> torch.Tensor:
    """The weight of a LoRA layer's base module (a Linear's: always a tensor)."""
    return layer.get_base_layer().weight


@contextmanager
def bf16_linear_weights(model: Any, precision: str):
    """Under "bf16", every fp32 `nn.Linear` answers from a bf16 copy of its weight and bias for
    the duration; the fp32 parameters are put back untouched after.

    bf16 autocast casts each Linear's fp32 weight to bf16 on every forward: at batch 1 that
    re-read and re-write of every weight made decoding 2x slower than fp32 (11.7 vs 22 tokens/s
    on the default model, measured). Casting once per call gives autocast the bf16 weights it
    would have made, so the numbers are the same (norms, embeddings and the residual stream stay
    as autocast keeps them). A tied output head gets its own copy; the embedding keeps the fp32
    parameter. "fp32" changes nothing.
    """
    if precision != "bf16":
        yield
        return
    saved: list[tuple[torch.nn.Module, str, torch.nn.Parameter]] = []
    with torch.no_grad():
        for module in model.modules():
            if not isinstance(module, torch.nn.Linear):
                continue
            for name in ("weight", "bias"):
                param = getattr(module, name)
                if param is not None and param.dtype == torch.float32:
                    saved.append((module, name, param))
                    setattr(module, name, torch.nn.Parameter(param.to(torch.bfloat16), requires_grad=False))
    try:
        yield
    finally:
        for module, name, param in saved:
            setattr(module, name, param)


@contextmanager
def inference_weights(model: Any, precision: str):
    """The weights an engine samples from: LoRA merged (`merged_lora`), Linears in the compute
    precision (`bf16_linear_weights`); the trainer's parameters are exactly restored after."""
    with merged_lora(model), bf16_linear_weights(model, precision):
        yield


def sample_seed(seed: int, index: int) -> int:
    """A generator seed for sample `index` of a request seeded with `seed`."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{index}".encode()).digest()[:8], "little") >> 1


@overload
def prompt_seed(seed: int, index: int) -> int: ...
@overload
def prompt_seed(seed: None, index: int) -> None: ...
def prompt_seed(seed: int | None, index: int) -> int | None:
    """The seed of prompt `index` in a seeded `generate` call over several prompts: each
    prompt's samples then depend on it alone, not on the batch (prompt 0 keeps the seed, as a
    lone request would); None stays unseeded."""
    return None if seed is None else seed + 1_000_003 * index


def row_uniforms(generators: Sequence[torch.Generator | None]) -> torch.Tensor:
    """One uniform draw per row, each from its row's own generator (None: the global one):
    the random input `sample_tokens` takes for seeded sequences."""
    return torch.cat([torch.rand(1, generator=g) for g in generators])


def top_p_cut(weights: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-p (nucleus) truncation of (..., V) unnormalised probabilities, the one rule every sampler
    and the speculative verifier share: sorted descending, every token past the smallest prefix
    whose mass reaches `top_p` of the total is zeroed (the first token always stays).

    Returns:
        (kept weights in sorted order (..., V), the sort order (..., V), the total mass (...,)).
    """
    weights, order = weights.sort(dim=-1, descending=True)
    mass = weights.cumsum(dim=-1)
    total = mass[..., -1]
    return weights.masked_fill_(mass - weights >= top_p * total[..., None], 0.0), order, total


def sample_tokens(
    logits: torch.Tensor,
    temperature: float,
    top_p: float,
    generator: torch.Generator | None,
    uniforms: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row of (B, V) logits; returns (tokens, their log-probs).

    Inverse-CDF sampling: row b takes the first token whose cumulative probability exceeds
    uniforms[b] x the kept mass. `uniforms` (B,) in [0, 1) lets each row bring its own
    random draw (the batching engine's per-sequence generators); by default they are drawn
    from `generator`.
    """
    logits = logits.float()
    if temperature == 0:
        tokens = logits.argmax(dim=-1)
        return tokens, torch.log_softmax(logits, dim=-1).gather(1, tokens[:, None]).squeeze(1)
    # unnormalised probabilities, computed in place: each pass over a (B, V) tensor costs
    # about as much as a small model's decode step at large B, so no log_softmax is built
    top = logits.amax(dim=-1, keepdim=True)
    weights, order = (logits - top).div_(temperature).exp_(), None
    if top_p < 1.0:
        kept, order, total = top_p_cut(weights, top_p)
        cdf = kept.cumsum_(dim=-1)
    else:
        cdf = weights.cumsum_(dim=-1)
        total = cdf[:, -1]
    if uniforms is None:
        uniforms = torch.rand(cdf.shape[0], generator=generator, device=cdf.device)
    picked = torch.searchsorted(cdf, (uniforms.to(cdf) * cdf[:, -1])[:, None], right=True).clamp(max=cdf.shape[1] - 1)
    tokens = (picked if order is None else order.gather(1, picked)).squeeze(1)
    logp = (logits.gather(1, tokens[:, None]).squeeze(1) - top.squeeze(1)) / temperature - total.log()
    return tokens, logp


def host_lists(tokens: torch.Tensor, logprobs: torch.Tensor) -> tuple[list[int], list[float]]:
    """(B,) sampled tokens and their log-probs as Python lists, in one device-to-host copy (one
    GPU sync per decode step, not two). float64 holds every token id and float32 value exactly."""
    both = torch.stack([tokens.double(), logprobs.double()]).tolist()
    return [int(t) for t in both[0]], both[1]


def top_logprobs(logits: torch.Tensor, temperature: float, k: int) -> list[list[tuple[int, float]]]:
    """The k most likely (token, log-prob) of each row of (B, V) logits, under the distribution
    `sample_tokens` reports log-probs in (softmax(logits / temperature); temperature 1 when greedy)."""
    logp = torch.log_softmax(logits.float() / (temperature or 1.0), dim=-1)
    values, ids = logp.topk(k, dim=-1)
    return [list(zip(i, v)) for i, v in zip(ids.tolist(), values.tolist())]


@dataclass
class _Rows:
    """Bookkeeping of the live rows of a decode loop."""

    owner: list[int]  # row -> index into the flat output list
    tokens: list[list[int]] = field(default_factory=list)
    logprobs: list[list[float]] = field(default_factory=list)


@runtime_checkable
class Engine(Protocol):
    """What callers may use of a sampler: the process boundary a vLLM or remote engine fits.

    `identity` names the weights and tokenizer that answer (a cache key: equal identities
    give equal samples for equal requests); `precision` is the resolved "bf16" or "fp32"
    it computes in (recorded with results). `sync_weights` hands the engine the trainer's
    current weights; an engine that shares the trainer's model object has nothing to copy.
    """

    precision: str

    @property
    def identity(self) -> str: ...

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]: ...

    def chat_prompt(self, messages: list[dict[str, Any]]) -> list[int]: ...

    def sync_weights(self, weights: Any) -> None: ...


class HFEngine:
    """`Engine` over an HF causal LM (plain or PEFT-wrapped), in this process."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        precision: str = "auto",
        max_batch_prompts: int = 64,
        record_routing: bool = False,
        processor: Any = None,
    ):
        self.model, self.tokenizer, self.processor = model, tokenizer, processor
        self.record_routing = record_routing  # MoE: keep each token's experts (router replay)
        self.precision = resolve_precision(precision)
        self.max_batch_prompts = max_batch_prompts
        self._cache_kw = cache_keyword(model)
        self.pad_id = pad_id(tokenizer)
        self.eos_id = tokenizer.eos_token_id
        self.vocab = embedding_rows(model)
        """Rows of the model's input embedding: a prompt's ids must be below it (`check_prompts`)."""

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def context_window(self) -> int | None:
        """Tokens the model attends over (`models.rope.context_window`; None: its config names none)."""
        config = getattr(self.model, "config", None)
        if getattr(config, "max_position_embeddings", None) is None:
            return None
        return context_window(config)

    @property
    def identity(self) -> str:
        """sha256 of the current weights and the tokenizer (one pass over the weights per call)."""
        return model_state_hash(self.model, self.tokenizer)

    def sync_weights(self, weights: Any) -> None:
        """Load the trainer's weights: a model, or a state dict of some of its tensors (the trainable
        ones the async orchestrator publishes); the model the engine already samples from (the
        in-process GRPO case) needs no copy.

        Raises:
            ValueError: a state dict naming tensors the engine's model does not have."""
        if weights is self.model:
            return
        if hasattr(weights, "state_dict"):
            with torch.no_grad():
                self.model.load_state_dict(weights.state_dict())
            return
        own = self.model.state_dict()
        unknown = sorted(set(weights) - set(own))
        if unknown:
            raise ValueError(f"the engine's model has no tensors named {unknown[:3]}")
        with torch.no_grad():
            for name, tensor in weights.items():
                own[name].copy_(tensor)

    def chat_prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        """Token ids of a conversation rendered up to the assistant's turn; with the model's
        processor (a vision model), an `ImagePrompt` rendered by the processor's chat template."""
        if self.processor is not None:
            from tempering.data.vision_render import prompt_inputs

            inputs = prompt_inputs(self.processor, messages)
            pixels = {k: v for k, v in inputs.items() if k not in ("input_ids", "attention_mask", "mm_token_type_ids")}
            return ImagePrompt(inputs["input_ids"][0].tolist(), pixels)
        from tempering.data.images import has_images

        if has_images(messages):
            raise ValueError("a prompt with images needs a vision model's processor (HFEngine(processor=...))")
        return chat_prompt_ids(self.tokenizer, messages)

    def check_prompts(self, prompts: Sequence[Sequence[int]]) -> None:
        """Refuse a prompt with a token id outside the model's embedding (`batches.check_token_ids`),
        before any of them reaches the model.

        Raises:
            TokenIdOutOfRange: the first such id, with its prompt and position.
        """
        for i, p in enumerate(prompts):
            check_token_ids(p, self.vocab, f"prompt {i}")

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        """Sample `params.n` completions for each prompt (token ids); grouped per prompt."""
        if params.n < 1 or params.max_new_tokens < 1:
            raise ValueError("SamplingParams needs n >= 1 and max_new_tokens >= 1")
        refuse_grammar(self, params)
        self.check_prompts(prompts)
        out: list[list[Completion]] = [[] for _ in prompts]
        was_training = self.model.training
        self.model.eval()
        try:
            with inference_weights(self.model, self.precision):
                for start in range(0, len(prompts), self.max_batch_prompts):
                    chunk = prompts[start : start + self.max_batch_prompts]
                    for c in self._generate_recorded(chunk, params, start):
                        c.prompt_index += start
                        out[c.prompt_index].append(c)
        finally:
            self.model.train(was_training)
        return out

    def _generate_recorded(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, first_prompt: int
    ) -> list[Completion]:
        """`_generate_chunk`, with each token's experts attached when `record_routing` is on."""
        if not self.record_routing:
            return self._generate_chunk(prompts, params, first_prompt)
        from tempering.models.routing import RoutingRecorder

        owners: list[list[int]] = []
        with RoutingRecorder(self.model) as recorder:
            completions = self._generate_chunk(prompts, params, first_prompt, owners)
        return attach_routing(completions, prompts, recorder.calls, owners)

    @torch.no_grad()
    def _generate_chunk(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        first_prompt: int,
        owners: list[list[int]] | None = None,
    ) -> list[Completion]:
        """`owners`, when given, receives the rows' owners (flat sample index) of each decode call."""
        device, n = self.device, params.n
        ids, mask = left_pad(prompts, self.pad_id)
        ids, mask = ids.to(device), mask.to(device)
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        from transformers import DynamicCache

        cache = DynamicCache()
        stops = set(params.stop_token_ids) | ({self.eos_id} if self.eos_id is not None else set())
        with autocast(self.precision, device):
            logits = self.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                logits_to_keep=1,
                **{self._cache_kw: cache},
                **prompt_pixels(prompts, device),
            ).logits[:, -1]
        if n > 1:
            cache.batch_repeat_interleave(n)
            logits = logits.repeat_interleave(n, dim=0)
            mask = mask.repeat_interleave(n, dim=0)
            positions = positions.repeat_interleave(n, dim=0)
        total = len(prompts) * n
        rows = _Rows(owner=list(range(total)))
        tokens_out: list[list[int]] = [[] for _ in range(total)]
        logp_out: list[list[float]] = [[] for _ in range(total)]
        top_out: list[list[list[tuple[int, float]]]] = [[] for _ in range(total)]
        finish = ["length"] * total
        # seeded: each sample draws from its own generator, as in the batching engine, so a
        # sample's tokens depend on (seed, prompt, sample) only, never on n or the batch
        seed = params.seed
        generators = (
            None
            if seed is None
            else [
                torch.Generator().manual_seed(sample_seed(prompt_seed(seed, first_prompt + f // n), f % n))
                for f in range(total)
            ]
        )
        next_pos = positions[:, -1:] + 1
        for step in range(params.max_new_tokens):
            uniforms = None
            if generators is not None and params.temperature > 0:
                uniforms = row_uniforms([generators[o] for o in rows.owner])
            tok, lp = sample_tokens(logits, params.temperature, params.top_p, None, uniforms=uniforms)
            # the one host sync of a step: which rows finish is decided on the host from these lists
            tok_list, lp_list = host_lists(tok, lp)
            for r, owner in enumerate(rows.owner):
                tokens_out[owner].append(tok_list[r])
                logp_out[owner].append(lp_list[r])
            if params.top_logprobs:
                for r, top in enumerate(top_logprobs(logits, params.temperature, params.top_logprobs)):
                    top_out[rows.owner[r]].append(top)
            done = [t in stops for t in tok_list]
            if params.stop:
                hits = self._stop_string_hits(tokens_out, rows.owner, params.stop, stops)
                done = [d or h for d, h in zip(done, hits)]
            for r in (r for r, d in enumerate(done) if d):
                finish[rows.owner[r]] = "stop"
            if step == params.max_new_tokens - 1:
                break
            if any(done):
                kept = [r for r, d in enumerate(done) if not d]
                if not kept:
                    break
                keep = torch.tensor(kept, device=device)
                cache.batch_select_indices(keep)
                rows.owner = [rows.owner[k] for k in kept]
                tok, mask, next_pos = tok[keep], mask[keep], next_pos[keep]
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            if owners is not None:
                owners.append(list(rows.owner))
            with autocast(self.precision, device):
                logits = self.model(
                    input_ids=tok[:, None],
                    attention_mask=mask,
                    position_ids=next_pos,
                    use_cache=True,
                    **{self._cache_kw: cache},
                ).logits[:, -1]
            next_pos = next_pos + 1
        completions = []
        for flat in range(total):
            toks = tokens_out[flat]
            text, cut = cut_at_stop(
                self.tokenizer.decode([t for t in toks if t not in stops], skip_special_tokens=False), params.stop
            )
            reason = "stop" if cut else finish[flat]
            completions.append(
                Completion(
                    flat // n, toks, logp_out[flat], text, reason, top_out[flat] if params.top_logprobs else None
                )
            )
        return completions

    def _stop_string_hits(
        self,
        tokens_out: list[list[int]],
        owners: list[int],
        stop: tuple[str, ...],
        stop_ids: set[int],
    ) -> list[bool]:
        """Which live rows' text now contains a stop string (only the tail that can hold one
        is decoded: a token decodes to at least one character, plus slack for split bytes)."""
        window = max(len(s) for s in stop) + 4
        hits = []
        for owner in owners:
            tail = [t for t in tokens_out[owner][-window:] if t not in stop_ids]
            text = self.tokenizer.decode(tail, skip_special_tokens=False)
            hits.append(any(s in text for s in stop))
        return hits


def attach_routing(
    completions: list[Completion], prompts: Sequence[Sequence[int]], calls: list[torch.Tensor], owners: list[list[int]]
) -> list[Completion]:
    """Each completion with the experts of its prompt and completion tokens (`Completion.routing`).

    `calls[0]` is the prefill over the left-padded prompts (rows, layers, k); `calls[s]` the decode
    step that fed each live row's token s-1, rows owned by `owners[s-1]`."""
    n = len(completions) // len(prompts)
    width = max(len(p) for p in prompts)
    prefill = calls[0].reshape(len(prompts), width, *calls[0].shape[1:])
    out = []
    for flat, c in enumerate(completions):
        prompt_len = len(prompts[flat // n])
        routing = torch.full((prompt_len + len(c.token_ids), *prefill.shape[2:]), -1, dtype=torch.int16)
        routing[:prompt_len] = prefill[flat // n, width - prompt_len :]
        out.append(c)
        c.routing = routing
    for step, (call, rows) in enumerate(zip(calls[1:], owners)):
        for r, owner in enumerate(rows):
            out[owner].routing[len(prompts[owner // n]) + step] = call[r]  # type: ignore[index]
    return out


def refuse_grammar(engine: Any, params: SamplingParams) -> None:
    """Engines without constrained decoding refuse a grammar rather than ignore it."""
    if params.grammar is not None:
        raise ValueError(
            f"{type(engine).__name__} has no constrained decoding: use the batching engine "
            "(engine.kind: batching) for requests with a grammar"
        )


def chat_prompt_ids(tokenizer: Any, messages: list[dict[str, Any]]) -> list[int]:
    """Token ids of a conversation rendered up to the assistant's turn (every engine's `chat_prompt`)."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """`text` up to the earliest stop string, and whether one was found."""
    ends = [i for i in (text.find(s) for s in stop) if i >= 0]
    return (text[: min(ends)], True) if ends else (text, False)
