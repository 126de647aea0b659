"""Content hashes for files (checkpoint manifests, run inputs) and in-memory models. torch only inside `model_state_hash`."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Collection


def sha256_file(path: str | Path, exclude: Collection[str] = ()) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks; for a directory (a saved
    Hugging Face dataset, a checkpoint), of its files' relative paths and bytes in sorted
    order, leaving out files named in `exclude` (bookkeeping such as a run marker)."""
    h = hashlib.sha256()
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.name not in exclude) if path.is_dir() else [path]
    for file in files:
        if file != path:
            h.update(file.relative_to(path).as_posix().encode() + b"\0")
        with file.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def tensors_hash(named: Any, into: Any = None) -> Any:
    """sha256 over (name, dtype, shape, bytes) of named tensors in name order: hex digest, or
    the updated hash object `into` when one is given (`model_state_hash` goes on from it)."""
    import torch

    h = into if into is not None else hashlib.sha256()
    for name, tensor in sorted(named, key=lambda kv: kv[0]):
        t = tensor.detach().to("cpu").contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\n".encode())
        h.update(t.view(torch.uint8).numpy() if t.numel() else b"")
    return h if into is not None else h.hexdigest()


def model_state_hash(model: Any, tokenizer: Any = None) -> str:
    """sha256 over an in-memory model's state_dict tensors (and the tokenizer's template and size).

    Two models share it only when the same weights answer the same rendered prompts, so it
    keys caches of generated results (`Engine.identity`, the eval cache).
    """
    h = tensors_hash(model.state_dict().items(), into=hashlib.sha256())
    config = getattr(model, "config", None)
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if (
        config is not None and rope.get("rope_type", rope.get("type", "default")) != "default"
    ):  # RoPE scaling: same weights, other outputs
        h.update(f"rope\0{json.dumps(rope, sort_keys=True, default=str)}\0{config.max_position_embeddings}".encode())
    if tokenizer is not None:
        template = getattr(tokenizer, "chat_template", None) or ""
        h.update(f"tokenizer\0{len(tokenizer)}\0{template}".encode())
    return h.hexdigest()
