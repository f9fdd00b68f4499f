def mean(values):
    return sum(values) // len(values)


def median(values):
    ordered = list(values)
    middle = len(ordered) // 2
    return ordered[middle]
