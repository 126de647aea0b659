"""Weighted mixtures of data sources by track, with replay of general data as a forgetting guard.

    plan = plan_mix(sources, size=100_000, by="rows", seed=0)   # counts per source, caps applied
    rows = draw_mix(sources, plan, seed=0, epoch=0)             # the mixed rows, interleaved
    report = mix_report(sources, plan, rows)                    # requested vs realised, rows and tokens

How a mix is made, and why:

  * **Quotas, not coin flips.** Each source gets `size * share` rows (or tokens) by
    largest-remainder rounding, so a realised share is off from the requested one by at most
    one row (tokens: one row's tokens), however small the mix. Drawing every row by a weighted
    coin (as a streaming interleave does) misses by ~sqrt(n) rows instead.
  * **Epoch-aware walks.** A source is read along successive seeded permutations of its rows:
    every row is used once before any row repeats, and mix epoch `e` continues the walk where
    epoch `e - 1` stopped, so a small source is not replayed identically every epoch.
  * **Upsampling caps.** A source may be repeated at most `max_epochs` times its size in one
    mix; what a capped source cannot fill is handed to the uncapped ones in proportion to
    their weights, and the report shows requested, effective (after caps) and realised shares.
  * **Replay.** General data mixed in at a fixed share of the whole (`replay_ratio`), the
    other sources share the rest by weight: older skills keep being rehearsed.
  * **Interleaving.** Row `j` of a source with `c` rows is placed at key `(j + u) / c`
    (`u` uniform in [0, 1), seeded) and the mix is sorted by key: every prefix of the mix
    holds each source at its share within a row or two, so a run stopped early still trained
    on the requested mix.

Everything is seeded: the same sources, sizes and seed give the same mix, row for row.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence, get_args

import numpy as np

from tempering.config.data import Track
from tempering.errors import UserError

TRACKS: tuple[str, ...] = get_args(Track)
Unit = Literal["rows", "tokens"]


@dataclass
class MixSource:
    """One source of a mixture, loaded.

    `rows` are the rows as read (any JSON objects: conversations, tasks, pairs); `tokens`
    their lengths in tokens (or in whatever unit the caller counted).
    """

    name: str
    track: str
    weight: float
    rows: list[Any]
    tokens: list[int]
    max_epochs: float | None = None
    replay: bool = False

    def __post_init__(self) -> None:
        if self.track not in TRACKS:
            raise UserError(f"source {self.name!r}: track {self.track!r} is not one of {', '.join(TRACKS)}")
        if not self.rows:
            raise UserError(f"source {self.name!r}: no rows")
        if len(self.tokens) != len(self.rows):
            raise UserError(f"source {self.name!r}: {len(self.tokens)} token counts for {len(self.rows)} rows")
        if not self.weight > 0:
            raise UserError(f"source {self.name!r}: weight must be > 0, got {self.weight}")

    @property
    def total_tokens(self) -> int:
        return int(sum(self.tokens))


@dataclass
class MixPlan:
    """How much of each source a mix takes (in `unit`), before the rows are drawn."""

    unit: Unit
    size: int
    requested: dict[str, float]
    """Share of the mix asked for, per source (replay included), summing to 1."""
    effective: dict[str, float]
    """Share after the upsampling caps moved what capped sources could not fill."""
    quota: dict[str, int]
    """Rows (unit rows) or tokens (unit tokens) to draw per source."""
    capped: list[str] = field(default_factory=list)
    """Sources held back by their `max_epochs` cap."""


def requested_shares(sources: Sequence[MixSource], replay_ratio: float | None = None) -> dict[str, float]:
    """Per-source shares: replay sources split `replay_ratio` by weight, the others the rest.

    Without replay sources (or `replay_ratio` None) every source shares by weight alone.
    """
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise UserError(f"source names must be unique, got {names}")
    replay = [s for s in sources if s.replay]
    main = [s for s in sources if not s.replay]
    if not main:
        raise UserError("a mix needs at least one source besides replay")
    if replay and replay_ratio is None:
        raise UserError("replay sources need a replay ratio")
    r = replay_ratio if replay and replay_ratio is not None else 0.0
    if not 0.0 <= r < 1.0:
        raise UserError(f"replay ratio must be in [0, 1), got {r}")
    shares = {}
    for group, total in ((main, 1.0 - r), (replay, r)):
        w = sum(s.weight for s in group)
        shares.update({s.name: total * s.weight / w for s in group})
    return shares


def largest_remainder(total: int, shares: dict[str, float]) -> dict[str, int]:
    """Integers summing to `total`, each within 1 of `total * share` (Hamilton's method)."""
    exact = {k: total * v for k, v in shares.items()}
    out = {k: math.floor(v) for k, v in exact.items()}
    left = total - sum(out.values())
    # ties broken by name so the result never depends on dict order
    for k in sorted(exact, key=lambda k: (-(exact[k] - out[k]), k))[:left]:
        out[k] += 1
    return out


def plan_mix(sources: Sequence[MixSource], size: int, by: Unit = "rows", replay_ratio: float | None = None) -> MixPlan:
    """Quotas per source for a mix of `size` rows (or tokens), upsampling caps applied.

    Replay keeps its share of the whole. Within each group (the main sources, the replay
    sources) a capped source gets exactly its cap and the rest of the group's quota is
    re-divided among the others by their requested shares, until no further source hits its
    cap; only what a wholly capped group cannot hold moves to the other group.
    """
    if size < 1:
        raise UserError(f"mix size must be >= 1, got {size}")
    requested = requested_shares(sources, replay_ratio)
    cap = {s.name: _cap(s, by) for s in sources}
    groups = [[s.name for s in sources if not s.replay], [s.name for s in sources if s.replay]]
    totals = largest_remainder(
        size, {"main": sum(requested[k] for k in groups[0]), "replay": sum(requested[k] for k in groups[1])}
    )
    quota = _fill(groups[0], totals["main"], requested, cap)
    quota.update(_fill(groups[1], totals["replay"] + totals["main"] - sum(quota.values()), requested, cap))
    spill = size - sum(quota.values())
    if spill:  # the replay group could not hold its share: the main sources take it
        quota.update(_fill(groups[0], sum(quota[k] for k in groups[0]) + spill, requested, cap))
    capped = sorted(
        k for k in quota if cap[k] is not None and quota[k] == cap[k] and quota[k] < size * requested[k] - 1
    )
    total = sum(quota.values())
    effective = {k: quota[k] / total if total else 0.0 for k in requested}
    return MixPlan(by, size, requested, effective, {k: quota[k] for k in requested}, capped)


def _fill(names: list[str], total: int, requested: dict[str, float], cap: dict[str, int | None]) -> dict[str, int]:
    """Split `total` among `names` by their shares, no source above its cap."""
    fixed: dict[str, int] = {}
    while True:
        free = {k: requested[k] for k in names if k not in fixed}
        rest = total - sum(fixed.values())
        if not free or rest <= 0:
            return {**{k: 0 for k in names}, **fixed}
        norm = sum(free.values())
        quota = largest_remainder(rest, {k: v / norm for k, v in free.items()})
        over = {k: c for k, q in quota.items() if (c := cap[k]) is not None and q > c}
        if not over:
            return {**fixed, **quota}
        fixed.update(over)


def _cap(source: MixSource, by: Unit) -> int | None:
    if source.max_epochs is None:
        return None
    return math.floor(source.max_epochs * (len(source.rows) if by == "rows" else source.total_tokens))


def _seed_of(seed: int, name: str) -> int:
    return zlib.crc32(f"{seed}\0{name}".encode())


def walk(n: int, seed: int, name: str, start: int, count: int) -> np.ndarray:
    """Row indices at positions [start, start + count) of a source's endless seeded walk.

    The walk is the concatenation of permutations of range(n), one per source epoch, each
    seeded by (seed, source name, epoch): every row appears once per source epoch.
    """
    out = []
    pos, end = start, start + count
    while pos < end:
        epoch, offset = divmod(pos, n)
        perm = np.random.default_rng([_seed_of(seed, name), epoch]).permutation(n)
        take = min(n - offset, end - pos)
        out.append(perm[offset : offset + take])
        pos += take
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def _rows_for_tokens(source: MixSource, seed: int, quota: int, skip_epochs: int) -> np.ndarray:
    """Walk the source until the drawn tokens reach `quota` (a row is taken when that brings
    the total closer to the quota); `skip_epochs` earlier mix epochs are walked past first."""
    toks = np.asarray(source.tokens, dtype=np.int64)
    if not toks.sum():
        raise UserError(f"source {source.name!r}: every row has 0 tokens; a token-based mix cannot use it")
    start = 0
    for _ in range(skip_epochs):
        start += len(_take_tokens(toks, walk_from(toks.size, seed, source.name, start), quota))
    return _take_tokens(toks, walk_from(toks.size, seed, source.name, start), quota)


def walk_from(n: int, seed: int, name: str, start: int) -> Callable[[int], np.ndarray]:
    """Lazy chunks of the walk from `start`: call with a chunk index, get that chunk's rows."""
    chunk = max(n, 1024)
    return lambda i: walk(n, seed, name, start + i * chunk, chunk)


def _take_tokens(toks: np.ndarray, chunks: Callable[[int], np.ndarray], quota: int) -> np.ndarray:
    taken: list[np.ndarray] = []
    total, i = 0, 0
    while total < quota:
        idx = chunks(i)
        cum = total + np.cumsum(toks[idx])
        stop = int(np.searchsorted(cum, quota))  # first position reaching the quota
        if stop >= idx.size:
            taken.append(idx)
            total = int(cum[-1])
            i += 1
            continue
        before = int(cum[stop - 1]) if stop else total
        take = stop + 1 if cum[stop] - quota <= quota - before else stop
        taken.append(idx[:take])
        break
    return np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)


