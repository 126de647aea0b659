"""What answers a request: models by name, read from the release registry on every request.

Model names (`/v1/models` lists one entry per alias and per version):

  production, candidate   the release the alias points at *now* (a promotion or rollback in
                          the registry takes effect on the next request, no restart)
  v1, v2, ...             a release by version
  <spec>                  the configured default model, when no release is `production`

A request for `production` is answered by the `candidate` release with probability
`canary_share` when a candidate exists (the response's `model` field says which answered).

Every model is reached through `engine_for(spec)`, the one place that builds an engine: an
`Engine` (rollout/engine.py) plus the tokenizer (to count and show tokens) and the context
length. A batching or remote engine plugs in there. Each engine answers one request at a
time (its lock); loaded engines are kept least-recently-used, at most `max_loaded`.
"""

from __future__ import annotations

import random
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

from tempering.config import EngineSettings
from tempering.data.render import ToolCallStyle
from tempering.runs.releases import CANDIDATE, PRODUCTION, Release, Releases
from tempering.serve.config import CACHE_TOKENS, SLOTS


class UnknownModel(LookupError):
    """No model by that name; the message is one line for the client."""


@dataclass
class Served:
    """A loaded model: its engine, tokenizer, context length and tool-call style."""

    spec: str
    engine: Any
    tokenizer: Any
    max_context: int
    tool_style: ToolCallStyle
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True)
class Route:
    """Which model answers a request: the name to report, the release (None: default model)."""

    name: str
    spec: str
    release: int | None


MAX_LEN = 2048
"""Prompt + answer tokens a served request may use (capped by the model's own context)."""


def engine_for(
    spec: str, precision: str = "auto", quantize: str = "none", settings: EngineSettings | None = None
) -> Served:
    """Load `spec` (alias, HF dir, run output, adapter) as a started batching engine, built by
    `rollout.select.build_engine` (`settings`: `ServeConfig.engine`, default SLOTS slots and
    CACHE_TOKENS KV cache positions).
    Concurrent requests join one running batch (continuous batching).
    quantize "int8": the model (an adapter merged first) is served as a weight-only int8 copy."""
    from tempering.data.render import detect_tool_call_style
    from tempering.models.vlm import is_vlm
    from tempering.rollout.select import build_engine, load_engine, load_target

    settings = settings or EngineSettings(max_slots=SLOTS, max_cache_tokens=CACHE_TOKENS)
    if is_vlm(spec):  # image inputs: the hf engine, one request at a time (rollout/select.py)
        vision: Any = load_engine(settings, spec, precision, quantize)
        return Served(spec, vision, vision.tokenizer, MAX_LEN, "tempering")
    model, tokenizer, precision = load_target(spec, precision, quantize)
    context = min(int(getattr(model.config, "max_position_embeddings", 0) or MAX_LEN), MAX_LEN)
    engine: Any = build_engine(settings, model, tokenizer, precision, max_len=context)
    engine.start()
    return Served(spec, engine, tokenizer, context, detect_tool_call_style(tokenizer))


def engine_report(served: Served) -> str:
    """One line on a served model's engine and its KV cache memory (the `temper serve` startup
    report): slots, context, KV bytes per token, and what a full-context sequence and the
    `max_cache_tokens` bound hold at that rate."""
    engine = served.engine
    per_token = getattr(engine, "kv_bytes_per_token", None)
    head = f"engine {type(engine).__name__} ({engine.precision}), context {served.max_context} tokens"
    if per_token is None:
        return head
    line = (
        f"{head}, {engine.max_slots} slots, KV cache {per_token:,} bytes/token "
        f"({per_token * served.max_context / 2**20:.1f} MiB per full-context sequence"
    )
    if engine.max_cache_tokens is not None:
        line += (
            f"; at most {engine.max_cache_tokens:,} positions: {per_token * engine.max_cache_tokens / 2**20:.1f} MiB"
        )
    return line + ")"


