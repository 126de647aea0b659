"""Render an HTML report to PNG in headless Chromium and check that the picture is not blank.

    python tools/screenshot_report.py runs/eval/report.html runs/eval/report.png [--width 1280 --height 3000]

Exits 0 when the screenshot has enough ink (non-white pixels) and colour (saturated pixels,
which on a report come only from its charts, so missing or broken figures fail), 1 when it
looks blank, 2 when Chromium is missing or fails. Needs the `chromium` binary (Debian:
`apt-get install -y chromium`). Headless Chromium captures the window only, so `--height`
should cover the page.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

MIN_INK_SHARE = 0.01      # text, lines and bars cover well over 1% of a report
MIN_COLOUR_SHARE = 0.002  # chart bars: saturated pixels; text and tables are grey
MIN_STD = 5.0             # pixel standard deviation (0-255) of the grey image
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
        raise FileNotFoundError(f"no Chromium binary on PATH (looked for {', '.join(CHROMIUM_NAMES)}); "
                                "install it with `apt-get install -y chromium`")
    png = png.resolve()
    png.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        cmd = [chromium, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars", "--no-first-run",
               f"--user-data-dir={profile}", f"--window-size={width},{height}", f"--screenshot={png}",
               html.resolve().as_uri()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0 or not png.is_file():
        raise RuntimeError(f"chromium exited {proc.returncode} without writing {png}:\n{proc.stderr[-2000:]}")
    return png


def pixel_stats(png: Path) -> PixelStats:
    """Grey-level spread, share of non-white pixels and share of saturated (coloured) pixels."""
    rgb = np.asarray(Image.open(png).convert("RGB"), dtype=float)
    grey = rgb.mean(axis=2)
    saturation = rgb.max(axis=2) - rgb.min(axis=2)
    return PixelStats(width=rgb.shape[1], height=rgb.shape[0], std=float(grey.std()),
                      ink_share=float((grey < 200).mean()), colour_share=float((saturation > 60).mean()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("html", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=3000)
    args = parser.parse_args(argv)
    if not args.html.is_file():
        print(f"no such report: {args.html}", file=sys.stderr)
        return 2
    try:
        png = screenshot(args.html, args.png, width=args.width, height=args.height)
    except (FileNotFoundError, RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"screenshot failed: {exc}", file=sys.stderr)
        return 2
    stats = pixel_stats(png)
    verdict = "BLANK" if stats.looks_blank() else "ok"
    print(f"{png}: {stats.width}x{stats.height}, std {stats.std:.1f}, ink {stats.ink_share:.1%}, "
          f"colour {stats.colour_share:.2%} -> {verdict}")
    return 1 if stats.looks_blank() else 0


if __name__ == "__main__":
    sys.exit(main())
