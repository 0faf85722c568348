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

Power model. P is the wall power drawn per GPU while training, on one basis for every system:
the per-GPU share of the node's (or rack's) published wall power at full load (`Node.power` /
`Node.power_accelerators`, default the node's accelerators: GPUs, CPUs, NICs, switches, fans).
Where no power is published for the node, P = TDP x an overhead factor taken from the published
nodes by the derating rule of perfmodel.hardware.derating (median of (node power / GPUs) / TDP
over the nodes of the nearest generation, vendor, kind; e.g. DGX H100: 10.2 kW / 8 / 700 W =
1.82). `power_basis_w` says which basis a row uses. `power_model="tdp"` (default) charges P for
the whole run: the convention of the Llama 2 paper (Touvron et al. 2023, 2.2.1 "Carbon
Footprint of Pretraining": "peak power capacity per GPU device") and the Llama 3 model card, an
upper bound. `power_model="utilisation"` scales P linearly between an idle floor and full power
with the achieved MFU, P = basis x (idle + (1 - idle) x MFU); the linear shape and the idle
fraction (default 0.3) are assumptions, offered for what-if comparisons.
PUE (datacentre overhead, default 1.0 = IT power only) multiplies the energy; the energy cost is
energy x PUE x the electricity price when one is given.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Literal

from perfmodel.errors import PerfmodelError, SpecError
from perfmodel.estimate import Estimate
from perfmodel.hardware.catalog import load_catalog
from perfmodel.hardware.derating import Derived, peer_median
from perfmodel.hardware.specs import Accelerator
from perfmodel.hardware.system import System

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


def _published_overhead(acc: Accelerator) -> float | None:
    """(node wall power per GPU) / TDP over the published nodes holding `acc`, or None."""
    if acc.tdp is None:
        return None
    ratios = [n.power.si("watts", "power") / (n.power_accelerators or n.accelerators_per_node) / acc.tdp_w
              for n in load_catalog().nodes.values() if n.accelerator == acc.id and n.power is not None]
    return statistics.median(ratios) if ratios else None


def node_overhead_factor(acc: Accelerator) -> Derived:
    """Wall power per GPU / TDP for a part whose node publishes no power (derating rule)."""
    own = _published_overhead(acc)
    if own is not None:
        return Derived(own, "measured: its published node")
    peers = [a for a in load_catalog().accelerators.values() if a.id != acc.id]
    found = peer_median(acc, peers, _published_overhead, "node wall power per GPU / TDP")
    return found or Derived(1.0, "fallback: 1.0, no published node of this kind (board power only)")


def power_basis_w(system: System) -> tuple[float, str]:
    """(wall watts per GPU at full load, the basis it comes from)."""
    node = system.node
    if node.power is not None:
        n = node.power_accelerators or node.accelerators_per_node
        return (node.power.si("watts", "power") / n,
                f"{node.id} wall power {node.power.value} / {n} GPUs (source: {node.power.source})")
    acc = system.accelerator
    factor = node_overhead_factor(acc)
    return acc.tdp_w * factor.value, f"{acc.id} TDP {acc.tdp.value} x {factor.value:.3g} ({factor.provenance})"  # type: ignore[union-attr]


def gpu_power_w(system: System, mfu: float = 1.0, power_model: PowerModel = "tdp",
                idle_fraction: float = DEFAULT_IDLE_FRACTION, pue: float = 1.0) -> float:
    """Average watts per GPU while training, times the datacentre PUE (see the module docstring)."""
    _check_site(pue, None)
    return _drawn_w(power_basis_w(system)[0], mfu, power_model, idle_fraction, pue)


def _drawn_w(basis_w: float, mfu: float, power_model: PowerModel, idle_fraction: float, pue: float) -> float:
    """Average watts per GPU from its full-load wall watts `basis_w` (power_basis_w), times the PUE."""
    if power_model == "tdp":
        factor = 1.0
    elif power_model == "utilisation":
        factor = idle_fraction + (1.0 - idle_fraction) * min(1.0, max(0.0, mfu))
    else:
        raise ValueError(f"power_model {power_model!r}: expected 'tdp' or 'utilisation'")
    return basis_w * factor * pue


def _check_site(pue: float, electricity_usd_per_kwh: float | None) -> None:
    if not (math.isfinite(pue) and pue >= 1.0):
        raise ValueError(f"pue {pue}: expected a finite number >= 1 (1.0 = IT power only; typical sites 1.1-1.6)")
    if electricity_usd_per_kwh is not None and not (math.isfinite(electricity_usd_per_kwh) and electricity_usd_per_kwh >= 0):
        raise ValueError(f"electricity_usd_per_kwh {electricity_usd_per_kwh}: expected a finite price >= 0")


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
    power_basis: str = ""
    pue: float = 1.0
    energy_cost_usd: float | None = None  # energy (with PUE) x electricity price, when one is given

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
    _check_site(pue, electricity_usd_per_kwh)
    notes: list[str] = []
    try:
        full_load_w, basis = power_basis_w(system)
        power = _drawn_w(full_load_w, est.mfu, power_model, idle_fraction, pue)
    except SpecError as e:
        if e.field != "tdp":
            raise
        # a part whose power is not published (a pre-release chip) still gets its time and cost;
        # its energy columns stay blank (NaN) and the message says why
        power, basis = math.nan, ""
        notes.append(f"no energy estimate: {e}")
    energy = est.n_gpus * power * wall
    energy_cost = energy / 3.6e6 * electricity_usd_per_kwh if electricity_usd_per_kwh is not None else None
    cost: float | None
    rate: float | None
    try:
        if price == "hourly":
            rate = hourly_price_per_gpu(system)
        elif price == "purchase":
            rate = purchase_price_per_gpu(system) / (amortisation_years * HOURS_PER_YEAR)
            if electricity_usd_per_kwh is not None and math.isfinite(power):
                rate += power / 1000.0 * electricity_usd_per_kwh
        else:
            raise ValueError(f"price {price!r}: expected 'hourly' or 'purchase'")
        cost = gpu_hours * rate
    except NoPriceError as e:
        if require_price:
            raise
        cost, rate = None, None
        notes.insert(0, str(e))
    return TrainingRun(n_tokens, n_steps, est.step_time_s, est.n_gpus, wall, gpu_hours, power, energy, cost, rate,
                       est.mfu, "; ".join(notes), basis, pue, energy_cost)


__all__ = [
    "NoPriceError",
    "TrainingRun",
    "gpu_power_w",
    "hourly_price_per_gpu",
    "node_overhead_factor",
    "power_basis_w",
    "purchase_price_per_gpu",
    "time_to_train",
]
