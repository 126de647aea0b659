x = 1  # TODO rename
y = 2
# TODO: test
