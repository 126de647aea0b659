"""Hidden check, run by /tests/test.sh under `python3 -I`: the nonce arrives on stdin before the
code under test is imported; values are compared by their own type."""
import json
import sys


def plain(got, want):
    if isinstance(want, float):
        return type(got) in (int, float) and float(got) == want
    if type(got) is not type(want):
        return False
    return json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)


def main():
    nonce = sys.stdin.readline().strip()
    sys.path.append("/app")
    from roman.convert import to_roman

    for args, want in [((4,), 'IV'), ((1994,), 'MCMXCIV'), ((3,), 'III'), ((2024,), 'MMXXIV'), ((49,), 'XLIX')]:
        if not plain(to_roman(*args), want):
            print("failed", args)
            return
    print("passed", nonce)


main()
