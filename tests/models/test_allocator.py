"""The training memory lever on the C allocator: after `map_large_blocks`, a big block is mapped
from the OS (and returned on free) even after glibc's own threshold has risen past it."""

import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

# glibc's counters: `hblkhd` is the bytes held in mapped blocks
PROBE = """
import ctypes, sys
sys.path.insert(0, {src!r})
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
if sys.argv[1] == "fixed":
    from tempering.models.allocator import map_large_blocks
    assert map_large_blocks()
big = bytearray(8 << 20)
del big  # freeing a mapped 8 MiB block raises glibc's default threshold to 8 MiB
before = libc.mallinfo2().hblkhd
block = bytearray(1 << 20)
print(libc.mallinfo2().hblkhd - before)
"""


def mapped_growth(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(src=str(SRC)), mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_1_mib_block_is_mapped_only_with_the_fixed_threshold():
    assert mapped_growth("default") == 0  # served from the heap: it stays there once freed
    assert mapped_growth("fixed") >= 1 << 20
