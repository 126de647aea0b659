echo hi
# TODO