class Models:
    """Resolves model names to routes and keeps engines loaded."""

    def __init__(
        self,
        default_spec: str,
        releases: Releases | None,
        canary_share: float = 0.0,
        max_loaded: int = 3,
        seed: int = 0,
        load: Callable[[str], Served] = engine_for,
    ):
        self.default_spec, self.releases, self.canary_share = default_spec, releases, canary_share
        self.max_loaded, self._load = max_loaded, load
        self._loaded: OrderedDict[str, Served] = OrderedDict()
        self._load_lock = threading.Lock()
        self._rng = random.Random(seed)
        self.warmed: str | None = None  # the route `warm_up` loaded and ran once
        self._warmed_spec: str | None = None

    # ------------------------------------------------------------------ names
    def _aliases(self) -> dict[str, Release]:
        if self.releases is None:
            return {}
        return {a: r for a in (PRODUCTION, CANDIDATE) if (r := self.releases.current(a)) is not None}

    def listing(self) -> list[dict[str, Any]]:
        """`/v1/models` entries: aliases, then versions (newest first), or the default model."""
        aliases = self._aliases()
        entries = [_entry(alias, r.created_at, r.status, f"v{r.version}") for alias, r in aliases.items()]
        if self.releases is not None:
            entries += [_entry(f"v{r.version}", r.created_at, r.status, f"v{r.version}") for r in self.releases.list()]
        if PRODUCTION not in aliases:
            entries.append(_entry(self.default_spec, 0, "default", None))
        return entries

    def route(self, name: str) -> Route:
        """The route for a requested model name (canary share applied to `production`)."""
        aliases = self._aliases()
        if name in (PRODUCTION, CANDIDATE) and name in aliases:
            release = aliases[name]
            if name == PRODUCTION and CANDIDATE in aliases and self._rng.random() < self.canary_share:
                release = aliases[CANDIDATE]
            return Route(f"v{release.version}", release.model, release.version)
        if self.releases is not None:  # names are matched, never parsed: "v" + 5000 digits is just unknown
            for r in self.releases.list():
                if name == f"v{r.version}":
                    return Route(name, r.model, r.version)
        if name == self.default_spec and PRODUCTION not in aliases:
            return Route(name, name, None)
        known = ", ".join(e["id"] for e in self.listing())
        raise UnknownModel(f"The model `{name}` does not exist (available: {known})")

    def release_routes(self) -> list[Route]:
        """One route per live release, one an alias points at now (the arena's contestants): a
        retired or rolled-back release is never paired with the candidate."""
        return [Route(f"v{r.version}", r.model, r.version) for r in self._aliases().values()]

    def warm_up(self) -> str:
        """Load the model `production` names (else the default model) and run one short
        generation, so the first request pays no load or first-call cost; returns its route name."""
        from tempering.rollout.engine import SamplingParams

        if self.warmed is not None:
            return self.warmed
        route = self.route(PRODUCTION if PRODUCTION in self._aliases() else self.default_spec)
        served = self.served(route)
        prompt = served.engine.chat_prompt([{"role": "user", "content": "Hi"}])
        params = SamplingParams(max_new_tokens=2, temperature=0.0)
        if getattr(served.engine, "serving", False):
            served.engine.submit(prompt, params).result()
        else:
            with served.lock:
                served.engine.generate([prompt], params)
        self.warmed, self._warmed_spec = route.name, route.spec
        return route.name

    def report(self) -> str | None:
        """`engine_report` of the model `warm_up` loaded (None before it, or once it is unloaded)."""
        with self._load_lock:
            served = self._loaded.get(self._warmed_spec) if self._warmed_spec is not None else None
        return None if served is None else engine_report(served)

    # ------------------------------------------------------------------ engines
    def served(self, route: Route) -> Served:
        """The loaded model for a route (loaded on first use)."""
        with self._load_lock:
            if route.spec in self._loaded:
                self._loaded.move_to_end(route.spec)
                return self._loaded[route.spec]
            served = self._load(route.spec)
            self._loaded[route.spec] = served
            while len(self._loaded) > self.max_loaded:
                _, evicted = self._loaded.popitem(last=False)
                _stop(evicted)
            return served

    def stuck(self, after_s: float) -> str | None:
        """Why the server is stuck: a loaded engine whose current step has run over `after_s`
        seconds (its serving thread never came back), else None. Reads no lock a stuck step holds."""
        for served in list(self._loaded.values()):
            running = float(getattr(served.engine, "step_running_s", 0.0))
            if running > after_s:
                return (
                    f"an engine step has run {running:.0f} s, over request_timeout_s {after_s:g} s: "
                    "the engine serves nothing more until the server is restarted"
                )
        return None

    def close(self) -> None:
        """Stop and drop every loaded engine (the server shuts down): their serving threads end
        and the models and KV caches they held can be freed."""
        with self._load_lock:
            while self._loaded:
                _stop(self._loaded.popitem()[1])


def _stop(served: Served) -> None:
    # a started engine's thread holds the engine (model, KV cache) until it is stopped
    if getattr(served.engine, "serving", False):
        served.engine.stop()


def _entry(name: str, created: float, status: str, release: str | None) -> dict[str, Any]:
    """OpenAI's `Model` object (`id`, `object`, `created`, `owned_by`) plus Tempering's own
    fields: `status` (production | candidate | retired | rolled_back | default) and `release`
    (the version an alias or version name serves; None for the default model)."""
    return {
        "id": name,
        "object": "model",
        "created": int(created),
        "owned_by": "tempering",
        "status": status,
        "release": release,
    }
