"""What `temper tinker serve` does with a model: the Tinker primitives over Tempering's pieces.

  create_trainee        base model (`models/load.py`) + LoRA on the layers `models/lora.py:
                        linear_targets` picks + the Trainer's optimizer (`train/optimizer.py`)
  forward_backward      log-probs (`models/logprobs.py`), a registered Tinker loss
                        (`objectives/tinker_losses.py`), gradients accumulated until the step
  optim_step            AdamW with the request's hyper-parameters, then the gradients are cleared
  save_state / load_state   a Trainer checkpoint (`train/checkpoint.py`: weights, optimizer
                        state, manifest), the adapter as a PEFT dir beside them
  save_for_sampler      the adapter as a PEFT dir a sampler loads (`load_model` takes it)
  Sampler               an engine from `rollout/select.py: build_engine` over saved weights

All of it runs on the server's one worker thread (`tinker_sched.py`); a forward_backward runs
as steps of at most `step_tokens` padded tokens, so other keys' calls run between them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from tempering import errors
from tempering.batches import check_token_ids, embedding_rows
from tempering.config import EngineSettings, LoraSettings, OptimSettings, SamplingParams
from tempering.data.padding import PAD_ID, right_pad
from tempering.models.checkpoints import MANIFEST
from tempering.models.load import ModelNotFound, load_model, load_tokenizer
from tempering.models.logprobs import head_logprobs, output_head, token_logprobs
from tempering.models.lora import apply_lora, linear_targets
from tempering.models.precision import autocast, resolve_precision
from tempering.rollout.select import build_engine
from tempering.serve.tinker_wire import WireDatum, WireSample
from tempering.train.checkpoint import load_checkpoint, write_checkpoint
from tempering.train.optimizer import build_optimizer, set_lr

LORA_ALPHA = 32
"""LoRA alpha of every trainee (Tinker fixes it too; the rank is the request's)."""


class UserError(errors.UserError):
    """A request the server refuses; the message names the call and the reason (the Tinker
    routes answer it as the client's error, any other exception as the server's)."""


@dataclass
class Trainee:
    """One training client's model: a LoRA-wrapped base, its tokenizer and optimizer."""

    model_id: str
    base: str
    rank: int
    model: Any
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    """The Trainer's (`train/optimizer.py: build_optimizer`), over the LoRA parameters."""
    precision: str
    """"bf16" (autocast; the weights stay float32) or "fp32"."""
    parts: dict[str, bool] = field(default_factory=dict)
    """Which layers carry LoRA: `train_attn`, `train_mlp`, `train_unembed` (the request's)."""
    steps: int = 0
    losses: list[float] = field(default_factory=list)
    """`loss:sum` of each forward_backward (training calls only)."""


def _parts(parts: dict[str, bool]) -> list[str]:
    """The request's `train_attn` / `train_mlp` / `train_unembed` as `linear_targets` parts."""
    return [name.removeprefix("train_") for name, on in parts.items() if on]


def create_trainee(
    model_id: str, base: str, rank: int, seed: int | None, parts: dict[str, bool], precision: str
) -> Trainee:
    """A LoRA training model on `base` (any model spec Tempering loads).

    Raises:
        UserError: an unknown base model, or a LoRA config that adapts nothing.
    """
    try:
        model = load_model(base)
        tokenizer = load_tokenizer(base)
    except (ModelNotFound, OSError, ValueError) as exc:
        raise UserError(f"create_model: base model {base!r} cannot be loaded: {str(exc).splitlines()[0]}") from None
    targets = linear_targets(model, _parts(parts))
    if not targets:
        raise UserError("create_model: lora_config adapts no layer (train_attn, train_mlp, train_unembed all false)")
    if seed is not None:
        torch.manual_seed(seed)
    model = apply_lora(
        model, LoraSettings.model_validate({"r": rank, "alpha": LORA_ALPHA, "target_modules": targets}), base
    )
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = build_optimizer(params, OptimSettings.model_validate({}))  # each optim_step sets its hyper-parameters
    return Trainee(model_id, base, rank, model, tokenizer, optimizer, resolve_precision(precision), parts=dict(parts))


def _loss(loss_fn: str, config: dict[str, Any]) -> tuple[Any, dict[str, float]]:
    """The registered Tinker loss and its settings (defaults under the request's `config`)."""
    from tempering import algorithms

    algorithms.load()
    if ("tinker_loss", loss_fn) not in algorithms.REGISTRY:
        names = ", ".join(algorithms.names("tinker_loss"))
        raise UserError(f"forward_backward: loss_fn {loss_fn!r} is not supported here (supported: {names})")
    loss = algorithms.lookup("tinker_loss", loss_fn)
    defaults = loss.options["config"]
    for key, value in config.items():
        if key not in defaults:
            raise UserError(f"forward_backward: loss_fn_config key {key!r} is not used by {loss_fn}")
        if isinstance(value, str) or not math.isfinite(value):
            raise UserError(f"forward_backward: loss_fn_config.{key} must be a finite number, not {value!r}")
    missing = [k for k, v in defaults.items() if v is None and k not in config]
    if missing:
        raise UserError(f"forward_backward: {loss_fn} needs loss_fn_config.{missing[0]} (it has no default)")
    return loss, {**defaults, **config}


def _check(inputs: tuple[str, ...], loss_fn: str, data: list[WireDatum]) -> None:
    for i, d in enumerate(data):
        need, have = set(inputs), set(d.inputs)
        if need - have or have - need:
            what = f"lacks {sorted(need - have)[0]!r}" if need - have else f"has unused {sorted(have - need)[0]!r}"
            raise UserError(f"forward_backward: data[{i}].loss_fn_inputs {what} for {loss_fn}")
        for key, arr in d.inputs.items():
            if arr.shape != (len(d.tokens),):
                raise UserError(
                    f"forward_backward: data[{i}].loss_fn_inputs.{key} has shape {list(arr.shape)}, "
                    f"not [{len(d.tokens)}] (one value per input token)"
                )


def _target_logprobs(model: Any, data: list[WireDatum]) -> torch.Tensor:
    """(B, T) log p(target_tokens[t] | tokens[:t+1]) of each datum, right-padded with 0."""
    tokens, mask = right_pad([d.tokens for d in data], PAD_ID)
    targets, _ = right_pad([d.inputs["target_tokens"].astype(np.int64).tolist() for d in data], PAD_ID)
    hidden = model.get_decoder()(
        input_ids=tokens, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0), use_cache=False
    ).last_hidden_state
    logp, _ = head_logprobs(output_head(model), hidden, targets, mask)
    return logp