@dataclass
class MixedRow:
    source: str
    index: int
    """Row index within its source."""
    row: Any


def draw_mix(sources: Sequence[MixSource], plan: MixPlan, seed: int = 0, epoch: int = 0) -> list[MixedRow]:
    """The mixed rows of mix epoch `epoch`, interleaved so every prefix keeps the shares."""
    if epoch < 0:
        raise UserError(f"epoch must be >= 0, got {epoch}")
    picks: dict[str, np.ndarray] = {}
    for s in sources:
        q = plan.quota[s.name]
        if plan.unit == "rows":
            picks[s.name] = walk(len(s.rows), seed, s.name, epoch * q, q)
        else:
            picks[s.name] = _rows_for_tokens(s, seed, q, epoch)
    keys, owners = [], []
    for k, s in enumerate(sources):
        c = picks[s.name].size
        if c:
            u = np.random.default_rng([_seed_of(seed, s.name), 1 << 20, epoch]).random(c)
            keys.append((np.arange(c) + u) / c)
            owners.append(np.stack([np.full(c, k), np.arange(c)], axis=1))
    if not keys:
        return []
    order = np.argsort(np.concatenate(keys), kind="stable")
    pairs = np.concatenate(owners)[order]
    return [
        MixedRow(sources[k].name, int(picks[sources[k].name][j]), sources[k].rows[picks[sources[k].name][j]])
        for k, j in pairs
    ]


