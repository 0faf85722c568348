"""Collective(kind, bytes, group) -> seconds on a resolved `System`, over its network levels.

Bus-bandwidth convention of nccl-tests (S = the full buffer size, n ranks):
    all_reduce      t = 2(n-1)/n · S / busbw          (ring; Patarasuk & Yuan 2009)
    all_gather,
    reduce_scatter  t = (n-1)/n · S / busbw
    all_to_all      t = (n-1)/n · S / busbw
    send_recv       t = S / bw
Inside the scale-up domain (level 0) busbw at a message size comes from the node's measured curve
(log-log interpolation) when one exists, otherwise from line rate x the measured large-message
efficiency plus one latency term (alpha-beta).

A group that spans levels runs hierarchically. Rank order follows Megatron-LM (tp fastest, then
cp, then dp with ep inside it, then pp); a group's `stride` is the product of the degrees faster
than it, so g_k = min(n, span_k / stride) of its n ranks share one unit of level k. The ring
crosses each level-k boundary once per channel, and the g_{k-1} ranks of one level-(k-1) unit
drive g_{k-1} GPUs' worth of level-k bandwidth when every group communicates at once:
    t_k = F · S / (g_{k-1} · B_k · eff_k / oversub_k)     F = 2(n-1)/n (all-reduce; 1 with SHARP)
    t   = max(t_0, t_1, ..., t_top) + alpha_0 + sum_k steps_k · alpha_k
with t_0 the ring inside one domain over its g_0 ranks and steps_k = 2·ceil(log2 u_k) for an
all-reduce (a tree over the u_k = g_k / g_{k-1} units) and u_k - 1 for the ring collectives.
With one rank per node (tp fills the node) a DP ring gets one NIC; with eight it gets eight.

PCIe nodes whose cards are NVLink-bridged (IntraNode.pair_bridge): in pairs (GPU 2k with 2k + 1,
2-way bridges) or in cliques of four (GPUs 4k..4k + 3 each bridged to each other, H200 NVL's 4-way
bridges; `nvidia-smi topo -m` shows NV6 between the four and SYS to the rest). A group whose ranks
all sit in one clique (an aligned group, {b + i·stride} with b a multiple of degree·stride, when
degree·stride divides the clique size and the run places a whole number of cliques on each node)
runs over the bridges alone. Each GPU's bridge bandwidth B is split evenly over its g - 1 peers
(NV6 + NV6 + NV6 of 18 links), and a ring of d of the g GPUs uses the links to its d - 1 partners
(NCCL's rings over a clique take every direct link: K4 holds three link-disjoint directed rings):
    t = alpha_bridge + F(d) · S / (B_busbw · (d - 1) / (g - 1))
so two cards of a 2-way pair get the whole bridge, two cards of a 4-way clique one third of it.
A pipeline's neighbour sends use the bridges only when the whole pipeline sits in one clique
(pp 2 on a pair; pp up to 4 with stride 1 in a quad: `aligned`); otherwise the slowest hop, which
crosses PCIe, sets its steady state, and the first / last stage's embedding all-reduce crosses
too. Any other group's ring crosses PCIe between cliques and runs at the node fabric's rate:
NCCL's ring is as fast as its slowest hop (nccl-tests #178: 208 GB/s busbw for two bridged A100
PCIe, about 20 GB/s with a third GPU).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from perfmodel.hardware.network import MeasuredCurve, NetworkLevel, bus_factor
from perfmodel.hardware.system import System

__all__ = ["Placement", "bridged_clique_time_s", "bus_factor", "collective_time_s", "distinct_share",
           "ep_exchange_time_s", "in_one_bridge", "intra_time_s", "nic_Bps_per_gpu", "placement"]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a group lands: `per_unit[k]` of its `degree` ranks share one unit of level k; the
    last entry is the level that holds the whole group (per_unit[-1] == degree)."""

    degree: int
    per_unit: tuple[int, ...]

    @property
    def top(self) -> int:
        return len(self.per_unit) - 1

    @property
    def intra_only(self) -> bool:
        return self.top == 0

    @property
    def per_domain(self) -> int:
        return self.per_unit[0]

    @property
    def domains(self) -> int:
        return math.ceil(self.degree / self.per_unit[0])


