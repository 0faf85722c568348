"""A synchronous step runs at the pace of its slowest accelerator.

Chips of one SKU in one cluster do not run at one speed: manufacturing spread and each part's
power management (the clock it holds under its power cap and temperature) leave them a few per
cent apart, for as long as the job holds them. Sinha et al., "Not All GPUs Are Created Equal:
Characterizing Variability in Large-Scale, Accelerator-Rich Systems" (SC22, arXiv 2208.11035),
ran the same kernels on over 90 % of the GPUs of five clusters (Summit, Vortex, Frontera,
Longhorn: V100; Corona: MI60) and found an 8 % average performance variation between the GPUs of
one cluster (22 % at most), outliers aside (up to 1.5x slower than the median).

A data-parallel step waits for every replica's gradients, a tensor-parallel layer for every
rank's partial sums and a pipeline for its slowest stage, so every rank's compute advances at the
pace of the slowest chip among the N the job holds. With chip speeds spread normally by a
relative standard deviation sigma, that chip is slower than the typical one by sigma times the
expected largest of N standard normal draws (Blom's approximation: exact at N = 1, 4.5 % above the
exact order statistic at N = 2, within 1 % of it from N = 8 up):

    slowdown(N) = 1 + sigma * PhiInv((N - 0.375) / (N + 0.25))          (0 at N = 1)

sigma: an 8 % spread between the fastest and slowest of thousands of chips is 5.4 sigma where it is
read as the box plot's whisker range (outliers excluded, +-2.7 sigma) and 7 sigma as the full
range of ~4,000 draws: sigma = 1.1 % to 1.5 %, SPEED_SPREAD = 1.3 % between them. What it
predicts: a weak-scaled job (fixed work per GPU) slows by 1.5 % from 8 to 128 GPUs and by 2.5 %
from 8 to 2,048 (compute-bound time; collectives do not scale with it), as NVIDIA's DGX Cloud
benchmark tables show their runs slowing by 0.5-3 % over such ranges (validation/report/extra).
The calibration parameter `gpu_speed_spread` scales sigma (calibration/parameters.py).
"""

from __future__ import annotations

from functools import lru_cache
from statistics import NormalDist

# relative standard deviation of one SKU's chip speed across a cluster (module docstring)
SPEED_SPREAD = 0.013
_STD = NormalDist()


@lru_cache(maxsize=1024)
def slowest_of(n: int) -> float:
    """Expected largest of `n` standard normal draws (Blom's approximation; 0 for n <= 1)."""
    if n <= 1:
        return 0.0
    return _STD.inv_cdf((n - 0.375) / (n + 0.25))


def slowest_unit_factor(spread: float, n: int) -> float:
    """How much longer the slowest of `n` chips takes over the typical one for the same kernels,
    their speeds spread by relative standard deviation `spread` (>= 1; 1 for one chip)."""
    return 1.0 + spread * slowest_of(n)


__all__ = ["SPEED_SPREAD", "slowest_of", "slowest_unit_factor"]
