"""`chat_template:` settings: a model's chat template replaced by a Jinja file or inline text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tempering.errors import UserError


def chat_template_text(value: str) -> str:
    """A `chat_template` setting as Jinja text: inline when it holds `{`, else the file it names.

    Raises:
        ValueError: the file is missing, or the text is not a Jinja template (one line).
    """
    import jinja2

    text = value
    if "{" not in value:
        path = Path(value).expanduser()
        if not path.is_file():
            raise UserError(f"chat_template: {value} is neither a file nor inline Jinja (no '{{' in it)")
        text = path.read_text()
    try:
        jinja2.Environment().parse(text)
    except jinja2.TemplateSyntaxError as exc:
        where = f"{value}:{exc.lineno}" if "{" not in value else f"line {exc.lineno}"
        raise UserError(f"chat_template {where}: not a valid Jinja template ({exc.message})") from None
    return text


def apply_chat_template(tokenizer: Any, value: str) -> None:
    """Give `tokenizer` the chat template `value` (inline Jinja or a file); it is saved with the tokenizer."""
    tokenizer.chat_template = chat_template_text(value)