Provenance = Callable[[int, WireDatum], dict[str, np.ndarray]]
"""Datum index and datum -> the recorded `sampled` and `sampler_logprobs` (T,) of its targets
(`tinker_records.StabilityRecords.sampled` for the calling key)."""


def forward_backward(
    trainee: Trainee,
    loss_fn: str,
    data: list[WireDatum],
    config: dict[str, Any],
    forward_only: bool,
    provenance: Provenance,
) -> tuple[list[dict[str, np.ndarray]], dict[str, float]]:
    """Per-datum target log-probs and `loss:sum` of one batch; unless `forward_only`, the loss's
    gradient is added to what earlier calls accumulated (the next optim_step applies and clears it).
    A loss registered with `provenance` also reads what `provenance(i, data[i])` recorded for each
    datum (`forward_backward_steps` hands each batch its datums' records, by index in the call)."""
    if not data:
        raise UserError("forward_backward: no data")
    loss, settings = _loss(loss_fn, config)
    _check(loss.options["inputs"], loss_fn, data)
    recorded: list[dict[str, np.ndarray]] = [{} for _ in data]
    if loss.options["provenance"]:
        recorded = [provenance(i, d) for i, d in enumerate(data)]
    model = trainee.model
    model.train(not forward_only)
    with torch.set_grad_enabled(not forward_only), autocast(trainee.precision, model.device):
        logp = _target_logprobs(model, data)
        losses = []
        for i, d in enumerate(data):
            inputs = {
                k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in {**d.inputs, **recorded[i]}.items()
            }
            losses.append(loss.fn(logp[i, : len(d.tokens)], inputs, **settings))
        total = torch.stack(losses).sum()
        if not forward_only:
            total.backward()
    outputs = [{"logprobs": logp[i, : len(d.tokens)].detach().numpy()} for i, d in enumerate(data)]
    return outputs, {"loss:sum": float(total.detach())}


