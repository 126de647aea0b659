"""Hidden check, run by /tests/test.sh under `python3 -I`: how many of the four functions pass
every case (each on its own; the nonce arrives on stdin before the code under test is imported)."""
import sys


def main():
    nonce = sys.stdin.readline().strip()
    sys.path.append("/app")
    import textutils.core as core

    passed = 0
    for name, cases in {'reverse_words': [(('a b c',), 'c b a'), (('one',), 'one')], 'count_vowels': [(('AEIou',), 5), (('xyz',), 0)], 'is_palindrome': [(('Never odd or even',), True), (('abc',), False)], 'capitalize_words': [(('hello big world',), 'Hello Big World')]}.items():
        try:
            ok = all(type(want) is type(got) and got == want
                     for args, want in cases for got in [getattr(core, name)(*args)])
        except Exception:
            ok = False
        passed += ok
    print("passed", nonce, passed)


main()
