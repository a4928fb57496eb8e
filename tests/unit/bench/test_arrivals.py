"""The open-loop schedule's statistics against hand-computed expectations, with a fixed seed.

For n independent inter-arrival times of mean 1/R and coefficient of variation CV, the sample mean has
standard error CV / (R sqrt(n)); the tolerance is 4 standard errors (a fixed seed makes the draw the
same every run, the bound says the generator is the right one). The sample standard deviation of n
draws has relative standard error sqrt((2 + K) / (4n)), K the excess kurtosis (6 / k for a gamma of
shape k, 6 for the exponential), and so, to first order, has the sample CV: 4 of those too.
"""

from __future__ import annotations

import itertools
import math
import statistics

import pytest

from lair.bench.arrivals import schedule
from lair.errors import ConfigError

N = 20_000


def _gaps(offsets: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(offsets)]


@pytest.mark.parametrize(
    ("arrival", "burstiness", "cv"),
    [("poisson", 1.0, 1.0), ("gamma", 4.0, 0.5), ("gamma", 0.25, 2.0)],
)
def test_mean_and_cv_of_the_inter_arrival_times(arrival: str, burstiness: float, cv: float) -> None:
    rate = 200.0
    gaps = _gaps(schedule(rate, N + 1, arrival, burstiness, seed=7))
    mean = statistics.fmean(gaps)
    assert abs(mean - 1 / rate) <= 4 * cv / (rate * math.sqrt(N))
    sample_cv = statistics.pstdev(gaps) / mean
    kurtosis = 6.0 / burstiness  # excess kurtosis of gamma(k): 6 / k
    se_cv = cv * math.sqrt((2 + kurtosis) / (4 * N))
    assert abs(sample_cv - cv) <= 4 * se_cv


def test_constant_and_the_first_request_at_zero() -> None:
    assert schedule(4.0, 5, "constant") == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert schedule(10.0, 3, "poisson", seed=1)[0] == 0.0


def test_the_same_seed_gives_the_same_schedule_and_another_differs() -> None:
    assert schedule(50.0, 100, "gamma", 2.0, seed=3) == schedule(50.0, 100, "gamma", 2.0, seed=3)
    assert schedule(50.0, 100, "gamma", 2.0, seed=3) != schedule(50.0, 100, "gamma", 2.0, seed=4)


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ConfigError):
        schedule(0.0, 3)
    with pytest.raises(ConfigError):
        schedule(1.0, 3, "weibull")
