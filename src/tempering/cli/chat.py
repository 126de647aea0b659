"""`temper chat`: talk to a model or a release in the terminal."""

from __future__ import annotations

import sys
from typing import Any, List, Optional, Sequence

import typer
from rich.console import Console

HELP = "commands: /reset (forget the conversation), /exit (or Ctrl-D)"


def make_engine(spec: str, precision: str = "auto", overrides: Sequence[str] = ()) -> Any:
    """The engine chat samples with: `ChatConfig.engine` (HFEngine unless `--set engine.kind=...`).

    Raises:
        ConfigError: an override that does not validate (e.g. `engine.draft` without kind speculative).
    """
    from tempering.config import ChatConfig, load_config
    from tempering.rollout.select import load_engine

    cfg = load_config(ChatConfig, None, list(overrides))
    return load_engine(cfg.engine, spec, precision)


class ChatSession:
    """A multi-turn conversation with one engine; each reply is appended to the history."""

    def __init__(self, engine: Any, params: Any, system: str | None = None):
        self.engine, self.params, self.system = engine, params, system
        self.messages: list[dict[str, str]] = []
        self.reset()

    def reset(self) -> None:
        self.messages = [{"role": "system", "content": self.system}] if self.system else []

    def say(self, text: str) -> str:
        """Send one user turn; returns the reply (also kept in the history)."""
        self.messages.append({"role": "user", "content": text})
        ids = self.engine.chat_prompt(self.messages)
        reply = self.engine.generate([ids], self.params)[0][0].text.strip()
        self.messages.append({"role": "assistant", "content": reply})
        return reply


def chat(
    model: str = typer.Argument(..., help="Model spec: alias, HF dir, run output (runs/NAME/final), .gguf, hub id."),
    prompt: Optional[str] = typer.Option(None, "--prompt", "-p", help="One-shot: print the reply to this and exit."),
    system: Optional[str] = typer.Option(None, "--system", help="A system message opening the conversation."),
    temperature: float = typer.Option(0.7, min=0.0, help="Sampling temperature (0: greedy)."),
    top_p: float = typer.Option(1.0, min=0.0, max=1.0, help="Nucleus sampling mass."),
    max_tokens: int = typer.Option(256, min=1, help="Most new tokens per reply."),
    seed: Optional[int] = typer.Option(None, help="Sampling seed (the same seed gives the same replies)."),
    precision: str = typer.Option("auto", help="auto | bf16 | fp32 (auto: bf16 only where it is native)."),
    overrides: Optional[List[str]] = typer.Option(
        None,
        "--set",
        help="Engine setting key=value (repeatable), e.g. engine.kind=speculative engine.draft.model=DIR.",
    ),
) -> None:
    """Chat with a model in the terminal, or get one reply with --prompt."""
    from tempering.cli.common import err, fail
    from tempering.config import ConfigError
    from tempering.models.load import ModelNotFound
    from tempering.rollout.engine import SamplingParams
    from tempering.rollout.select import EngineUnavailable

    if precision not in ("auto", "bf16", "fp32"):
        fail(f"--precision must be auto, bf16 or fp32, not {precision!r}")
    try:
        engine = make_engine(model, precision, overrides or [])
    except (ModelNotFound, ConfigError, EngineUnavailable) as exc:
        fail(exc)
    params = SamplingParams(n=1, temperature=temperature, top_p=top_p, max_new_tokens=max_tokens, seed=seed)
    session = ChatSession(engine, params, system)
    if prompt is not None:
        print(session.say(prompt))
        return
    _interactive(session, err)


def _interactive(session: ChatSession, err: Console) -> None:
    """Read turns until /exit, end of input or Ctrl-C; replies go to stdout."""
    out = Console(highlight=False)
    err.print(f"[dim]{HELP}[/dim]")
    try:
        while (text := _read_turn(out)) is not None:
            if not text:
                continue
            if text in ("/exit", "/quit"):
                break
            if text == "/reset":
                session.reset()
                err.print("[dim](conversation reset)[/dim]")
            elif text.startswith("/"):
                err.print(f"[yellow]unknown command {text!r}[/yellow]; {HELP}")
            else:
                out.print("[bold green]model>[/bold green] ", end="")
                out.print(session.say(text), markup=False)
    except KeyboardInterrupt:
        out.print()


def _read_turn(out: Console) -> str | None:
    """One stripped input line, or None at end of input. A terminal gets a prompt and line
    editing (readline); a pipe is read plainly so scripted sessions work."""
    if not sys.stdin.isatty():
        line = sys.stdin.readline()
        return line.strip() if line else None
    try:
        import readline  # noqa: F401  (history and editing for input())
    except ImportError:
        pass
    try:
        return out.input("[bold cyan]you>[/bold cyan] ").strip()
    except EOFError:
        return None
