import unittest

from numkit.stats import median


class T(unittest.TestCase):
    def test_median(self):
        self.assertEqual(median([5, 3, 4]), 4)


if __name__ == '__main__':
    unittest.main()
