import unittest

from textutils.core import reverse_words


class T(unittest.TestCase):
    def test_reverse_words(self):
        self.assertEqual(reverse_words('ab cd'), 'cd ab')


if __name__ == '__main__':
    unittest.main()
