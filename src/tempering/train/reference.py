"""Reference log-probs of preference pairs: computed once, cached on disk under a content hash.

DPO and IPO compare the policy with a fixed reference. Its per-pair sums (chosen,
rejected) never change during training, so they are computed once, before the first
step, with the same shared-prompt forward the loss uses, and stored at

    <tempering cache>/preference_ref/<key>.pt        key = sha256(reference weights, tokenizer,
                                                                  pair tokens and masks, precision,
                                                                  RoPE scaling)

A second run on the same model and data (another seed, another beta, a resume) loads them.
The reference is the model as it is before its first step, adapters on: a fresh LoRA adapter
(B = 0) adds exactly nothing, so that is the base; a continued adapter (DPO after a LoRA SFT)
is the policy training starts from, which "adapters off" would lose. Fresh adapter weights are
left out of the key, so a new seed's random adapters still hit the cache; a continued
adapter's weights are in it. No second copy of the model is held.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Sequence, cast

import torch
from rich.console import Console
from rich.progress import Progress

from tempering.atomic import atomic_path
from tempering.batches import PairBatch
from tempering.data.pair_batches import collate_pairs, pairs_fingerprint
from tempering.data.pair_render import RenderedPair
from tempering.models.lora import continues_adapter
from tempering.models.precision import autocast
from tempering.models.rope import rope_summary

PairScore = Callable[[Any, PairBatch], tuple[torch.Tensor, torch.Tensor]]
"""(model, pair batch) -> (chosen sums (B,), rejected sums (B,)): the objective's own forward,
passed in (train/ does not import objectives/)."""


def reference_weights_hash(model: Any) -> str:
    """sha256 over the weights the reference uses: everything but a fresh adapter's tensors."""
    h, fresh = hashlib.sha256(), not continues_adapter(model)
    for name, tensor in sorted(model.state_dict().items()):
        if fresh and "lora_" in name:
            continue
        t = tensor.detach().to("cpu").contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\n".encode())
        h.update(t.view(torch.uint8).numpy() if t.numel() else b"")
    return h.hexdigest()


def reference_key(model: Any, tokenizer: Any, pairs: Sequence[RenderedPair], precision: str) -> str:
    """The cache key: reference weights, tokenizer (size and template), pair tokens, precision, and
    the RoPE scaling when there is one."""
    h = hashlib.sha256()
    template = getattr(tokenizer, "chat_template", None) or ""
    rope = rope_summary(getattr(model, "config", None))  # scaled RoPE: same weights, other log-probs
    parts = [reference_weights_hash(model), f"{len(tokenizer)}\0{template}", pairs_fingerprint(pairs), precision]
    for part in parts + ([json.dumps(rope, sort_keys=True)] if rope else []):
        h.update(part.encode() + b"\n")
    return h.hexdigest()


@torch.no_grad()
def compute_reference_logps(
    score: PairScore, model: Any, pairs: Sequence[RenderedPair], batch_size: int, precision: str, console: Any = None
) -> torch.Tensor:
    """(N, 2) float32 sums of log pi_ref(answer | prompt) for (chosen, rejected) of every pair."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out = torch.zeros((len(pairs), 2), dtype=torch.float32)
    # longest first: similar lengths share a batch, so little padding
    order = sorted(range(len(pairs)), key=lambda i: -pairs[i].n_tokens)
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    try:
        with Progress(
            *Progress.get_default_columns(), console=console or Console(stderr=True), transient=True
        ) as progress:
            task = progress.add_task("reference log-probs", total=len(batches))
            for index in batches:
                batch = collate_pairs([pairs[i] for i in index])
                batch = cast(
                    PairBatch, {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
                )
                with autocast(precision, device):
                    chosen, rejected = score(model, batch)
                out[index, 0], out[index, 1] = chosen.float().cpu(), rejected.float().cpu()
                progress.advance(task)
    finally:
        model.train(was_training)
    return out


def cached_reference_logps(
    score: PairScore,
    model: Any,
    tokenizer: Any,
    pairs: Sequence[RenderedPair],
    batch_size: int,
    precision: str,
    cache_root: Path,
    console: Any = None,
) -> tuple[torch.Tensor, dict]:
    """Reference sums (N, 2) from the cache, or computed and cached (atomically); and a record
    {key, path, hit} for the run summary."""
    key = reference_key(model, tokenizer, pairs, precision)
    path = Path(cache_root) / "preference_ref" / f"{key}.pt"
    if path.is_file():
        stored = torch.load(path, map_location="cpu", weights_only=True)
        if tuple(stored.shape) == (len(pairs), 2):
            return stored, {"key": key, "path": str(path), "hit": True}
    logps = compute_reference_logps(score, model, pairs, batch_size, precision, console)
    with atomic_path(path) as tmp:
        torch.save(logps, tmp)
    return logps, {"key": key, "path": str(path), "hit": False}
