"""Policy versions: which weights sampled each token, and how stale a sample is when it trains.

A *version* is the Trainer's `weights_version`: 0 for the weights a run starts from, +1 for every
optimizer step that changes them (and for a rollback to a checkpoint), never reset. A source
stamps each token it samples with the version its engine sampled under; prompt, environment and
padding tokens carry `NOT_SAMPLED`. A served release's answers are version 0 of that release.

The *staleness* of a sampled token when an optimizer step trains on it is the trainer's version
then minus the token's version: 0 when the policy that sampled is the one being updated. It is a
count of optimizer steps, not a numerical figure: the engine-vs-trainer log-prob mismatch of the
same weights (`logprob_mismatch`, objectives/mismatch.py) is a separate measure.

Plain ints and lists, no torch: configs, stores and the event stream use these too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

Version = int
"""A policy version: a count of weight changes since the run's start (>= 0)."""

NOT_SAMPLED: Version = -1
"""The version of a token no policy sampled: prompt, tool output, padding, or unknown (a record
written before versions were kept)."""

SERVED: Version = 0
"""The version of a served release's answers (`temper serve --capture-tokens`): version 0 of that
release, whose weights do not change while it is served (the release is named per turn beside it)."""


def stamp(sampled_mask: Sequence[int], version: Version) -> list[Version]:
    """Per-token versions: `version` where `sampled_mask` is 1, `NOT_SAMPLED` elsewhere."""
    if version < 0:
        raise ValueError(f"a policy version is >= 0, got {version}")
    return [version if m else NOT_SAMPLED for m in sampled_mask]


def staleness(trainer_version: Version, token_versions: Iterable[Version]) -> list[int]:
    """Each sampled token's staleness, `trainer_version - version` (`NOT_SAMPLED` tokens skipped).

    Raises:
        ValueError: a token from a newer policy than the trainer's (a bookkeeping bug).
    """
    out = [trainer_version - v for v in token_versions if v != NOT_SAMPLED]
    if any(k < 0 for k in out):
        raise ValueError(f"a token's version is newer than the trainer's ({trainer_version})")
    return out


def histogram(stalenesses: Iterable[int]) -> dict[int, int]:
    """Staleness k -> number of tokens, in ascending k."""
    return dict(sorted(Counter(stalenesses).items()))


def staleness_metrics(hist: Mapping[int, int]) -> dict[str, float]:
    """The step's figures from a histogram: `staleness_mean` and `staleness_max` over its tokens
    and `staleness_hist/<k>` (token counts); {} when no sampled token was trained on."""
    total = sum(hist.values())
    if total == 0:
        return {}
    out = {
        "staleness_mean": sum(k * n for k, n in hist.items()) / total,
        "staleness_max": float(max(k for k, n in hist.items() if n)),
    }
    return out | {f"staleness_hist/{k}": float(n) for k, n in sorted(hist.items())}


def is_stale(trainer_version: Version, token_versions: Iterable[Version], bound: int) -> bool:
    """Whether any sampled token is more than `bound` steps old (`NOT_SAMPLED` tokens never are)."""
    return any(k > bound for k in staleness(trainer_version, token_versions))


def stale_metrics(dropped: int, groups: int) -> dict[str, float]:
    """A step's figures of the staleness bound: `stale_dropped_groups` (groups dropped for holding a
    token staler than the bound) and `stale_dropped_share` (of the groups served); {} without groups."""
    if groups == 0:
        return {}
    return {"stale_dropped_groups": float(dropped), "stale_dropped_share": dropped / groups}


class VersionClock:
    """A batch source's view of the trainer's weights: the version it stamps new samples with
    (`on_weights`) and the staleness of the tokens it hands out, reported once per step (`metrics`)."""

    def __init__(self) -> None:
        self.version: Version = 0
        self.step = 0
        self._hist: Counter[int] = Counter()
        self._groups = self._dropped = 0

    def on_weights(self, version: Version, step: int) -> None:
        """The trainer's weights are now `version` (after optimizer step `step`, a rollback or a resume)."""
        if version < 0:
            raise ValueError(f"a policy version is >= 0, got {version}")
        self.version, self.step = version, step

    def served(self, token_versions: Iterable[Version]) -> None:
        """Count the staleness of tokens handed to the trainer for a step at the current version."""
        self._hist.update(staleness(self.version, token_versions))

    def judged(self, groups: int, dropped: int) -> None:
        """Count groups checked against the staleness bound before training, and those dropped."""
        self._groups += groups
        self._dropped += dropped

    def metrics(self) -> dict[str, float]:
        """The staleness figures of the tokens and groups served since the last call (then forgotten)."""
        out = staleness_metrics(self._hist) | stale_metrics(self._dropped, self._groups)
        self._hist, self._groups, self._dropped = Counter(), 0, 0
        return out
