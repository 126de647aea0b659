"""Synthetic visual tasks, seeded and drawn with Pillow; verified by the existing `exact` / `numeric` verifiers.

    colour_shape   one shape on a plain ground: "red circle"            (6 colours x 3 shapes: chance 1/18)
    count          1-9 dots of one colour, scattered: "7"                 (chance 1/9)
    read           a two-digit number written large: "42"                 (10-99: chance 1/90)
    bar_chart      3-5 bars labelled A.. left to right: the tallest "C"   (chance 1/n, ~0.26 on average)
    ui_button      a form with 3 labelled buttons: which one says X, "2"  (chance 1/3)

Every task is a `Task` whose prompt is one user turn holding the image (a PNG data URL) and
the question. Train and held-out are disjoint twice over: by seed (each split draws from its
own generator stream) and by layout (a task's layout key, the drawn parameters that fix the
picture, hashes into exactly one split; `layout_split`), so no held-out picture is a training
picture, not even a re-drawn one.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any, Callable

from tempering.data.images import data_url
from tempering.errors import UserError
from tempering.types import Task

COLOURS = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (230, 210, 40),
    "purple": (150, 60, 190),
    "orange": (240, 140, 30),
}
SHAPES = ("circle", "square", "triangle")
BUTTON_WORDS = ("OK", "Cancel", "Save", "Delete", "Help", "Next")
BUTTON_FILLS = ((70, 110, 200), (60, 140, 90), (120, 80, 170), (90, 90, 100))
HELDOUT_SHARE = 5
"""One layout hash in HELDOUT_SHARE is held out."""
MAX_MISSES = 20_000
"""Draws in a row that give no new layout of the split before `vision_tasks` says the task ran out."""


@dataclass
class Drawn:
    image: Any
    question: str
    answer: str
    verifier: str
    layout: tuple


def _canvas(size: int, ground: tuple[int, int, int] = (245, 245, 245)) -> tuple[Any, Any]:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (size, size), ground)
    return image, ImageDraw.Draw(image)


def _font(size: int) -> Any:
    from PIL import ImageFont

    return ImageFont.load_default(size=size)


def _shape(draw: Any, shape: str, box: tuple[int, int, int, int], fill: tuple[int, int, int]) -> None:
    x0, y0, x1, y1 = box
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "square":
        draw.rectangle(box, fill=fill)
    else:
        draw.polygon([((x0 + x1) // 2, y0), (x1, y1), (x0, y1)], fill=fill)


def colour_shape(rng: random.Random, size: int) -> Drawn:
    colour, shape = rng.choice(sorted(COLOURS)), rng.choice(SHAPES)
    side = rng.randint(size // 3, size * 2 // 3)
    x, y = rng.randint(2, size - side - 2), rng.randint(2, size - side - 2)
    image, draw = _canvas(size)
    _shape(draw, shape, (x, y, x + side, y + side), COLOURS[colour])
    q = "What colour and shape is the object? Answer with two words, colour then shape."
    return Drawn(image, q, f"{colour} {shape}", "exact", (colour, shape, side, x, y))


def count(rng: random.Random, size: int) -> Drawn:
    n, colour = rng.randint(1, 9), rng.choice(sorted(COLOURS))
    cell = size // 3
    cells = rng.sample(range(9), n)  # one dot per cell of a 3x3 grid, jittered: dots never touch
    image, draw = _canvas(size)
    r = max(2, cell // 4)
    spots = []
    for c in cells:
        cx = (c % 3) * cell + rng.randint(r + 1, cell - r - 1)
        cy = (c // 3) * cell + rng.randint(r + 1, cell - r - 1)
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=COLOURS[colour])
        spots.append((cx, cy))
    return Drawn(image, "How many dots are there? Answer with a number.", str(n), "numeric", (colour, *sorted(spots)))


def read(rng: random.Random, size: int) -> Drawn:
    n = rng.randint(10, 99)
    font = _font(size // 2)
    image, draw = _canvas(size)
    dx, dy = rng.randint(0, size // 4), rng.randint(0, size // 3)
    draw.text((2 + dx, 2 + dy), str(n), fill=(20, 20, 20), font=font)
    return Drawn(image, "What number is written in the image? Answer with the number.", str(n), "numeric", (n, dx, dy))


def bar_chart(rng: random.Random, size: int) -> Drawn:
    k = rng.randint(3, 5)
    heights = rng.sample(range(4, size - 14), k)
    image, draw = _canvas(size, (255, 255, 255))
    width = (size - 4) // k
    font = _font(max(8, size // 7))
    colour = COLOURS[rng.choice(sorted(COLOURS))]
    for i, h in enumerate(heights):
        x = 2 + i * width
        draw.rectangle((x + 1, size - 12 - h, x + width - 2, size - 12), fill=colour)
        draw.text((x + width // 3, size - 11), "ABCDE"[i], fill=(0, 0, 0), font=font)
    best = "ABCDE"[heights.index(max(heights))]
    q = "Which bar is the tallest? Answer with its letter."
    return Drawn(image, q, best, "exact", (colour, *heights))


def ui_button(rng: random.Random, size: int) -> Drawn:
    words = rng.sample(BUTTON_WORDS, 3)
    target = rng.randrange(3)
    fill = rng.choice(BUTTON_FILLS)
    image, draw = _canvas(size, (230, 232, 240))
    font = _font(max(8, size // 6))
    h = size // 3
    insets = [rng.randint(0, max(1, size // 8)) for _ in words]  # where each label starts: not one fixed spot
    for i, (word, inset) in enumerate(zip(words, insets)):
        y = i * h
        draw.rounded_rectangle((3, y + 2, size - 4, y + h - 3), radius=3, fill=fill)
        draw.text((5 + inset, y + 3), word, fill=(255, 255, 255), font=font)
    q = f'Which button says "{words[target]}"? Answer with its number, 1 to 3 from the top.'
    return Drawn(image, q, str(target + 1), "numeric", (*words, fill, *insets))  # the picture alone: one question each


VISION_TASKS: dict[str, Callable[[random.Random, int], Drawn]] = {
    "colour_shape": colour_shape,
    "count": count,
    "read": read,
    "bar_chart": bar_chart,
    "ui_button": ui_button,
}
CHANCE = {
    "colour_shape": 1 / 18,
    "count": 1 / 9,
    "read": 1 / 90,
    "bar_chart": (1 / 3 + 1 / 4 + 1 / 5) / 3,
    "ui_button": 1 / 3,
}
"""Accuracy of a uniform guess over each task's answers."""


