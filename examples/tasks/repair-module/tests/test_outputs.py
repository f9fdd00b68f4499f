import sys

sys.path.insert(0, "/app")

import stats  # noqa: E402


def test_mean():
    assert stats.mean([1, 2, 3, 4]) == 2.5


def test_median_odd():
    assert stats.median([3, 1, 2]) == 2


def test_median_even():
    assert stats.median([4, 1, 3, 2]) == 2.5