def check_tokens(data: list[WireDatum], vocab: int | None) -> None:
    """Every input and target token id indexes the model's embedding (else a UserError)."""
    for i, d in enumerate(data):
        check_token_ids(d.tokens, vocab, f"forward_backward: data[{i}].model_input")
        if "target_tokens" in d.inputs:
            targets = d.inputs["target_tokens"]
            if targets.dtype.kind not in "iu":
                raise UserError(f"forward_backward: data[{i}].loss_fn_inputs.target_tokens must be integers")
            check_token_ids(targets, vocab, f"forward_backward: data[{i}].loss_fn_inputs.target_tokens")


def batches(data: list[WireDatum], step_tokens: int) -> list[list[WireDatum]]:
    """`data` in order, cut into batches of at most `step_tokens` padded tokens (datums x the
    longest), one datum at least: the work of one scheduler step."""
    out: list[list[WireDatum]] = []
    longest = 0
    for d in data:
        longest_with = max(longest, len(d.tokens))
        if out and longest_with * (len(out[-1]) + 1) <= step_tokens:
            out[-1].append(d)
            longest = longest_with
        else:
            out.append([d])
            longest = len(d.tokens)
    return out


def merge_metrics(parts: list[tuple[int, dict[str, float]]]) -> dict[str, float]:
    """Metrics of batches as one call's, by each name's reduction suffix (`loss:sum` sums,
    `:mean` is the datum-weighted mean, `:max` / `:min`)."""
    out: dict[str, float] = {}
    datums = sum(n for n, _ in parts)
    for name in parts[0][1]:
        values = [(n, m[name]) for n, m in parts]
        how = name.rsplit(":", 1)[-1]
        if how == "mean":
            out[name] = sum(n * v for n, v in values) / max(datums, 1)
        elif how in ("max", "min"):
            out[name] = (max if how == "max" else min)(v for _, v in values)
        else:
            out[name] = sum(v for _, v in values)
    return out


def forward_backward_steps(
    trainee: Trainee,
    loss_fn: str,
    data: list[WireDatum],
    config: dict[str, Any],
    forward_only: bool,
    step_tokens: int,
    provenance: Provenance,
):
    """`forward_backward` of the whole call, one batch of `batches(data, step_tokens)` per
    step (a generator: it yields between batches, where the scheduler may serve other keys or
    stop it). Every datum is checked first (tokens, loss inputs, and for a provenance loss its
    records, `provenance(i, data[i])` with `i` its index in the whole call), so a bad call fails
    before any step. Stopped or failed part-way, it restores the gradients it found, so the call
    leaves nothing behind; done, it returns (outputs, metrics) as one call's."""
    check_tokens(data, embedding_rows(trainee.model))
    loss, _ = _loss(loss_fn, config)
    _check(loss.options["inputs"], loss_fn, data)
    recorded = [provenance(i, d) for i, d in enumerate(data)] if loss.options["provenance"] else []
    params = [p for g in trainee.optimizer.param_groups for p in g["params"]]
    found = None if forward_only else [None if p.grad is None else p.grad.clone() for p in params]
    outputs: list[dict[str, np.ndarray]] = []
    parts: list[tuple[int, dict[str, float]]] = []
    try:
        start = 0  # the call's index of the batch's first datum
        for n, batch in enumerate(batches(data, step_tokens)):
            if n:
                yield

            def batch_provenance(i: int, d: WireDatum, start: int = start) -> dict[str, np.ndarray]:
                return recorded[start + i]  # the batch's datum i is the call's datum start + i

            out, metrics = forward_backward(trainee, loss_fn, batch, config, forward_only, batch_provenance)
            outputs += out
            parts.append((len(batch), metrics))
            start += len(batch)
    except BaseException:
        if found is not None:
            for p, grad in zip(params, found):
                p.grad = grad
        raise
    metrics = merge_metrics(parts)
    if not forward_only:
        trainee.losses.append(metrics["loss:sum"])
    return outputs, metrics


