"""Typed training batches: what a batch source hands the Trainer and an objective's `loss(model, batch)` reads.

One module, below every package that builds or reads batches (data, rollout and agents build
them; objectives and train read them), so a key an objective expects is a field a builder
must fill: an optional field is `None` by declaration, never a missing dict key.

Every batch knows its device move (`to`) and how many real (non-pad) tokens it holds
(`n_real_tokens`, the Trainer's throughput count).

Token ids are checked against the model's input embedding here too (`check_token_ids`), the one
guard every entry point calls before ids reach an embedding: the Tinker service, the engines, the
OpenAI-compatible server and the Trainer.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, NotRequired, Protocol, Sequence, TypedDict, TypeVar

import numpy as np
import torch

from tempering.errors import UserError

B = TypeVar("B", bound="Batch")


class SFTBatch(TypedDict):
    """Next-token batches (`data.batches.pad_batch` / `pack_batch`; SFT and distillation). Shapes (B, T)."""

    input_ids: torch.Tensor
    labels: torch.Tensor  # -100 where no loss is taken (prompt, tool turns, padding)
    attention_mask: NotRequired[torch.Tensor]  # padded batches
    position_ids: NotRequired[torch.Tensor]  # packed batches: positions restart per conversation
    pixel_values: NotRequired[torch.Tensor]  # images (vision models): the processor's pixels, stacked on dim 0
    image_grid_thw: NotRequired[torch.Tensor]  # (n_images, 3) Qwen2-VL-style processors: each image's patch grid
    n_real_tokens: NotRequired[int]  # the unpadded tokens of the batch (added by `SFTBatches`)


class SequenceShardBatch(TypedDict):
    """One process's share of every row of an `SFTBatch` under context parallelism
    (`train/context_parallel.py: shard_batch`). Shapes (B, T / N), N the processes."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor  # the tokens' places in the whole row (RoPE and the causal mask)
    targets: torch.Tensor  # the token after each position (already shifted), IGNORE where no loss
    sequence_shard: Any  # `SequenceShard`: the layout the split attention reads, passed to the decoder
    n_real_tokens: int


PIXEL_KEYS = ("pixel_values", "image_grid_thw")
"""The processor outputs a vision batch carries to the model's forward (data/vision_render.py)."""


def model_inputs(batch: SFTBatch | SequenceShardBatch) -> dict[str, Any]:
    """The forward's keyword arguments of a next-token batch: ids, its mask or positions, its
    images' pixel inputs where it has images, and a sequence shard's layout where it is one."""
    keys = ("input_ids", "attention_mask", "position_ids", "sequence_shard", *PIXEL_KEYS)
    return {k: v for k, v in batch.items() if k in keys}  # type: ignore[misc]


class PairBatch(TypedDict):
    """Preference pairs (`data.pair_batches.collate_pairs`), one shared prompt per pair. Shapes: (B, P)
    prompts, left-padded; (2B, C) answers, right-padded, rows chosen_0, rejected_0, chosen_1, ...;
    (B,) per pair."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    score_mask: torch.Tensor  # the answer tokens summed into a sequence log-prob
    weights: torch.Tensor  # (B,) per-pair loss weights (annotator agreement)
    n_real_tokens: int
    index: NotRequired[torch.Tensor]  # (B,) the pairs' indices in their set (added by `PairBatches`)
    ref_logps: NotRequired[torch.Tensor]  # (B, 2) cached reference sums (chosen, rejected), when given


class TokenIdOutOfRange(UserError):
    """A token id that indexes no row of the model's input embedding."""


def embedding_rows(model: Any) -> int | None:
    """Rows of `model`'s input embedding: the token ids it reads are [0, rows). The authority over
    the tokenizer's length, which may be larger (tokens added without resizing the embedding) or
    smaller (an embedding padded to a multiple of 64). None for a module with no input embedding."""
    embedding = getattr(model, "get_input_embeddings", lambda: None)()
    return None if embedding is None else int(embedding.num_embeddings)


def check_token_ids(ids: torch.Tensor | np.ndarray | Sequence[int], vocab: int | None, source: str) -> None:
    """Refuse any id of `ids` outside [0, `vocab`) with one line naming `source`, the first such id,
    its position and `vocab` (None, a model with no input embedding: nothing to check). On CUDA an out-of-range index into an embedding is a device-side
    assert that leaves the process's CUDA context unusable (every later call fails), on the CPU an
    IndexError deep in torch; so every device is checked the same way, before the ids move.

    Cost: one min and one max over `ids` (a list, an array, or a tensor: give a host tensor, since
    a device one costs a sync); the offending position is searched for only on failure.

    Raises:
        TokenIdOutOfRange: an id < 0 or >= `vocab` (a `UserError`: the ids came from outside).
    """
    if vocab is None:
        return
    arr = ids.detach().cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
    if arr.size == 0 or (int(arr.min()) >= 0 and int(arr.max()) < vocab):
        return
    bad = np.argwhere((arr < 0) | (arr >= vocab))[0]
    at = int(bad[0]) if arr.ndim == 1 else tuple(int(i) for i in bad)
    raise TokenIdOutOfRange(
        f"{source}: token id {int(arr[tuple(bad)])} at position {at} is outside the model's vocabulary "
        f"[0, {vocab}) (its input embedding has {vocab} rows)"
    )


TOKEN_ID_FIELDS = ("input_ids", "prompt_ids", "completion_ids")
"""The fields of a batch that index the input embedding (labels and masks do not)."""


