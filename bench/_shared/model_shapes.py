"""Random-weight models of named shapes, saved as Hugging Face directories with the default tokenizer.

Throughput depends on a model's shape, not its weights, so the GPU benches time models built
from a transformers config with random weights (no hub): the default model's own shape (its
weights, a 98 MB GGUF, are over what travels to a GPU machine), a 1B Llama and a 0.5B Qwen
shape, and a tiny Llama for dry runs. Every shape uses the default model's tokenizer (vocab
49,152), so the benches' chat data renders the same everywhere.

    python bench/_shared/model_shapes.py OUT_ROOT SHAPE [SHAPE ...] [--tokenizer DIR]   (-> OUT_ROOT/SHAPE)

`--tokenizer` is a saved tokenizer directory (e.g. `.whl/smollm2-tokenizer`, written by
`make gpu-wheels`); without it the default model's tokenizer is loaded from its GGUF.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

VOCAB = 49_152  # the default model's tokenizer
_LLAMA_COMMON = {"hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}

SHAPES: dict[str, dict[str, Any]] = {
    # 2 layers: seconds per step on a CPU, for dry runs.
    "tiny": {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": True,
        **_LLAMA_COMMON,
    },
    # SmolLM2-135M-Instruct's config.json (the default model), ~135M parameters.
    "smollm2-135m": {
        "model_type": "llama",
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "head_dim": 64,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 100_000.0,
        "tie_word_embeddings": True,
        **_LLAMA_COMMON,
    },
    # Llama-3.2-1B's shape with the default vocabulary: ~1.07B parameters.
    "llama-1b": {
        "model_type": "llama",
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500_000.0,
        "tie_word_embeddings": True,
        **_LLAMA_COMMON,
    },
    # Qwen2.5-0.5B's shape with the default vocabulary: ~0.36B parameters.
    "qwen2.5-0.5b": {
        "model_type": "qwen2",
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1_000_000.0,
        "tie_word_embeddings": True,
        **_LLAMA_COMMON,
    },
}


def build_random_model(shape: str, out_dir: Path, tokenizer_dir: str | None = None, seed: int = 0) -> Path:
    """Save a random-weight model of `shape` (fp32) with the default tokenizer into `out_dir`.

    Raises:
        KeyError: for a shape not in SHAPES (naming the known ones).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if shape not in SHAPES:
        raise KeyError(f"unknown model shape {shape!r}; known: {', '.join(SHAPES)}")
    spec = dict(SHAPES[shape])
    config = AutoConfig.for_model(spec.pop("model_type"), vocab_size=VOCAB, **spec)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if tokenizer_dir:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    else:
        from tempering.models.load import load_tokenizer

        tokenizer = load_tokenizer("smollm2-135m-instruct")
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_root", type=Path)
    p.add_argument("shapes", nargs="+", choices=sorted(SHAPES))
    p.add_argument("--tokenizer", default=None, help="a saved tokenizer directory (default: the default model's)")
    args = p.parse_args()
    for shape in args.shapes:
        print(build_random_model(shape, args.out_root / shape, args.tokenizer))


if __name__ == "__main__":
    main()