def optim_step(trainee: Trainee, lr: float, betas: tuple[float, float], eps: float, wd: float, clip: float) -> dict:
    """One AdamW step on the accumulated gradients with the request's settings; clears them."""
    params = [p for g in trainee.optimizer.param_groups for p in g["params"]]
    set_lr(trainee.optimizer, lr)
    for group in trainee.optimizer.param_groups:
        group.update(betas=betas, eps=eps, weight_decay=wd)
    norm = torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else float("inf"))
    trainee.optimizer.step()
    trainee.optimizer.zero_grad(set_to_none=True)
    trainee.steps += 1
    return {"grad_norm:mean": float(norm)}


def save_for_sampler(trainee: Trainee, out: Path) -> Path:
    """The adapter and tokenizer as a PEFT dir (its config names the base model)."""
    trainee.model.save_pretrained(out, save_embedding_layers=False)  # the LoRA of the head, not the head
    trainee.tokenizer.save_pretrained(out)
    return out


STATE_FORMAT = "a Trainer checkpoint (train/checkpoint.py: manifest.json, weights.safetensors, optimizer.pt)"
OLD_STATE = "tinker_state.json"
"""What a save_state wrote before it wrote Trainer checkpoints: refused by `load_state`, naming the format."""


def _trainable(trainee: Trainee) -> dict[str, torch.Tensor]:
    """The trained parameters by name: what the Trainer checkpoints (its `named`) for the same model."""
    return {n: p for n, p in trainee.model.named_parameters() if p.requires_grad}


def save_state(trainee: Trainee, out: Path) -> Path:
    """The trainee as a Trainer checkpoint at `out` (`train/checkpoint.py: write_checkpoint`): the LoRA
    weights, optimizer state and step count, the base, rank and parts in `state.json` under "tinker";
    the adapter and tokenizer beside them as a PEFT dir (`save_for_sampler`), so a sampler loads it."""
    state = {
        "step": trainee.steps,
        "lr_scale": 1.0,
        "tinker": {"base": trainee.base, "rank": trainee.rank, "parts": trainee.parts},
    }
    optimizer = trainee.optimizer.state_dict()
    return write_checkpoint(
        out, trainee.steps, _trainable(trainee), optimizer, state, extra=lambda d: save_for_sampler(trainee, d)
    )


def _check_state(src: Path, call: str) -> None:
    """Raises UserError where `src` is no checkpoint: a state of the older Tinker format, or none (one line)."""
    if (src / OLD_STATE).is_file() and not (src / MANIFEST).is_file():
        raise UserError(
            f"{call}: {src.name} is a training state of the older Tinker format ({OLD_STATE}), which this "
            f"server no longer loads; states are now {STATE_FORMAT}"
        )
    if not (src / MANIFEST).is_file():
        raise UserError(f"{call}: {src.name} is not a training state (save_state writes those)")


