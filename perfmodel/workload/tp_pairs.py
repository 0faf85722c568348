"""Recognise the tensor-parallel pairs of a traced forward pass (Megatron-LM, Shoeybi et al. 2019,
Sec. 3): a Linear whose output reaches another Linear only through element-wise ops and the
attention core is split column-parallel (its output features over tp ranks), the second
row-parallel (its input features), and the pair needs one all-reduce of the second's output.
As in an MLP (fc1 -> activation -> fc2, SwiGLU's gate and up -> silu · up -> down) and in
attention (q / k / v or a fused qkv -> RoPE, SDPA -> out-projection).

A pair is recognised when, walking back from the second Linear's activation input through
element-wise, attention and batched-matmul ops, every path ends at a Linear or at a constant
(a buffer, an arange: not split); a path that reaches a norm, an embedding, a model input or
anything else means the region mixes split and whole tensors, and there is no pair. Every
consumer of the first Linears' outputs and of the ops between must be inside the pair (an
output used elsewhere would need a gather). A Linear is in at most one pair, taken in trace
order, so fc1 -> fc2 -> fc3 pairs (fc1, fc2) and leaves fc3 whole.

Nodes are the recorded ops: `ins` / `outs` are tensor identities (views resolved to the tensor
they view), parameters excluded.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

PASS_KINDS = ("elementwise", "attention", "bmm")  # ops a column split passes through


@dataclass(frozen=True)
class Node:
    kind: str  # the graph.Op kind
    linear: bool  # a GEMM on a weight parameter of one [K, N] matrix (nn.Linear)
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    known: bool = True  # False: an op without a cost model (never passed through)


def tp_roles(nodes: list[Node], inputs: frozenset[int]) -> list[str]:
    """Per node: "column", "row", "inner" (between a pair's column and row Linears, attention
    included) or "" (not split). `inputs` are the model's input tensors."""
    producer: dict[int, int] = {}
    consumers: dict[int, set[int]] = {}
    for i, n in enumerate(nodes):
        for t in n.outs:
            producer.setdefault(t, i)
        for t in n.ins:
            consumers.setdefault(t, set()).add(i)
    memo: dict[int, tuple[frozenset[int], frozenset[int]] | None] = {}

    def region(t: int) -> tuple[frozenset[int], frozenset[int]] | None:
        """(column Linears, ops between) a tensor derives from; None: it mixes in a whole tensor."""
        if t in memo:
            return memo[t]
        memo[t] = None  # a cycle cannot occur in a trace; guards the recursion anyway
        p = producer.get(t)
        out: tuple[frozenset[int], frozenset[int]] | None
        if p is None:
            out = None if t in inputs else (frozenset(), frozenset())
        elif nodes[p].linear:
            out = (frozenset({p}), frozenset())
        elif nodes[p].kind in PASS_KINDS and nodes[p].known:
            cols: set[int] = set()
            inner: set[int] = set()
            out = (frozenset(), frozenset())
            for u in nodes[p].ins:
                r = region(u)
                if r is None:
                    out = None
                    break
                cols |= r[0]
                inner |= r[1]
            if out is not None:
                # an op downstream of no Linear (a mask, an arange) is a constant, not split
                out = (frozenset(cols), frozenset(inner | {p})) if cols else (frozenset(), frozenset())
        else:
            out = None
        memo[t] = out
        return out

    roles = [""] * len(nodes)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(nodes) + 1000))
    try:
        for i, n in enumerate(nodes):
            if not n.linear or roles[i] or len(n.ins) != 1:
                continue
            r = region(n.ins[0])
            if r is None or not r[0] or any(roles[c] for c in r[0]) or i in r[0]:
                continue
            cols, inner = r
            members = inner | {i}
            if any(not consumers.get(t, set()) <= members for c in cols | inner for t in nodes[c].outs):
                continue
            for c in cols:
                roles[c] = "column"
            for m in inner:
                roles[m] = "inner"
            roles[i] = "row"
    finally:
        sys.setrecursionlimit(limit)
    return roles


__all__ = ["PASS_KINDS", "Node", "tp_roles"]
