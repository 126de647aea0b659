def reverse_words(text):
    return text[::-1]


def count_vowels(text):
    return sum(c in "aeiou" for c in text)


def is_palindrome(text):
    return text == text[::-1]


def capitalize_words(text):
    return text.capitalize()
