import unittest

from wordfreq.count import count_words


class T(unittest.TestCase):
    def test_count_words(self):
        self.assertEqual(count_words('A a'), {'a': 2})


if __name__ == '__main__':
    unittest.main()
