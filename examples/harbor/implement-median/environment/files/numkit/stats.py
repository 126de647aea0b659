def median(values):
    raise NotImplementedError
