import unittest

from stats.mean import mean


class T(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([2, 4]), 3.0)


if __name__ == '__main__':
    unittest.main()
