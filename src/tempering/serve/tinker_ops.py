"""What `temper serve --tinker` does with a model: the Tinker primitives over Tempering's pieces.

  create_trainee        base model (`models/load.py`) + LoRA (`models/lora.py`) + AdamW
  forward_backward      log-probs (`models/logprobs.py`), a registered Tinker loss
                        (`objectives/tinker_losses.py`), gradients accumulated until the step
  optim_step            AdamW with the request's hyper-parameters, then the gradients are cleared
  save_state / load_state   adapter weights (PEFT safetensors) + optimizer state
  save_for_sampler      the adapter as a PEFT dir a sampler loads (`load_model` takes it)
  Sampler               an engine from `rollout/select.py: build_engine` over saved weights

All of it runs on the server's one worker thread, in the order the requests arrived.
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
from tempering.config import EngineSettings, LoraSettings, SamplingParams
from tempering.data.padding import PAD_ID, right_pad
from tempering.models.load import ModelNotFound, load_model, load_tokenizer
from tempering.models.logprobs import head_logprobs, token_logprobs
from tempering.models.lora import apply_lora
from tempering.models.precision import autocast, resolve_precision
from tempering.rollout.select import build_engine
from tempering.serve.tinker_wire import WireDatum, WireSample

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
    optimizer: torch.optim.AdamW
    precision: str
    """"bf16" (autocast; the weights stay float32) or "fp32"."""
    parts: dict[str, bool] = field(default_factory=dict)
    """Which layers carry LoRA: `train_attn`, `train_mlp`, `train_unembed` (the request's)."""
    steps: int = 0
    losses: list[float] = field(default_factory=list)
    """`loss:sum` of each forward_backward (training calls only)."""


def _targets(model: Any, attn: bool, mlp: bool, unembed: bool) -> list[str]:
    """Leaf names of the Linear layers LoRA adapts: attention, MLP and/or the LM head."""
    head = model.get_output_embeddings()
    names = set()
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        leaf = name.rsplit(".", 1)[-1]
        if module is head:
            if unembed:
                names.add(leaf)
        elif (attn and ("attn" in name or "attention" in name)) or (mlp and ".mlp." in f".{name}"):
            names.add(leaf)
    return sorted(names)


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
    targets = _targets(model, parts["train_attn"], parts["train_mlp"], parts["train_unembed"])
    if not targets:
        raise UserError("create_model: lora_config adapts no layer (train_attn, train_mlp, train_unembed all false)")
    if seed is not None:
        torch.manual_seed(seed)
    model = apply_lora(model, LoraSettings(r=rank, alpha=LORA_ALPHA, target_modules=targets), base)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=0.0)
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
    logp, _ = head_logprobs(model.get_output_embeddings(), hidden, targets, mask)
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
    """Per-datum target log-probs and `loss:sum`; unless `forward_only`, the loss's gradient is
    added to what earlier calls accumulated (the next optim_step applies and clears it). A loss
    registered with `provenance` also reads what `provenance` recorded for each datum."""
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
            trainee.losses.append(float(total.detach()))
    outputs = [{"logprobs": logp[i, : len(d.tokens)].detach().numpy()} for i, d in enumerate(data)]
    return outputs, {"loss:sum": float(total.detach())}


def optim_step(trainee: Trainee, lr: float, betas: tuple[float, float], eps: float, wd: float, clip: float) -> dict:
    """One AdamW step on the accumulated gradients with the request's settings; clears them."""
    params = [p for g in trainee.optimizer.param_groups for p in g["params"]]
    for group in trainee.optimizer.param_groups:
        group.update(lr=lr, betas=betas, eps=eps, weight_decay=wd)
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


def save_state(trainee: Trainee, out: Path) -> Path:
    """Adapter weights, optimizer state and step count: what `load_state` restores."""
    save_for_sampler(trainee, out)
    torch.save(trainee.optimizer.state_dict(), out / "optimizer.pt")
    (out / "tinker_state.json").write_text(
        json.dumps({"base": trainee.base, "rank": trainee.rank, "steps": trainee.steps, "parts": trainee.parts})
    )
    return out


def load_state(trainee: Trainee, src: Path, with_optimizer: bool) -> None:
    """Restore what `save_state` wrote into this trainee (same base and rank)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    meta_file = src / "tinker_state.json"
    if not meta_file.is_file():
        raise UserError(f"load_weights: {src.name} is not a training state (save_state writes those)")
    meta = json.loads(meta_file.read_text())
    if (meta["base"], meta["rank"], meta["parts"]) != (trainee.base, trainee.rank, trainee.parts):
        raise UserError(
            f"load_weights: the state is of {meta['base']} rank {meta['rank']} {meta['parts']}, "
            f"this model {trainee.base} rank {trainee.rank} {trainee.parts}"
        )
    set_peft_model_state_dict(trainee.model, load_file(src / "adapter_model.safetensors"))
    if with_optimizer:
        trainee.optimizer.load_state_dict(torch.load(src / "optimizer.pt", weights_only=True))
        trainee.steps = meta["steps"]


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
