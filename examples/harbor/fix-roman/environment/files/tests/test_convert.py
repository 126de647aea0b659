import unittest

from roman.convert import to_roman


class T(unittest.TestCase):
    def test_to_roman(self):
        self.assertEqual(to_roman(9), 'IX')


if __name__ == '__main__':
    unittest.main()
