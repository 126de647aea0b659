"""Render an HTML report to PNG in headless Chromium, and tell a real picture from a blank one.

`screenshot(html, png)` renders; `pixel_stats(png).looks_blank()` is the check: enough ink
(non-white pixels) and colour (saturated pixels, which on a report come only from its charts,
so missing or broken figures fail). Used by `temper demo` and `tools/screenshot_report.py`.
Needs the `chromium` binary (Debian: `apt-get install -y chromium`). Headless Chromium
captures the window only, so `height` should cover the page.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

MIN_INK_SHARE = 0.01  # text, lines and bars cover well over 1% of a report
MIN_COLOUR_SHARE = 0.002  # chart bars: saturated pixels; text and tables are grey
MIN_STD = 5.0  # pixel standard deviation (0-255) of the grey image
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


@dataclass(frozen=True)
class PixelStats:
    width: int
    height: int
    std: float
    ink_share: float
    colour_share: float

    def looks_blank(self) -> bool:
        return self.std < MIN_STD or self.ink_share < MIN_INK_SHARE or self.colour_share < MIN_COLOUR_SHARE


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def screenshot(html: Path, png: Path, *, width: int = 1280, height: int = 3000, timeout_s: float = 90.0) -> Path:
    """Render `html` to `png` with headless Chromium (fresh profile, no sandbox, no GPU)."""
    chromium = find_chromium()
    if chromium is None:
        raise FileNotFoundError(
            f"no Chromium binary on PATH (looked for {', '.join(CHROMIUM_NAMES)}); "
            "install it with `apt-get install -y chromium`"
        )
    png = png.resolve()
    png.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        cmd = [
            chromium,
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--hide-scrollbars",
            "--no-first-run",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            f"--screenshot={png}",
            html.resolve().as_uri(),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0 or not png.is_file():
        raise RuntimeError(f"chromium exited {proc.returncode} without writing {png}:\n{proc.stderr[-2000:]}")
    return png


def pixel_stats(png: Path) -> PixelStats:
    """Grey-level spread, share of non-white pixels and share of saturated (coloured) pixels."""
    rgb = np.asarray(Image.open(png).convert("RGB"), dtype=float)
    grey = rgb.mean(axis=2)
    saturation = rgb.max(axis=2) - rgb.min(axis=2)
    return PixelStats(
        width=rgb.shape[1],
        height=rgb.shape[0],
        std=float(grey.std()),
        ink_share=float((grey < 200).mean()),
        colour_share=float((saturation > 60).mean()),
    )