def check_batch_ids(batch: Any, vocab: int | None, source: str) -> None:
    """`check_token_ids` over each host tensor of `TOKEN_ID_FIELDS` a batch (a dict or a dataclass) has.

    The Trainer's last guard before a micro-batch moves to its device: one min and max per field;
    a field already on a device is left alone (reading it would sync the step)."""
    for name in TOKEN_ID_FIELDS:
        ids = batch.get(name) if isinstance(batch, dict) else getattr(batch, name, None)
        if isinstance(ids, torch.Tensor) and ids.device == torch.device("cpu"):
            check_token_ids(ids, vocab, f"{source}, {name}")


class Batch(Protocol):
    """What the Trainer needs of any batch."""

    n_real_tokens: int

    def to(self: B, device: torch.device | str) -> B: ...


def to_device(tensor: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """`tensor` on `device`. A host tensor bound for a GPU is staged in pinned memory and copied
    without blocking the host (the stream orders the copy before every kernel that reads it, and
    torch keeps the pinned block until the copy is done); anything else is a plain `.to`."""
    device = torch.device(device)
    if device.type == "cuda" and tensor.device.type == "cpu":  # cuda-path: pinned-copy
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def _moved(batch: Any, device: torch.device | str) -> Any:
    """A copy of the dataclass `batch` with every tensor field on `device` (None and ints as they are)."""
    changes = {f.name: getattr(batch, f.name) for f in fields(batch)}
    return replace(batch, **{k: to_device(v, device) for k, v in changes.items() if isinstance(v, torch.Tensor)})


@dataclass(frozen=True)
class GRPOBatch:
    """Whole groups of one rollout batch. Shapes: P prompts (one per group), N = P x G completions, T tokens.

    `loss_mask` marks the completion tokens the loss counts (agent batches: the model's own turns;
    truncation "mask": not truncated rows); `sampled_mask` marks where the engine sampled, so
    `engine_logprobs` are real there (the train/rollout mismatch is measured there only).
    """

    prompt_ids: torch.Tensor  # (P, Tp) left-padded, one row per group
    prompt_mask: torch.Tensor  # (P, Tp)
    completion_ids: torch.Tensor  # (N, T) right-padded, G rows per group
    completion_mask: torch.Tensor  # (N, T) 1 on completion tokens
    loss_mask: torch.Tensor  # (N, T) 1 where the loss counts
    sampled_mask: torch.Tensor  # (N, T) 1 where the engine sampled
    engine_logprobs: torch.Tensor  # (N, T) the engine's log-probs of its samples (0 elsewhere)
    advantages: torch.Tensor  # (N,) one per completion, or (N, T) one per token (step rewards)
    n_real_tokens: int
    old_logprobs: torch.Tensor | None = None
    """(N, T) the rollout policy's log-probs, for updates after the first (mu > 1) or a stale
    sampler; None: the policy that sampled is the current one (ratio 1)."""
    prompt_routing: torch.Tensor | None = None
    """MoE router replay: (P, Tp, layers, k) experts of the prompt tokens as the rollout routed them
    (-1: the trainer's own routing), laid out like `prompt_ids`."""
    completion_routing: torch.Tensor | None = None
    """(N, T, layers, k), laid out like `completion_ids`."""
    pixel_values: torch.Tensor | None = None
    """Image prompts (vision-language models): the processor's pixel inputs of the batch's prompts,
    concatenated in prompt order (the groups' images as the rollout engine's prefill took them)."""
    image_grid_thw: torch.Tensor | None = None
    """(n_images, 3) Qwen2-VL-style processors: each image's patch grid, in the same order."""
    versions: torch.Tensor | None = None
    """(N, T) long, laid out like `completion_ids`: the policy version that sampled each token
    (`tempering.versions`), -1 where `sampled_mask` is 0, on padding and where unknown (prompt
    tokens are never sampled, so the prompt has none). Bookkeeping only: no loss reads it."""

    def pixels(self) -> dict[str, torch.Tensor]:
        """The pixel inputs the prompts' forward takes ({} for text prompts)."""
        return {k: v for k in PIXEL_KEYS if (v := getattr(self, k)) is not None}

    def to(self, device: torch.device | str) -> GRPOBatch:
        return _moved(self, device)

    def without_loss(self) -> GRPOBatch:
        """The same tensors with nothing counted: the filler micro-batch when groups run out."""
        return replace(self, loss_mask=self.loss_mask.new_zeros(self.loss_mask.shape), n_real_tokens=0)

    @property
    def group_size(self) -> int:
        """G: completion rows per group (prompt row)."""
        return self.completion_ids.shape[0] // max(self.prompt_ids.shape[0], 1)

    def keep_groups(self, keep: list[int]) -> GRPOBatch:
        """The batch with only the groups (prompt rows) in `keep`, in order, padding as it was;
        `without_loss()` when none is kept. Vision batches are not split (their pixels are not per row).

        Raises:
            ValueError: `keep` would split a vision batch's images."""
        if not keep:
            return self.without_loss()
        if keep == list(range(self.prompt_ids.shape[0])):
            return self
        if self.pixel_values is not None:
            raise ValueError("a vision batch's groups cannot be split (its pixels are not laid out per group)")
        g = self.group_size
        rows = torch.tensor([i * g + j for i in keep for j in range(g)], dtype=torch.long)
        groups = torch.tensor(keep, dtype=torch.long)
        per_prompt = {"prompt_ids", "prompt_mask", "prompt_routing"}
        kept = {
            f.name: v.index_select(0, (groups if f.name in per_prompt else rows).to(v.device))
            for f in fields(self)
            if isinstance(v := getattr(self, f.name), torch.Tensor)
        }
        n_real = int(kept["completion_mask"].sum()) + int(kept["prompt_mask"].sum())
        return replace(self, **kept, n_real_tokens=n_real)
