"""Time-to-train, money and energy of a whole training run from one step estimate.

    steps        = tokens / tokens per step
    wall time    = steps · step time                        (= tokens / tokens per second)
    GPU-hours    = GPUs · wall time / 3600 s
    cost         = GPU-hours · price per GPU-hour
                   hourly:   the spec's on-demand price (accelerator `price.hourly`, else the
                             node's `price.hourly` / accelerators per node)
                   purchase: the spec's purchase price / (amortisation years · 8766 h), plus
                             electricity at `electricity_usd_per_kwh` when given
    energy       = GPUs · P · wall time · PUE

Power model. P is the power drawn per GPU while training. The basis is the node's published
power (`Node.power`, a whole server at full load: GPUs, CPUs, NICs, fans) divided by its
accelerators when the node spec gives it, else the accelerator's TDP (board power only).
`power_model="tdp"` (default) charges the basis for the whole run: this is the convention of
the Llama 2 paper (Touvron et al. 2023, §2.2.1 "Carbon Footprint of Pretraining": "power
consumption ... peak power capacity per GPU device for the GPUs used") and the Llama 3 model
card, an upper bound since a board's power limit caps its draw. `power_model="utilisation"`
scales the basis linearly between an idle floor and full power with the achieved model FLOP
utilisation, P = basis · (idle + (1 − idle) · MFU); the linear shape and the idle fraction
(default 0.3) are assumptions, not measurements, offered for what-if comparisons.
PUE (datacentre overhead, default 1.0 = IT power only) multiplies the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from perfmodel.errors import PerfmodelError
from perfmodel.estimate import Estimate
from perfmodel.hardware.catalog import System

HOURS_PER_YEAR = 8766.0  # 365.25 days
DEFAULT_AMORTISATION_YEARS = 4.0  # an assumption: a typical straight-line depreciation period for servers
DEFAULT_IDLE_FRACTION = 0.3  # an assumption for the "utilisation" power model, see the module docstring

PowerModel = Literal["tdp", "utilisation"]
PriceBasis = Literal["hourly", "purchase"]


class NoPriceError(PerfmodelError, ValueError):
    """The hardware spec carries no price of the kind asked for."""


def _price_per_gpu(system: System, kind: str, unit: str, purpose: str) -> float:
    """The accelerator's price of `kind` ('hourly' or 'purchase'), or the node's shared over its
    accelerators when only the node has one."""
    acc, node = system.accelerator, system.node
    for price, share in ((acc.price, 1), (node.price, node.accelerators_per_node)):
        entry = getattr(price, kind) if price else None
        if entry:
            return entry.si(unit) / share
    raise NoPriceError(f"{acc.id} (node {node.id}) has no {kind} price: add `price: {{{kind}: ...}}` to "
                       f"hardware_specs/accelerators/{acc.id}.yaml (with its source) to estimate {purpose}")


def hourly_price_per_gpu(system: System) -> float:
    """USD per GPU-hour at the spec's on-demand price."""
    return _price_per_gpu(system, "hourly", "usd_per_hour", "cost")


def purchase_price_per_gpu(system: System) -> float:
    """USD per GPU to buy (the node's price shared over its accelerators when only it is given)."""
    return _price_per_gpu(system, "purchase", "usd", "an amortised cost")


def power_basis_w(system: System) -> tuple[float, str]:
    """(watts per GPU at full load, where the number comes from)."""
    node = system.node
    if node.power is not None:
        return node.power.si("watts") / node.accelerators_per_node, f"{node.id} power / {node.accelerators_per_node}"
    return system.accelerator.tdp_w, f"{system.accelerator.id} TDP"


def gpu_power_w(system: System, mfu: float = 1.0, power_model: PowerModel = "tdp",
                idle_fraction: float = DEFAULT_IDLE_FRACTION, pue: float = 1.0) -> float:
    """Average watts per GPU while training (see the module docstring)."""
    basis, _ = power_basis_w(system)
    if power_model == "tdp":
        factor = 1.0
    elif power_model == "utilisation":
        factor = idle_fraction + (1.0 - idle_fraction) * min(1.0, max(0.0, mfu))
    else:
        raise ValueError(f"power_model {power_model!r}: expected 'tdp' or 'utilisation'")
    return basis * factor * pue


@dataclass(frozen=True)
class TrainingRun:
    tokens: float
    steps: float
    step_time_s: float
    n_gpus: int
    wall_s: float
    gpu_hours: float
    power_per_gpu_w: float
    energy_j: float
    cost_usd: float | None  # None when the spec has no price (see `message`)
    price_per_gpu_hour_usd: float | None
    mfu: float
    message: str = ""

    @property
    def wall_days(self) -> float:
        return self.wall_s / 86400.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s

    @property
    def energy_mwh(self) -> float:
        return self.energy_j / 3.6e9

    @property
    def tokens_per_usd(self) -> float | None:
        return self.tokens / self.cost_usd if self.cost_usd else None

    @property
    def tokens_per_joule(self) -> float:
        return self.tokens / self.energy_j


def time_to_train(est: Estimate, system: System, tokens: float | None = None, steps: float | None = None, *,
                  price: PriceBasis = "hourly", amortisation_years: float = DEFAULT_AMORTISATION_YEARS,
                  electricity_usd_per_kwh: float | None = None, power_model: PowerModel = "tdp",
                  idle_fraction: float = DEFAULT_IDLE_FRACTION, pue: float = 1.0,
                  require_price: bool = False) -> TrainingRun:
    """Wall time, GPU-hours, cost and energy of training for `tokens` (or `steps`) with the
    layout of `est`. Without a price the cost is None and `message` says why, unless
    `require_price`, which raises NoPriceError."""
    if (tokens is None) == (steps is None):
        raise ValueError("give exactly one of tokens or steps")
    n_steps = steps if steps is not None else tokens / est.tokens_per_step  # type: ignore[operator]
    n_tokens = n_steps * est.tokens_per_step
    wall = n_steps * est.step_time_s
    gpu_hours = est.n_gpus * wall / 3600.0
    power = gpu_power_w(system, est.mfu, power_model, idle_fraction, pue)
    energy = est.n_gpus * power * wall
    cost: float | None
    rate: float | None
    message = ""
    try:
        if price == "hourly":
            rate = hourly_price_per_gpu(system)
        elif price == "purchase":
            rate = purchase_price_per_gpu(system) / (amortisation_years * HOURS_PER_YEAR)
            if electricity_usd_per_kwh is not None:
                rate += power / 1000.0 * electricity_usd_per_kwh
        else:
            raise ValueError(f"price {price!r}: expected 'hourly' or 'purchase'")
        cost = gpu_hours * rate
    except NoPriceError as e:
        if require_price:
            raise
        cost, rate, message = None, None, str(e)
    return TrainingRun(n_tokens, n_steps, est.step_time_s, est.n_gpus, wall, gpu_hours, power, energy, cost, rate,
                       est.mfu, message)


__all__ = [
    "NoPriceError",
    "TrainingRun",
    "gpu_power_w",
    "hourly_price_per_gpu",
    "power_basis_w",
    "purchase_price_per_gpu",
    "time_to_train",
]
