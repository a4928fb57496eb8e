"""When each request of an open-loop cell is sent: a pure function of the rate, the arrival process
and a seed, so a run can be replayed request for request.

*poisson*
    Exponential inter-arrival times of mean ``1 / rate`` (coefficient of variation 1).
*gamma*
    Gamma inter-arrival times of shape ``burstiness`` and scale ``1 / (rate * burstiness)``, as
    ``vllm bench serve --burstiness`` draws them: the mean stays ``1 / rate`` and the coefficient of
    variation is ``1 / sqrt(burstiness)`` (below 1: burstier than Poisson; above 1: more even;
    1 is Poisson).
*constant*
    Every ``1 / rate`` seconds.

The first request is sent at offset 0; request *i* at the sum of the first *i* inter-arrival times.
"""

from __future__ import annotations

import random

from lair.errors import ConfigError

__all__ = ["ARRIVALS", "schedule"]

ARRIVALS = ("poisson", "gamma", "constant")


def schedule(
    rate: float, n: int, arrival: str = "poisson", burstiness: float = 1.0, seed: int = 0
) -> list[float]:
    """The send offsets (seconds after the cell's start) of ``n`` requests at ``rate`` per second."""
    if not rate > 0 or not burstiness > 0:
        raise ConfigError(f"arrival rate {rate!r} and burstiness {burstiness!r} must be positive")
    if arrival not in ARRIVALS:
        raise ConfigError(f"arrival {arrival!r}: one of {', '.join(ARRIVALS)}")
    rng = random.Random(seed)
    offsets, t = [], 0.0
    for _ in range(n):
        offsets.append(t)
        if arrival == "constant":
            t += 1.0 / rate
        elif arrival == "poisson":
            t += rng.expovariate(rate)
        else:
            t += rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
    return offsets
