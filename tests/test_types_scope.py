"""`make test` type-checks every package of src/tempering: pyright's include leaves none out."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "tempering"


def pyright_settings() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pyright"]


def uncovered(include: list[str], exclude: list[str], packages: list[Path]) -> list[str]:
    """The package directories no include entry reaches, or an exclude entry takes out."""

    def under(path: Path, entries: list[str]) -> bool:
        return any(path == ROOT / e or (ROOT / e) in path.parents for e in entries)

    return [str(p.relative_to(ROOT)) for p in packages if not under(p, include) or under(p, exclude)]


def package_dirs() -> list[Path]:
    return sorted({PACKAGE} | {p.parent for p in PACKAGE.rglob("__init__.py") if "__pycache__" not in p.parts})


def test_pyright_covers_every_package():
    settings = pyright_settings()
    assert settings.get("typeCheckingMode") == "basic"
    missing = uncovered(settings["include"], settings.get("exclude", []), package_dirs())
    assert missing == [], f"pyright's include leaves out {missing}"


def test_the_check_catches_a_narrow_include():
    packages = package_dirs()
    assert len(packages) > 10  # the scan sees the whole tree
    narrow = ["src/tempering/objectives", "src/tempering/train", "src/tempering/rollout"]
    missing = uncovered(narrow, [], packages)
    assert "src/tempering/serve" in missing and "src/tempering/objectives" not in missing
    assert "src/tempering/sandbox" in uncovered(["src"], ["src/tempering/sandbox"], packages)
