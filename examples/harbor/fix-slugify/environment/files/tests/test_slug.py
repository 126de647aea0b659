import unittest

from textkit.slug import slugify


class T(unittest.TestCase):
    def test_slugify(self):
        self.assertEqual(slugify('Hello World'), 'hello-world')


if __name__ == '__main__':
    unittest.main()
