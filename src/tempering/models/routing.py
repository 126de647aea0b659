"""Watching and replaying the routers of a transformers MoE model, through forward hooks.

transformers' MoE blocks (Qwen3-MoE, OLMoE, Mixtral, ... in transformers 5) call a
`*TopKRouter` module that returns `(router_logits, routing_weights, expert_indices)` over the
block's tokens flattened to (rows, hidden). A `RouterTap` hooks each of them:

* it records each call's logits and chosen experts (for the load metrics and the balance
  losses; only calls that build a graph, and not the replay of a checkpointed layer in the
  backward pass);
* it can replay given routing: the i-th forward call of each router takes the (i mod n)-th of
  the n given routings (rows, layers, k) (a GRPO batch: the prompt pass, then the completion
  pass; a reference pass after them starts again at the prompt). The experts are those (rows
  marked -1 keep their own), and the weights are the router's current probabilities of them,
  so the gradient still reaches the router. A call whose row count differs is an error.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from tempering.models.moe import replayed_scores


def routers(model: Any) -> list[torch.nn.Module]:
    """The model's routers in layer order (empty for a dense model)."""
    return [m for m in model.modules() if type(m).__name__.endswith("TopKRouter")]


def is_moe(model: Any) -> bool:
    return bool(routers(model))


def num_experts(model: Any) -> int:
    router: Any = routers(model)[0]  # a model's own router class: num_experts is a plain int
    return int(router.num_experts)


class RouterTap:
    """Hooks on every router of `model` while open (`with RouterTap(model) as tap:`).

    `records[layer]` lists (logits (T, E), experts (T, k)) per recorded call. `replay` is a list
    of routings (rows, layers, k), long, -1 where a row keeps its own routing.
    """

    def __init__(self, model: Any, record: bool = True, replay: Sequence[torch.Tensor] = ()):
        self.modules = routers(model)
        self.record = record
        self.replay = list(replay)
        self.records: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in self.modules]
        self._calls = [0] * len(self.modules)
        self._handles: list[Any] = []

    def __enter__(self) -> RouterTap:
        for layer, module in enumerate(self.modules):
            self._handles.append(module.register_forward_hook(self._hook(layer)))
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def clear(self) -> None:
        self.records = [[] for _ in self.modules]

    def _hook(self, layer: int):
        def hook(module: Any, args: Any, output: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> Any:
            logits, scores, indices = output
            given = self._given(layer, logits.shape[0])
            if given is not None:
                keep = given < 0
                indices = torch.where(keep, indices, given)
                scores = replayed_scores(logits, indices, bool(getattr(module, "norm_topk_prob", True)))
            in_backward = torch._C._current_graph_task_id() != -1
            if self.record and torch.is_grad_enabled() and not in_backward:
                self.records[layer].append((logits, indices.detach()))
            return logits, scores, indices

        return hook

    def _given(self, layer: int, rows: int) -> torch.Tensor | None:
        if not self.replay:
            return None
        routing = self.replay[self._calls[layer] % len(self.replay)]
        self._calls[layer] += 1
        if routing.shape[0] != rows:
            raise RuntimeError(
                f"router replay: a forward pass over {rows} tokens where the rollout recorded {routing.shape[0]} "
                "(replay follows the grouped prompt-then-completion passes; gradient checkpointing runs whole rows)"
            )
        return routing[:, layer].to(torch.long)


class RoutingRecorder:
    """Records, per router call, the experts chosen for each row: what an engine keeps of a
    generation so the trainer can replay it. `calls[i]` is (rows, layers, k), long, on the host."""

    def __init__(self, model: Any):
        self.modules = routers(model)
        self.calls: list[torch.Tensor] = []
        self._pending: list[torch.Tensor] = []
        self._handles: list[Any] = []

    def __enter__(self) -> RoutingRecorder:
        for module in self.modules:
            self._handles.append(module.register_forward_hook(self._hook))
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _hook(self, module: Any, args: Any, output: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> None:
        self._pending.append(output[2].detach())
        if len(self._pending) == len(self.modules):  # every layer ran: one forward call is complete
            self.calls.append(torch.stack(self._pending, dim=1).cpu())
            self._pending = []