def realised(sources: Sequence[MixSource], rows: Sequence[MixedRow]) -> dict[str, dict[str, float]]:
    """Rows and tokens drawn per source, and their shares of the mix."""
    by_name = {s.name: s for s in sources}
    counts = {s.name: 0 for s in sources}
    tokens = {s.name: 0 for s in sources}
    for r in rows:
        counts[r.source] += 1
        tokens[r.source] += by_name[r.source].tokens[r.index]
    n, t = max(sum(counts.values()), 1), max(sum(tokens.values()), 1)
    return {
        k: {"rows": counts[k], "tokens": tokens[k], "row_share": counts[k] / n, "token_share": tokens[k] / t}
        for k in counts
    }


def mix_report(sources: Sequence[MixSource], plan: MixPlan, rows: Sequence[MixedRow]) -> dict[str, Any]:
    """Requested, effective and realised shares per source and per track, with the worst error.

    `max_abs_error` compares the realised share (in the plan's unit) with the requested one;
    `max_abs_error_effective` with the share left after the caps (what the mixer could do).
    """
    real = realised(sources, rows)
    key = "row_share" if plan.unit == "rows" else "token_share"
    per_source = []
    for s in sources:
        r = real[s.name]
        distinct = len({m.index for m in rows if m.source == s.name})
        per_source.append(
            {
                "source": s.name,
                "track": s.track,
                "replay": s.replay,
                "source_rows": len(s.rows),
                "requested": plan.requested[s.name],
                "effective": plan.effective[s.name],
                "realised": r[key],
                "rows": r["rows"],
                "tokens": r["tokens"],
                "row_share": r["row_share"],
                "token_share": r["token_share"],
                "epochs": r["rows"] / len(s.rows),
                "distinct_rows": distinct,
                "capped": s.name in plan.capped,
            }
        )
    tracks: dict[str, dict[str, float]] = {}
    for p in per_source:
        t = tracks.setdefault(p["track"], {"requested": 0.0, "realised": 0.0, "rows": 0, "tokens": 0})
        for k in ("requested", "realised", "rows", "tokens"):
            t[k] += p[k]
    return {
        "unit": plan.unit,
        "size": plan.size,
        "rows": len(rows),
        "tokens": sum(p["tokens"] for p in per_source),
        "sources": per_source,
        "tracks": tracks,
        "capped": plan.capped,
        "max_abs_error": max(abs(p["realised"] - p["requested"]) for p in per_source),
        "max_abs_error_effective": max(abs(p["realised"] - p["effective"]) for p in per_source),
    }


def row_text(row: Any) -> str:
    """The text of a row for length counting: message contents, prompt/answer fields, or every string in it."""
    if isinstance(row, str):
        return row
    if isinstance(row, dict):
        if isinstance(row.get("messages"), list):
            return "\n".join(
                row_text(m.get("content") or "") + _calls(m) for m in row["messages"] if isinstance(m, dict)
            )
        return "\n".join(row_text(v) for k, v in row.items() if k not in ("meta", "verifier", "id"))
    if isinstance(row, list):
        return "\n".join(row_text(v) for v in row)
    return ""


def _calls(message: dict) -> str:
    calls = message.get("tool_calls")
    return "\n" + str(calls) if calls else ""


def word_count(text: str) -> int:
    """Whitespace words: the token count used when no tokenizer is given."""
    return len(text.split())
