"""A slot KV cache: one row of K/V per running sequence, so sequences join and leave the
batch between two decode steps without the rest of the batch being copied.

    cache = SlotKVCache(slots=32, max_len=2048)
    cache.reserve(rows=3, length=300)                     # room for what is admitted, no more
    cache.write_prefill(prefill_cache, rows_to_slots)   # K/V of new prompts -> their slots
    cache.bind(lengths, longest)                          # the next forward decodes slots 0..B-1
    model(input_ids, position_ids=lengths[:, None], attention_mask=cache.decode_mask(model.config), cache=cache)
    cache.move(src, dst)                                  # compaction when a sequence leaves
    cache.release()                                       # the batch is empty: give the memory back

Per layer the keys are one (rows, kv_heads, length, head_dim) tensor (values alike). Slot
`s` holds its sequence's K/V at cache positions 0..length-1, which are also its rotary
positions: no left padding, so a sequence's K/V never move when others come or go.

Memory follows use, not the limits: `slots` x `max_len` is only the most the cache may ever
hold. The engine `reserve`s the rows and positions its running sequences can reach (each
sequence's prompt + max_new_tokens) when it admits them; the tensors grow to that (rounded
up to ROW_STEP rows and LENGTH_STEP positions, so growth copies happen a few times per batch,
not per request) and `release` frees them when no sequence runs. Preallocating for the
limits held 2.1 GiB for 32 slots x 2048 positions of the 135M default model whatever was asked.

The running batch is always the slots 0..B-1 (a leaving sequence's slot is refilled by
moving the last one into it, see `move`), so a decode step reads a view of the cache, never a
gathered copy; the one write per layer per step is the new token's K/V at each row's length.
HF's `DynamicCache` instead concatenates the whole cache every step and copies it again when
finished rows are dropped.

The model is called with a ready 4-D boolean mask (B, 1, 1, width), which transformers
passes through untouched, so the model calls only `update` on this object; a model with
sliding-window layers (Gemma 3) gets one such mask per layer type (`decode_mask(config)`).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["LENGTH_STEP", "ROW_STEP", "SlotKVCache", "StaticSlotKVCache", "sliding_window"]

ROW_STEP = 8
"""The cache grows by whole multiples of this many rows (capped at `slots`)."""
LENGTH_STEP = 128
"""... and of this many positions (capped at `max_len`)."""


def sliding_window(config: Any) -> int | None:
    """The window of a model whose `layer_types` include sliding-window layers (Gemma 3's 5 of 6),
    else None. Such models take a mask per layer type (a dict keyed by layer type); one 4-D mask
    would reach them unchanged and let the sliding layers see the whole cache."""
    if "sliding_attention" not in (getattr(config, "layer_types", None) or ()):
        return None
    return int(config.sliding_window)


def round_up(n: int, step: int, cap: int) -> int:
    """n rounded up to a multiple of `step`, at most `cap`."""
    return min(cap, -(-n // step) * step)


class SlotKVCache:
    """K/V storage for up to `slots` sequences of up to `max_len` tokens, allocated as
    `reserve` asks (on first write, in the dtype the model computes in) and freed by `release`."""

    is_compileable = False

    def __init__(self, slots: int, max_len: int):
        self.slots, self.max_len = slots, max_len
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.rows = self.length = 0  # the reserved capacity; tensors are this size once written
        self._write_at: torch.Tensor | None = None  # (B,) cache position of the token being decoded
        self._rows: torch.Tensor | None = None  # (B,) 0..B-1, built once per step, not once per layer
        self._width = 0

    def reserve(self, rows: int, length: int) -> None:
        """Make room for `rows` sequences of up to `length` positions each (never shrinks;
        existing K/V are kept). Raises ValueError beyond `slots` or `max_len`."""
        if rows > self.slots or length > self.max_len:
            raise ValueError(
                f"{rows} rows of {length} positions do not fit a cache of {self.slots} slots x {self.max_len}"
            )
        if rows <= self.rows and length <= self.length:
            return
        self.rows = max(self.rows, round_up(rows, ROW_STEP, self.slots))
        self.length = max(self.length, round_up(length, LENGTH_STEP, self.max_len))
        for layer, (k, v) in enumerate(zip(self.keys, self.values)):
            self.keys[layer], self.values[layer] = self._grown(k), self._grown(v)

    def _grown(self, old: torch.Tensor) -> torch.Tensor:
        new = old.new_zeros((self.rows, old.shape[1], self.length, old.shape[3]))
        new[: old.shape[0], :, : old.shape[2]] = old
        return new

    def release(self) -> None:
        """Free the K/V tensors (call with no sequence running); the next `reserve` starts over."""
        self.keys, self.values = [], []
        self.rows = self.length = 0
        self._write_at = self._rows = None
        self._width = 0

    @property
    def nbytes(self) -> int:
        """Bytes the K/V tensors hold now."""
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def _allocate(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        # k, v: (B, kv_heads, T, head_dim), in the dtypes the model hands over (under bf16
        # autocast the rotary embedding leaves keys in fp32 while values are bf16)
        while len(self.keys) <= layer:
            shape = (self.rows, k.shape[1], self.length, k.shape[3])
            self.keys.append(torch.zeros(shape, dtype=k.dtype, device=k.device))
            self.values.append(torch.zeros(shape, dtype=v.dtype, device=v.device))

    def write_prefill(
        self, layer_kv: list[tuple[torch.Tensor, torch.Tensor]], rows_to_slots: list[list[int]], lengths: list[int]
    ) -> None:
        """Copy prefilled K/V into slots: row i of every layer's (B, H, T, D) keys and values
        goes, up to `lengths[i]` positions, into each slot of `rows_to_slots[i]` (a prompt's
        n samples share one prefill)."""
        for layer, (k, v) in enumerate(layer_kv):
            self._allocate(layer, k, v)
            for row, slots in enumerate(rows_to_slots):
                n = lengths[row]
                if n > self.length or max(slots) >= self.rows:
                    raise ValueError(
                        f"a prompt of {n} tokens into slots {slots} does not fit the reserved "
                        f"{self.rows} rows x {self.length} positions (reserve first)"
                    )
                self.keys[layer][slots, :, :n] = k[row, :, :n].unsqueeze(0)
                self.values[layer][slots, :, :n] = v[row, :, :n].unsqueeze(0)

    def bind(self, lengths: torch.Tensor, longest: int) -> None:
        """Set up the next decode forward over slots 0..B-1: row b's new token is written at
        position lengths[b] and attends to positions 0..lengths[b]. `longest` is max(lengths),
        which the caller knows on the host (reading it off the tensor would sync a GPU every token)."""
        if longest >= self.length or lengths.shape[0] > self.rows:
            raise ValueError(f"a sequence reached the cache's reserved {self.rows} rows x {self.length} positions")
        self._write_at = lengths
        self._rows = torch.arange(lengths.shape[0], device=lengths.device)
        self._width = longest + 1

    def decode_mask(self, config: Any = None) -> torch.Tensor | dict[str, torch.Tensor]:
        """(B, 1, 1, width) bool: row b attends to cache positions 0..lengths[b].

        For a model (transformers `config`) with sliding-window layers (`sliding_window`), one mask
        per layer type, as such models take them: the sliding layers' row b sees only its last
        `window` positions, lengths[b] - window + 1..lengths[b], the window the model's own masks give.
        """
        assert self._write_at is not None, "bind() before a decode forward"
        width = torch.arange(self._width, device=self._write_at.device)
        full = (width[None, :] <= self._write_at[:, None])[:, None, None, :]
        window = sliding_window(config)
        if window is None:
            return full
        recent = (width[None, :] > self._write_at[:, None] - window)[:, None, None, :]
        return {"full_attention": full, "sliding_attention": full & recent}

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
        kwargs: Any = None,
        cache_kwargs: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Called by each attention layer: store the step's (B, H, 1, D) K/V, return the
        batch's K/V over the bound width (a view of the cache)."""
        assert self._write_at is not None and key_states.shape[2] == 1, "decode steps only; prefill uses write_prefill"
        batch, rows = key_states.shape[0], self._rows
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        keys[rows, :, self._write_at] = key_states[:, :, 0].to(keys.dtype)
        values[rows, :, self._write_at] = value_states[:, :, 0].to(values.dtype)
        return keys[:batch, :, : self._width], values[:batch, :, : self._width]

    def move(self, src: int, dst: int, length: int) -> None:
        """Copy slot `src`'s first `length` positions into slot `dst` (compaction)."""
        for k, v in zip(self.keys, self.values):
            k[dst, :, :length] = k[src, :, :length]
            v[dst, :, :length] = v[src, :, :length]

    # --- what transformers may ask of a cache object ---
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._width - 1 if self._width else 0

    @property
    def is_sliding(self) -> list[bool]:
        return [False] * len(self.keys)


class StaticSlotKVCache(SlotKVCache):
    """A slot cache of one fixed shape, for decode steps captured as CUDA graphs
    (`rollout/graphs.py`): `rows` x `length` from the first write on, never grown, never
    freed (a captured graph reads and writes these very tensors), and every decode forward
    attends over all `length` positions (the mask hides those past each row's own), so a
    decode step's shapes depend on its batch alone.

    The price of the fixed shape: attention reads `length` positions per row, not the longest
    row's; the engine sizes `length` to what its requests reach (rounded up to LENGTH_STEP)."""

    def __init__(self, rows: int, length: int):
        super().__init__(rows, length)
        self.rows, self.length = rows, length

    def reserve(self, rows: int, length: int) -> None:
        """Check that `rows` sequences of `length` positions fit (the shape never changes)."""
        if rows > self.rows or length > self.length:
            raise ValueError(
                f"{rows} rows of {length} positions do not fit a static cache of {self.rows} x {self.length}"
            )

    def release(self) -> None:
        """Keep the tensors: captured graphs hold their addresses (the engine drops the cache whole)."""

    def bind(self, lengths: torch.Tensor, longest: int) -> None:
        """As `SlotKVCache.bind`, over all `length` positions whatever `longest` is."""
        super().bind(lengths, longest)
        self._width = self.length