def placement(system: System, degree: int, stride: int) -> Placement:
    """Where a group of `degree` ranks, `stride` apart in rank order, lands on the levels."""
    per: list[int] = []
    for level in system.levels:
        span = level.span_gpus
        if span is None or degree * stride <= span:
            per.append(degree)
            return Placement(degree, tuple(per))
        per.append(min(degree, max(1, span // stride)) if stride < span else 1)
    raise ValueError(f"{system.name}: a group of {degree} ranks (stride {stride}) spans "
                     f"{math.ceil(degree / per[0])} scale-up domains of {system.levels[0].span_gpus} "
                     "but the system has no scale-out network (no NICs)")


def _curve_for(system: System, kind: str) -> MeasuredCurve | None:
    curves = system.levels[0].curves
    for c in curves:
        if c.collective == kind:
            return c
    if kind in ("all_gather", "reduce_scatter"):
        # ring all-gather / reduce-scatter run the same ring steps as half an all-reduce: the
        # all-reduce curve's busbw is their busbw (nccl-tests reports them within ~10 %)
        for c in curves:
            if c.collective == "all_reduce" and c.algorithm == "ring":
                return c
    return None


def _interp_busbw(points: tuple[tuple[float, float], ...], size: float) -> float:
    if size <= points[0][0]:
        # below the smallest measured size the collective is latency bound: t is flat, busbw ~ S
        return points[0][1] * size / points[0][0]
    if size >= points[-1][0]:
        return points[-1][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x0 <= size <= x1:
            f = (math.log(size) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return math.exp(math.log(y0) + f * (math.log(y1) - math.log(y0)))
    return points[-1][1]


def intra_time_s(system: System, kind: str, size: float, n: int) -> float:
    """One collective inside a scale-up domain (level 0)."""
    if n <= 1 or size <= 0:
        return 0.0
    level = system.levels[0]
    factor = bus_factor(kind, n)
    curve = _curve_for(system, kind) if kind != "send_recv" else None
    if curve is not None:
        return factor * size / _interp_busbw(curve.points, size)
    if kind == "all_reduce" and level.in_network_reduction:
        factor = 1.0  # NVLS / SHARP: each rank sends and receives its buffer once
    # alpha-beta model: one base latency per collective (NCCL's tuning model charges a base
    # latency per algorithm plus small per-hop terms that NVSwitch keeps to one hop)
    return level.latency_s + factor * size / level.achieved_Bps


def bridged_clique_time_s(system: System, kind: str, size: float, degree: int = 2) -> float:
    """One collective among `degree` GPUs of one bridged clique (module docstring): alpha-beta over
    the bridges to their degree - 1 partners; for a pair, F(2) = 1 for an all-reduce, 1/2 for an
    all-gather or reduce-scatter."""
    level = system.levels[0]
    links = (degree - 1) / (level.pair_group - 1)
    return level.pair_latency_s + bus_factor(kind, degree) * size / (level.pair_Bps * links)


def in_one_bridge(system: System, degree: int, stride: int) -> bool:
    """An aligned group of `degree` ranks `stride` apart lies inside one bridged clique."""
    level = system.levels[0]
    span, g = degree * stride, level.pair_group
    return level.pair_Bps > 0.0 and span <= g and g % span == 0 and system.gpus_per_node % g == 0


def nic_Bps_per_gpu(system: System) -> float:
    """Achieved one-way bandwidth per GPU into the first scale-out level (0 without one)."""
    return system.levels[1].achieved_Bps if len(system.levels) > 1 else 0.0


def collective_time_s(system: System, kind: str, size: float, degree: int, stride: int = 1,
                      aligned: bool = True) -> float:
    """Seconds for one collective of `size` bytes (nccl-tests size) over `degree` ranks whose
    neighbours are `stride` apart in Megatron rank order. `aligned`: the ranks are a parallel
    group, {b + i·stride} with b a multiple of degree·stride (a tp, cp, dp or ep group); False for
    a pair that is not one (pipeline neighbours s and s + 1, the first and last stage), which then
    never counts as one bridged pair."""
    if degree <= 1 or size <= 0:
        return 0.0
    span0 = system.levels[0].span_gpus
    if aligned and in_one_bridge(system, degree, stride):
        return bridged_clique_time_s(system, kind, size, degree)
    if span0 is None or degree * stride <= span0:
        return intra_time_s(system, kind, size, degree)
    place = placement(system, degree, stride)
    levels = system.levels[: place.top + 1]
    g, n = place.per_unit, degree
    if kind in ("send_recv", "all_to_all"):
        latency = levels[0].latency_s + sum(lv.latency_s for lv in levels[1:])
        if kind == "send_recv":
            return latency + size / min(lv.achieved_Bps for lv in levels[1:])
        # each rank sends (n - g_{k-1})/n of its buffer out of its level-(k-1) unit on its own link
        t_out = max(size * (n - g[k - 1]) / n / levels[k].achieved_Bps for k in range(1, len(levels)))
        t_in = intra_time_s(system, kind, size * g[0] / n, g[0]) if g[0] > 1 else 0.0
        return latency + max(t_out, t_in)
    factor = bus_factor(kind, n)
    t = intra_time_s(system, kind, size, g[0]) * (n - 1) / n if g[0] > 1 else 0.0
    latency = levels[0].latency_s
    for k in range(1, len(levels)):
        lv = levels[k]
        f = 1.0 if kind == "all_reduce" and lv.in_network_reduction else factor
        t = max(t, f * size / (g[k - 1] * lv.achieved_Bps))
        units = math.ceil(g[k] / g[k - 1])
        steps = 2 * math.ceil(math.log2(units)) if kind == "all_reduce" else units - 1
        latency += steps * lv.latency_s
    if kind != "all_reduce":
        latency += ring_steps_s(levels, n, g[0], place.domains)
    return t + latency


def ring_steps_s(levels: tuple[NetworkLevel, ...], n: int, per_domain: int, domains: int) -> float:
    """The step latencies of a ring all-gather / reduce-scatter of n ranks over `domains` scale-up
    domains beyond what the scale-up curve already holds (one ring of `per_domain`): NCCL's tuning
    model (src/graph/tuning.cc) charges (n - N)·intra + (N - 1)·inter for N nodes; the n - 1 steps
    run one after another, each waiting for its neighbour's chunk. A ring of 1024 H100s (128 nodes)
    pays 896 NVLink and 127 network steps, 4.3 ms per collective, where one of 8 nodes pays 0.26 ms:
    what per-layer FSDP gathers at a thousand GPUs expose and a bandwidth term alone never shows."""
    intra = max(0, n - domains - max(per_domain - 1, 0))
    return intra * levels[0].step_latency_s + (domains - 1) * levels[1].step_latency_s


# --- MoE token exchange (dispatch / combine) -----------------------------------------------------
def _miss(pool: float, held: float, top_k: int) -> float:
    """C(pool - held, k) / C(pool, k): k distinct picks from `pool` experts avoid `held` of them."""
    miss = 1.0
    for i in range(top_k):
        miss *= max(0.0, (pool - held - i) / (pool - i))
    return miss


def distinct_share(experts: int, top_k: int, units: int, groups: int = 1, group_topk: int | None = None) -> float:
    """Expected share of `units` equal, contiguous holders of `experts` experts that a token's
    top_k distinct experts touch, under uniform routing (what force-balanced benchmarks run):
        1 - C(E - E/u, k) / C(E, k).
    With group-limited routing (DeepSeek-V3 §2.1.2 node-limited routing, Megatron-Core
    moe_router_num_groups / moe_router_group_topk): the token first picks M of G expert groups,
    then its k experts among the M·E/G experts of those groups. A unit holding q = G/u whole
    groups is touched unless none of its groups is picked (hypergeometric j of its q) or the k
    picks all fall outside the j picked:  1 - sum_j P(j) · C((M - j)·E/G, k) / C(M·E/G, k).
    A unit inside one group is touched only if its group is picked: M/G · (1 - C(M·E/G - E/u, k) / C(M·E/G, k))."""
    if units <= 1:
        return 1.0
    if groups <= 1 or group_topk is None or group_topk >= groups:
        return 1.0 - _miss(experts, experts / units, top_k)
    per_group = experts / groups
    pool = group_topk * per_group
    if groups % units == 0:
        q = groups // units
        untouched = 0.0
        for j in range(min(q, group_topk) + 1):
            p_j = math.comb(q, j) * math.comb(groups - q, group_topk - j) / math.comb(groups, group_topk)
            untouched += p_j * _miss(pool, j * per_group, top_k)
        return 1.0 - untouched
    if units % groups == 0:
        return group_topk / groups * (1.0 - _miss(pool, experts / units, top_k))
    return 1.0 - _miss(experts, experts / units, top_k)  # groups straddle units: no closed form, take uniform


def ep_exchange_time_s(system: System, dispatcher: str, size: float, degree: int, stride: int,
                       top_k: int, experts: int, groups: int = 1, group_topk: int | None = None,
                       etp: int = 1) -> float:
    """Seconds of one MoE dispatch or combine over an expert-parallel group of `degree` ranks,
    `stride` apart, where `size` is the buffer each rank exchanges when every one of a token's
    top_k copies travels on its own (size = tokens x top_k x bytes per row).

    `alltoall` (Megatron-Core MoEAlltoAllTokenDispatcher): the permuted copies go out through one
    NCCL all-to-all, a copy per routed expert, so this is the all-to-all of `size` bytes.

    `flex` (Megatron-Core MoEFlexTokenDispatcher over DeepEP or HybridEP; DeepSeek-V3 report
    §3.2.2, DeepEP's "normal kernels with NVLink and RDMA forwarding"): a token crosses the
    scale-out network once per destination scale-up domain, to the GPU with the same local index
    there, which forwards it over NVLink once per destination rank; the combine runs the same
    paths backwards, reducing per rank and per domain before sending. With g0 ranks of the group
    in a domain, D = degree / g0 domains and uniform (or group-limited) routing (`distinct_share`):
        per token  scale-out rows  (D - 1) · share(E, k, D)
                   NVLink rows      degree · share(E, k, degree)     (against k copies for alltoall)
    The two kernels run concurrently (RDMA and NVLink channels pipelined), so the exchange takes
    the longer of the scale-out leg and the NVLink leg, plus the latencies of the levels crossed.
    With expert tensor parallelism the flex group is the etp x ep ranks (etp fastest) and a token
    goes to all etp ranks of each expert rank it picks (Megatron-Core expands the routing map):
    `degree` counts all of them, the ranks hit are etp x ep x share(E, k, ep)."""
    if degree <= 1 or size <= 0:
        return 0.0
    if dispatcher == "alltoall":
        return collective_time_s(system, "all_to_all", size, degree, stride)
    if dispatcher != "flex":
        raise ValueError(f"moe dispatcher {dispatcher!r}: expected alltoall or flex")
    per_copy = size / top_k  # bytes of one token row
    span0 = system.levels[0].span_gpus
    ranks_hit = degree * distinct_share(experts, top_k, degree // etp, groups, group_topk)
    if span0 is None or degree * stride <= span0:
        return intra_time_s(system, "all_to_all", per_copy * ranks_hit, degree)
    place = placement(system, degree, stride)
    levels = system.levels[: place.top + 1]
    g = place.per_unit
    domains = place.domains
    remote_rows = (domains - 1) * distinct_share(experts, top_k, domains, groups, group_topk)
    remote = per_copy * remote_rows  # bytes each rank sends over its NIC
    # a row bound for another domain leaves its level-(k-1) unit; the share of remote domains
    # beyond that unit is (degree - g_{k-1}) / (degree - g_0) (all of them at the first scale-out level)
    # the RDMA leg runs at the kernels' own rate, a share of the NIC's line rate (less any taper) that
    # the caller's ep_dispatch_efficiency sets, not at what ring collectives reach: DeepEP's README
    # measures its internode normal kernels at 43-58 GB/s of RDMA per GPU on 50 GB/s CX7 NICs (H800,
    # EP 16-64), where a ring all-reduce's busbw over the same NICs is 48 GB/s alone (GTC24 S62129)
    t_out = max(remote * (degree - g[k - 1]) / (degree - g[0]) * levels[k].oversubscription / levels[k].bandwidth_Bps
                for k in range(1, len(levels)))
    t_in = intra_time_s(system, "all_to_all", per_copy * ranks_hit, g[0]) if g[0] > 1 else 0.0
    latency = levels[0].latency_s + sum(lv.latency_s for lv in levels[1:])
    return latency + max(t_out, t_in)