def state_meta(src: Path, call: str) -> dict[str, Any]:
    """The base, rank and parts a Tinker state was saved with (its `state.json` "tinker" entry);
    `load_state` verifies the files against the manifest before it uses them.

    Raises:
        UserError: no Tinker state (see `_check_state`), or a Trainer run's checkpoint (no base to create from).
    """
    _check_state(src, call)
    meta = json.loads((src / "state.json").read_text()).get("tinker")
    if not isinstance(meta, dict):
        raise UserError(f"{call}: {src.name} is a Trainer run's checkpoint, not a Tinker save_state (no base and rank)")
    return meta


def load_state(trainee: Trainee, src: Path, with_optimizer: bool) -> None:
    """Restore a checkpoint into this trainee: its LoRA weights (same names and shapes), and with
    `with_optimizer` the optimizer state and step count. A Tinker `save_state` must be of the same base,
    rank and parts; a Trainer checkpoint of the same LoRA layout loads too."""
    _check_state(src, "load_weights")
    ckpt = load_checkpoint(src)
    meta = ckpt["state"].get("tinker")
    if meta is not None and (meta["base"], meta["rank"], meta["parts"]) != (trainee.base, trainee.rank, trainee.parts):
        raise UserError(
            f"load_weights: the state is of {meta['base']} rank {meta['rank']} {meta['parts']}, "
            f"this model {trainee.base} rank {trainee.rank} {trainee.parts}"
        )
    named, weights = _trainable(trainee), ckpt["weights"]
    if set(named) != set(weights) or any(weights[n].shape != p.shape for n, p in named.items()):
        raise UserError(f"load_weights: the checkpoint's weights are not this model's LoRA layers ({src.name})")
    with torch.no_grad():
        for n, p in named.items():
            p.copy_(weights[n])
    if with_optimizer:
        trainee.optimizer.load_state_dict(ckpt["optimizer"])
        trainee.steps = ckpt["state"]["step"]


class Sampler:
    """Samples from saved weights (a PEFT dir) or a base model, through the one engine builder."""

    def __init__(self, spec: str, precision: str, engine: EngineSettings):
        try:
            self.model = load_model(spec)
            self.tokenizer = load_tokenizer(spec)
        except (ModelNotFound, OSError, ValueError) as exc:
            raise UserError(f"sample: model {spec!r} cannot be loaded: {str(exc).splitlines()[0]}") from None
        self.engine = build_engine(engine, self.model, self.tokenizer, precision)

    def sample(self, prompt: list[int], n: int, params: dict[str, Any], prompt_logprobs: bool, cap: int):
        """`n` samples of `prompt` under Tinker's `SamplingParams`; (samples, prompt log-probs or None)."""
        check_token_ids(prompt, embedding_rows(self.model), "sample: prompt")
        if params.get("top_k", -1) not in (-1, 0):
            raise UserError("sample: sampling_params.top_k is not supported here (top_p is)")
        stop = params.get("stop")
        stop = [stop] if isinstance(stop, str) else list(stop or [])
        strings = tuple(s for s in stop if isinstance(s, str))
        ids = tuple(s for s in stop if isinstance(s, int))
        max_tokens = params.get("max_tokens") or cap
        if max_tokens > cap:
            raise UserError(f"sample: max_tokens {max_tokens} is over this server's cap of {cap}")
        request = SamplingParams(
            temperature=params.get("temperature", 1.0),
            top_p=params.get("top_p", 1.0),
            max_new_tokens=max_tokens,
            stop=strings,
            stop_token_ids=ids,
            n=n,
            top_logprobs=0,
            seed=params.get("seed"),
        )
        done = self.engine.generate([prompt], request)[0]
        samples = [WireSample(c.token_ids, c.logprobs, c.finish_reason == "stop") for c in done]
        return samples, self._prompt_logprobs(prompt) if prompt_logprobs else None

    @torch.no_grad()
    def _prompt_logprobs(self, prompt: list[int]) -> list[float]:
        ids = torch.tensor([prompt])
        ones = torch.ones_like(ids)
        logp, _ = token_logprobs(self.model, ids, ones, ones)
        return [float("nan")] + logp[0, 1:].tolist()
