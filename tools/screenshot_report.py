"""Render an HTML report to PNG in headless Chromium and check that the picture is not blank.

    python tools/screenshot_report.py runs/eval/report.html runs/eval/report.png [--width 1280 --height 3000]

Exits 0 when the screenshot has enough ink and colour (`tempering.evals.screenshot`), 1 when
it looks blank, 2 when Chromium is missing or fails.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from tempering.evals.screenshot import pixel_stats, screenshot

__all__ = ["main", "pixel_stats", "screenshot"]


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
    print(
        f"{png}: {stats.width}x{stats.height}, std {stats.std:.1f}, ink {stats.ink_share:.1%}, "
        f"colour {stats.colour_share:.2%} -> {verdict}"
    )
    return 1 if stats.looks_blank() else 0


if __name__ == "__main__":
    sys.exit(main())
