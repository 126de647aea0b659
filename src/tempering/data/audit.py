"""A data audit of preference pairs: the flaws that quietly teach the wrong thing.

    length bias      how often chosen is longer than rejected (a reward model or DPO learns
                     "longer is better" when it is far from one half), with mean lengths
    ties             tie votes, and rows whose vote majority is a tie (no preference to learn)
    identical        chosen == rejected after normalising whitespace and case (zero signal;
                     DPO's loss is constant on them)
    duplicates       the same (prompt, chosen, rejected) more than once in a file, and how many
                     rows share a prompt
    across splits    rows whose prompt (normalised) also appears in another split's file: a
                     held-out score measured on prompts trained on is no held-out score

Texts are compared normalised: whitespace runs collapsed, case folded; prompts and
completions by their turns' roles, contents and tool calls (a string is one turn).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

from tempering.data.agreement import item_agreement
from tempering.data.textnorm import canonical_text

LENGTH_BIAS_WARN = 0.65
"""Warn when chosen is longer in more than this share of pairs (or shorter in more)."""


def side_text(value: Any, role: str) -> str:
    """A prompt or completion as one normalised string. A string is one turn of `role` (user
    for a prompt, assistant for an answer), so "hi" and [{"role": "user", "content": "hi"}]
    compare equal, as the pair contract says they mean the same."""
    if isinstance(value, str):
        value = [{"role": role, "content": value}]
    turns = []
    for m in value:
        m = m if isinstance(m, dict) else m.model_dump(exclude_none=True)
        calls = json.dumps(m.get("tool_calls"), sort_keys=True) if m.get("tool_calls") else ""
        turns.append(f"<{m.get('role')}>{canonical_text(str(m.get('content') or ''))}{calls}")
    return "\n".join(turns)


def _key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


@dataclass
class PairAudit:
    """The audit of one pair file (see the module docstring); `examples` name file locations."""

    rows: int = 0
    chosen_longer: int = 0
    rejected_longer: int = 0
    mean_chars_chosen: float = 0.0
    mean_chars_rejected: float = 0.0
    tie_votes: int = 0
    tie_majority: int = 0
    identical: int = 0
    duplicate_rows: int = 0
    repeated_prompts: int = 0
    across_splits: dict[str, int] = field(default_factory=dict)
    sources: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def chosen_longer_share(self) -> float | None:
        return self.chosen_longer / self.rows if self.rows else None

    def findings(self) -> list[tuple[str, str]]:
        """(example key, one line) per finding worth fixing before training."""
        out = []
        share = self.chosen_longer_share
        if share is not None and (share > LENGTH_BIAS_WARN or (self.rejected_longer / self.rows) > LENGTH_BIAS_WARN):
            out.append(
                (
                    "length",
                    f"length bias: chosen is longer in {share:.0%} of pairs and shorter in "
                    f"{self.rejected_longer / self.rows:.0%} (mean {self.mean_chars_chosen:.0f} vs "
                    f"{self.mean_chars_rejected:.0f} chars)",
                )
            )
        if self.identical:
            out.append(("identical", f"{self.identical} pairs with chosen == rejected (no preference signal)"))
        if self.tie_majority:
            out.append(("tie", f"{self.tie_majority} pairs whose vote majority is a tie"))
        if self.duplicate_rows:
            out.append(("duplicate_rows", f"{self.duplicate_rows} duplicate rows (same prompt, chosen and rejected)"))
        for other, n in self.across_splits.items():
            if n:
                out.append((f"across:{other}", f"{n} rows share their prompt with {other}"))
        return out

    def warnings(self) -> list[str]:
        return [text for _, text in self.findings()]

    def summary(self) -> dict[str, Any]:
        share = self.chosen_longer_share
        return {
            "rows": self.rows,
            "chosen_longer_share": None if share is None else round(share, 4),
            "rejected_longer_share": round(self.rejected_longer / self.rows, 4) if self.rows else None,
            "mean_chars_chosen": round(self.mean_chars_chosen, 1),
            "mean_chars_rejected": round(self.mean_chars_rejected, 1),
            "tie_votes": self.tie_votes,
            "tie_majority": self.tie_majority,
            "identical": self.identical,
            "duplicate_rows": self.duplicate_rows,
            "repeated_prompts": self.repeated_prompts,
            "across_splits": self.across_splits,
            "sources": self.sources,
            "warnings": len(self.warnings()),
        }


def audit_pairs(
    pairs: Sequence[Any],
    locations: Sequence[str] | None = None,
    other_splits: dict[str, set[str]] | None = None,
    max_examples: int = 5,
) -> PairAudit:
    """Audit pairs (`PreferencePair`s or row dicts); `other_splits` maps a name to its prompt keys
    (`prompt_keys`). `locations` (e.g. "file:line") name the examples."""
    audit = PairAudit(rows=len(pairs))
    where = list(locations) if locations is not None else [f"row {i + 1}" for i in range(len(pairs))]
    seen_rows: set[str] = set()
    prompts: Counter = Counter()
    chars_c = chars_r = 0
    for i, pair in enumerate(pairs):
        get = pair.get if isinstance(pair, dict) else lambda k, p=pair: getattr(p, k)
        prompt = side_text(get("prompt"), "user")
        chosen, rejected = side_text(get("chosen"), "assistant"), side_text(get("rejected"), "assistant")
        chars_c, chars_r = chars_c + len(chosen), chars_r + len(rejected)
        audit.chosen_longer += len(chosen) > len(rejected)
        audit.rejected_longer += len(rejected) > len(chosen)
        if chosen == rejected:
            audit.identical += 1
            _example(audit, "identical", where[i], max_examples)
        votes = get("votes") or []
        audit.tie_votes += sum(1 for v in votes if (v["prefers"] if isinstance(v, dict) else v.prefers) == "tie")
        item = item_agreement(votes)
        if item is not None and item.majority == "tie":
            audit.tie_majority += 1
        row_key = _key(prompt + "\x00" + chosen + "\x00" + rejected)
        if row_key in seen_rows:
            audit.duplicate_rows += 1
            _example(audit, "duplicate_rows", where[i], max_examples)
        seen_rows.add(row_key)
        prompt_key = _key(prompt)
        prompts[prompt_key] += 1
        for name, keys in (other_splits or {}).items():
            if prompt_key in keys:
                audit.across_splits[name] = audit.across_splits.get(name, 0) + 1
                _example(audit, f"across:{name}", where[i], max_examples)
        source = get("source") or "unknown"
        audit.sources[source] = audit.sources.get(source, 0) + 1
    for name in other_splits or {}:
        audit.across_splits.setdefault(name, 0)
    audit.repeated_prompts = sum(n for n in prompts.values() if n > 1)
    if pairs:
        audit.mean_chars_chosen, audit.mean_chars_rejected = chars_c / len(pairs), chars_r / len(pairs)
    return audit


def prompt_keys(pairs: Sequence[Any]) -> set[str]:
    """The normalised-prompt keys of a split, for `audit_pairs(other_splits=...)`."""
    return {_key(side_text(p["prompt"] if isinstance(p, dict) else p.prompt, "user")) for p in pairs}


def _example(audit: PairAudit, kind: str, where: str, limit: int) -> None:
    found = audit.examples.setdefault(kind, [])
    if len(found) < limit:
        found.append(where)
