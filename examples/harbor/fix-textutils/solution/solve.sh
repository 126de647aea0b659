#!/bin/bash
set -e
cd /app
cat > textutils/core.py <<'EOF'
def reverse_words(text):
    return " ".join(reversed(text.split()))


def count_vowels(text):
    return sum(c in "aeiou" for c in text.lower())


def is_palindrome(text):
    s = "".join(c for c in text.lower() if c.isalnum())
    return s == s[::-1]


def capitalize_words(text):
    return " ".join(w[:1].upper() + w[1:] for w in text.split())
EOF
