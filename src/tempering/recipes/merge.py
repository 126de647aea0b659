"""The merge recipe: several trained tracks -> one model, recorded with its inputs' lineage.

    LoRA adapters over one base   PEFT's `add_weighted_adapter` (linear, cat, svd, ties,
                                  dare_linear, dare_ties) -> a merged adapter in run_dir/final
                                  (and, with `merged_model`, a standalone model beside it)
    full HF models                mergekit's `run_merge` (linear, ties, dare_linear, dare_ties,
                                  task_arithmetic) -> a full model in run_dir/final

No merge math lives here: the libraries do it. What PEFT's types mean for LoRA factors
(a reader deciding between them should know):

    linear  A' = sum_i sqrt(w_i s_i) A_i,  B' = sum_i sqrt(w_i s_i) B_i   (same rank; scale 1)
            so B'A' = sum_i w_i s_i B_i A_i + cross terms sqrt(w_i s_i w_j s_j) B_i A_j:
            NOT the weighted sum of the adapters' deltas unless only one weight is nonzero
    cat     A' = [w_i s_i A_i] stacked, B' = [B_i] side by side (rank = sum of ranks):
            B'A' = sum_i w_i s_i B_i A_i exactly, the weighted sum of the deltas
    svd     the weighted sum of the deltas, truncated to the largest rank by SVD
    ties / dare_*   TIES / DARE applied to the A and the B factors separately (PEFT's way)

After writing, the merged output's tokenizer must encode, decode and render a chat with a
tool call exactly as the base's does (`tokenizer_roundtrip`); a merge that fails it is
recorded as failed and reported in one line.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from tempering.config import MergeConfig
from tempering.errors import UserError
from tempering.runs.stage import StageSpec, input_list, run_stage
from tempering.train.metrics import console

PEFT_METHODS = ("linear", "cat", "svd", "ties", "dare_linear", "dare_ties")
MERGEKIT_METHODS = ("linear", "ties", "dare_linear", "dare_ties", "task_arithmetic")
NEEDS_DENSITY = ("ties", "dare_linear", "dare_ties")
# Text probes for the tokenizer round trip: plain, digits, code, whitespace runs, non-ASCII.
TEXT_PROBES = (
    "What is 47+38? Answer with just the number.",
    "def add(a, b):\n    return a + b\n\n\tprint(add(2, 3))",
    "  leading and trailing spaces  ",
    "Ünïcödé: naïve café — 東京 🙂",
    "<answer>olleh</answer>",
)
CHAT_PROBE = [
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "How many Python files are here?"},
    {
        "role": "assistant",
        "content": "Let me count them.",
        "tool_calls": [{"name": "shell", "arguments": {"cmd": "find . -name '*.py' | wc -l"}}],
    },
    {"role": "tool", "content": "42"},
    {"role": "assistant", "content": "There are 42 Python files."},
]


class MergeError(UserError):
    """A merge that cannot be done or whose output fails its checks; the message is one line."""


def merge_stage(cfg: MergeConfig) -> StageSpec:
    """The stage a merge config describes: every input (and the full-model base) is a base model."""
    pairs = [(p, "base_model") for p in cfg.inputs] + ([(cfg.base, "base_model")] if cfg.base else [])
    return StageSpec("merge", cfg.out, cfg.name, cfg.model_dump(), input_list(pairs), _base_of(cfg), 1, cfg.seed)


def run_merge(cfg: MergeConfig) -> dict[str, Any]:
    """Merge `cfg.inputs`, check the output's tokenizer, record the run; returns the summary.

    Raises:
        MergeError: mixed or mismatched inputs, a method that does not apply, a failed check.
    """
    kind = input_kind(cfg)
    with run_stage(merge_stage(cfg)) as stage:
        if stage.finished:
            return stage.summary
        final = stage.run_dir / "final"
        shutil.rmtree(final, ignore_errors=True)  # a merge killed half way left a partial dir
        weights = cfg.weights or [1.0 / len(cfg.inputs)] * len(cfg.inputs)
        console.print(f"merging {len(cfg.inputs)} {kind}s ({cfg.method}, weights {weights}) -> {final}")
        outputs: dict[str, str] = {}
        if kind == "adapter":
            merged_model = merge_adapters(cfg, weights, final, stage.run_dir / "merged_model")
            if merged_model is not None:
                stage.record_output("merged", merged_model)
                outputs["merged_model"] = str(merged_model)
            reference = _adapter_base(cfg)
        else:
            merge_full(cfg, weights, final)
            reference = cfg.base or cfg.inputs[0]
        stage.record_output("final", final)
        checked = [tokenizer_roundtrip(final, reference)]
        if "merged_model" in outputs:
            checked.append(tokenizer_roundtrip(outputs["merged_model"], reference))
        stage.finish(
            {
                "steps": 1,
                "kind": kind,
                "method": cfg.method,
                "weights": weights,
                "density": cfg.density,
                "inputs": list(cfg.inputs),
                "tokenizer_check": checked[0],
            },
            outputs,
        )
    return stage.summary


def input_kind(cfg: MergeConfig) -> str:
    """ "adapter" when every input is a LoRA adapter over one base, "model" when all are full models.

    Raises:
        MergeError: an input that is neither, a mix of both, adapters over different bases,
            or a method the kind does not offer.
    """
    from tempering.models.load import ModelNotFound, adapter_base, resolve_model

    kinds, bases = [], {}
    for spec in cfg.inputs:
        try:
            local = resolve_model(spec)
        except ModelNotFound as exc:
            raise MergeError(f"inputs: {exc}") from None
        base = adapter_base(local)
        kinds.append("adapter" if base else "model")
        if base:
            bases[spec] = _same_path(base)
    if len(set(kinds)) > 1:
        adapters = [s for s, k in zip(cfg.inputs, kinds) if k == "adapter"]
        raise MergeError(
            f"inputs mix LoRA adapters ({', '.join(adapters)}) and full models; merge one kind at a "
            "time (export an adapter with `temper export` to merge it as a full model)"
        )
    kind = kinds[0]
    if kind == "adapter":
        first, base = next(iter(bases.items()))
        for spec, other in bases.items():
            if other != base:
                raise MergeError(
                    f"adapters have different bases: {first} is over {base} but {spec} is over {other}; "
                    "LoRA adapters merge only over the same base model"
                )
        if cfg.base is not None:
            raise MergeError(
                "base: applies to full-model merges only (an adapter's base is in its adapter_config.json)"
            )
        if cfg.method not in PEFT_METHODS:
            raise MergeError(
                f"method {cfg.method!r} is not a PEFT combination type; for adapters use one of "
                f"{', '.join(PEFT_METHODS)}"
            )
    else:
        if cfg.method not in MERGEKIT_METHODS:
            raise MergeError(
                f"method {cfg.method!r} merges LoRA adapters only; for full models use one of "
                f"{', '.join(MERGEKIT_METHODS)}"
            )
        if cfg.method != "linear" and cfg.base is None:
            raise MergeError(f"method {cfg.method!r} takes task vectors from a base model: set base: to it")
        if cfg.merged_model:
            raise MergeError("merged_model: applies to adapter merges only (a full-model merge is already a model)")
    return kind


def merge_adapters(cfg: MergeConfig, weights: list[float], final: Path, merged_dir: Path) -> Path | None:
    """PEFT `add_weighted_adapter` over the inputs, saved as one adapter at `final`.

    Returns the standalone merged model's dir when `cfg.merged_model`, else None.
    """
    import torch
    from peft import PeftModel

    from tempering.models.load import load_model, load_tokenizer, resolve_model
    from tempering.models.lora import EXPORT_DTYPES

    torch.manual_seed(cfg.seed)  # DARE drops at random
    names = [f"input{i}" for i in range(len(cfg.inputs))]
    base = load_model(_adapter_base(cfg), dtype=EXPORT_DTYPES[cfg.dtype])
    model = PeftModel.from_pretrained(base, resolve_model(cfg.inputs[0]), adapter_name=names[0])
    for name, spec in zip(names[1:], cfg.inputs[1:]):
        model.load_adapter(resolve_model(spec), adapter_name=name)
    _check_ranks(model, names, cfg)
    density = cfg.density if cfg.density is not None or cfg.method not in NEEDS_DENSITY else 1.0
    # the merged adapter is named "default" so that it saves at the top of `final`
    model.add_weighted_adapter(
        names,
        weights,
        "default",
        combination_type=cfg.method,
        density=density,
        majority_sign_method=cfg.majority_sign_method,
    )
    model.set_adapter("default")
    for name in names:
        model.delete_adapter(name)
    tokenizer = load_tokenizer(cfg.inputs[0])
    model.save_pretrained(str(final), save_embedding_layers=False)
    tokenizer.save_pretrained(final)
    if not cfg.merged_model:
        return None
    shutil.rmtree(merged_dir, ignore_errors=True)
    model.merge_and_unload().save_pretrained(merged_dir)
    tokenizer.save_pretrained(merged_dir)
    return merged_dir


def _check_ranks(model: Any, names: list[str], cfg: MergeConfig) -> None:
    """PEFT's linear/ties/dare need one rank; say which input differs (PEFT would not)."""
    if cfg.method in ("cat", "svd"):
        return
    ranks = {spec: model.peft_config[name].r for name, spec in zip(names, cfg.inputs)}
    if len(set(ranks.values())) > 1:
        listed = ", ".join(f"{spec}: r={r}" for spec, r in ranks.items())
        raise MergeError(f"method {cfg.method!r} needs adapters of one rank ({listed}); use cat or svd instead")


