"""Identity of what was evaluated, and the on-disk cache of suite results keyed by it.

Model hash: sha256 over the files of the model directory (weights, config, tokenizer and
chat template; an adapter adds its base model's hash), or, for a model that exists only in
memory, over its state_dict tensors (name, dtype, shape, bytes) plus the tokenizer's chat
template and vocabulary size. Either way two evaluations share a hash only when the same
weights answered the same rendered prompts.

Cache key: model hash + suite hash + everything that changes the sampled tokens (samples,
seeds, precision, decode batch size) + the runner version. Entries are SuiteResult JSON
plus the run's generations (`samples.jsonl` records); private suites' entries hold hashed
task ids and no task or completion text, like their results do.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Sequence

from tempering.atomic import write_jsonl_atomic, write_text_atomic
from tempering.evals.results import SuiteResult
from tempering.hashing import sha256_file


def default_cache_dir() -> Path:
    """`<tempering cache>/evals` ($TEMPERING_CACHE or ~/.cache/tempering)."""
    from tempering.models.load import cache_dir

    return cache_dir() / "evals"


def model_dir_hash(spec: str) -> str:
    """sha256 over every file at the top level of the model's directory (an adapter adds its base's hash).

    Raises:
        ModelNotFound: when `spec` does not resolve to a local directory.
    """
    from tempering.models.load import ModelNotFound, adapter_base, resolve_model

    local = Path(resolve_model(spec))
    if not local.is_dir():
        raise ModelNotFound(f"cannot hash model {spec!r}: not a local directory ({local})")
    h = hashlib.sha256()
    for path in sorted(p for p in local.iterdir() if p.is_file()):
        h.update(f"{path.name}\0{sha256_file(path)}\n".encode())
    base = adapter_base(str(local))
    if base:
        h.update(f"base\0{model_dir_hash(base)}\n".encode())
    return h.hexdigest()


def cache_key(**parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


class ResultCache:
    """Per cache key: the SuiteResult JSON and its generations (`<key>.samples.jsonl`)."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)

    def get(self, key: str) -> tuple[SuiteResult, list[dict[str, Any]]] | None:
        path, samples = self.dir / f"{key}.json", self.dir / f"{key}.samples.jsonl"
        if not path.is_file() or not samples.is_file():
            return None
        try:
            result = SuiteResult.model_validate_json(path.read_text(encoding="utf-8"))
            records = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines() if line]
        except ValueError:  # an entry from an older schema: recompute and overwrite it
            return None
        return result, records

    def put(self, key: str, result: SuiteResult, records: Sequence[dict[str, Any]] = ()) -> Path:
        """Write the samples first: the result file's presence is what makes an entry a hit."""
        self.dir.mkdir(parents=True, exist_ok=True)
        write_jsonl_atomic(self.dir / f"{key}.samples.jsonl", records, sidecar=False)
        return write_text_atomic(self.dir / f"{key}.json", result.model_dump_json())