def layout_split(layout: tuple) -> str:
    """The one split a layout belongs to: its hash decides, whatever the seed that drew it."""
    digest = hashlib.sha256(repr(layout).encode()).digest()
    return "heldout" if digest[0] % HELDOUT_SHARE == 0 else "train"


def vision_tasks(name: str, n: int, seed: int = 0, split: str = "train", size: int = 64) -> list[Task]:
    """`n` tasks of kind `name` of one split, drawn from the seed's stream for that split.

    Raises:
        ValueError: an unknown task name, or more tasks asked than the task has distinct layouts
            in the split (after `MAX_MISSES` draws in a row that bring no new one).
    """
    if name not in VISION_TASKS:
        raise UserError(f"unknown vision task {name!r}; expected one of {', '.join(VISION_TASKS)}")
    rng = random.Random(f"{name}:{split}:{seed}")
    out, seen, misses = [], set(), 0
    while len(out) < n:
        drawn = VISION_TASKS[name](rng, size)
        if layout_split(drawn.layout) != split or drawn.layout in seen:
            misses += 1
            if misses > MAX_MISSES:
                raise UserError(
                    f"vision task {name!r}: only {len(out)} distinct {split} layouts found in "
                    f"{misses + len(out)} draws at size {size}; ask for fewer than {n}"
                )
            continue
        misses = 0
        seen.add(drawn.layout)
        content = [
            {"type": "image_url", "image_url": {"url": data_url(drawn.image)}},
            {"type": "text", "text": drawn.question},
        ]
        out.append(
            Task(
                id=f"vision-{name}-{split}-{seed}-{len(out)}",
                messages=[{"role": "user", "content": content}],  # type: ignore[list-item]
                verifier={"type": drawn.verifier, "answer": drawn.answer},
                track=f"vision:{name}",
                source=f"vision:{name}",
            )
        )
    return out


def sft_rows(tasks: list[Task]) -> list[dict]:
    """Training conversations from tasks: the prompt and the verifier's answer as the assistant turn."""
    return [{"messages": [*t.chat(), {"role": "assistant", "content": t.verifier["answer"]}]} for t in tasks]