def merge_full(cfg: MergeConfig, weights: list[float], final: Path) -> None:
    """mergekit `run_merge` over full HF model dirs, written to `final`."""
    from mergekit.config import MergeConfiguration
    from mergekit.merge import run_merge as mergekit_run
    from mergekit.options import MergeOptions

    from tempering.models.load import resolve_model
    from tempering.models.lora import EXPORT_DTYPES

    models = []
    for spec, weight in zip(cfg.inputs, weights):
        params: dict[str, float] = {"weight": weight}
        if cfg.density is not None and cfg.method in NEEDS_DENSITY:
            params["density"] = cfg.density
        models.append({"model": resolve_model(spec), "parameters": params})
    spec = {"merge_method": cfg.method, "models": models, "dtype": EXPORT_DTYPES[cfg.dtype]}
    if cfg.base is not None:
        spec["base_model"] = resolve_model(cfg.base)
    try:
        config = MergeConfiguration.model_validate(spec)
    except ValueError as exc:
        raise MergeError(f"mergekit refused the merge: {str(exc).splitlines()[0]}") from None
    mergekit_run(
        config,
        str(final),
        MergeOptions(
            random_seed=cfg.seed, quiet=True, copy_tokenizer=True, write_model_card=False, lazy_unpickle=False
        ),
    )


def tokenizer_roundtrip(candidate: str | Path, reference: str) -> dict[str, Any]:
    """Check that `candidate`'s tokenizer tokenizes exactly as `reference`'s does.

    Text probes must encode to the same ids and decode back to the same text; a chat with a
    tool call must render (template and tool-call style, ids and loss mask) identically.

    Returns:
        what was checked (probe counts and the tool-call style).
    Raises:
        MergeError: naming the first probe that differs and how.
    """
    from tempering.data.render import TemplateError, detect_tool_call_style, render_with_mask
    from tempering.models.load import load_tokenizer

    try:
        got = load_tokenizer(str(candidate))
    except Exception as exc:
        raise MergeError(
            f"{candidate}: the merged tokenizer does not load ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''})"
        ) from None
    want = load_tokenizer(reference)
    for i, text in enumerate(TEXT_PROBES):
        ids_got, ids_want = got.encode(text, add_special_tokens=False), want.encode(text, add_special_tokens=False)
        if ids_got != ids_want:
            raise MergeError(
                f"{candidate}: tokenizer round trip failed: probe {i} ({text[:30]!r}) encodes to "
                f"{ids_got[:8]}... here but {ids_want[:8]}... with the base {reference}"
            )
        if got.decode(ids_got) != want.decode(ids_want):
            raise MergeError(
                f"{candidate}: tokenizer round trip failed: probe {i} ({text[:30]!r}) decodes "
                f"differently from the base {reference}"
            )
    try:
        style = detect_tool_call_style(got)
        if style != detect_tool_call_style(want):
            raise MergeError(
                f"{candidate}: the chat template writes tool calls differently ({style}) from the base {reference}"
            )
        chat_got, chat_want = render_with_mask(got, CHAT_PROBE, style), render_with_mask(want, CHAT_PROBE, style)
    except TemplateError as exc:
        raise MergeError(f"{candidate}: chat template check failed: {exc}") from None
    if chat_got != chat_want:
        raise MergeError(
            f"{candidate}: tokenizer round trip failed: the tool-call chat renders to different tokens "
            f"({len(chat_got.input_ids)} vs {len(chat_want.input_ids)}) than with the base {reference}"
        )
    return {"text_probes": len(TEXT_PROBES), "chat_tokens": len(chat_got.input_ids), "tool_call_style": style}


def _base_of(cfg: MergeConfig) -> str | None:
    """The base model of the merge: the adapters' shared base, or the full-model `base`."""
    from tempering.models.load import adapter_base, resolve_model

    if cfg.base is not None:
        return cfg.base
    try:
        return adapter_base(resolve_model(cfg.inputs[0]))
    except FileNotFoundError:
        return None


def _adapter_base(cfg: MergeConfig) -> str:
    """The adapters' base (`input_kind` found each adapter's recorded base, or `base` names it)."""
    base = _base_of(cfg)
    if base is None:
        raise MergeError(f"inputs: {cfg.inputs[0]} records no base model; set base")
    return base


def _same_path(spec: str) -> str:
    """A base spec in a comparable form (absolute resolved path for local dirs)."""
    path = Path(spec).expanduser()
    return str(path.resolve()) if path.exists() else spec
