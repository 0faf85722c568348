"""Small torch models trained by the CPU harness, built to match perfmodel's ModelSpec semantics.

gpt:   learned positions, LayerNorm, GELU MLP (ffn_hidden), biases, untied LM head.
llama: RoPE, RMSNorm, SwiGLU MLP (ffn_hidden), grouped-query attention, no biases, untied head.
lstm / tcn / mlp: as perfmodel.workload.builder describes them (forecast head on the last step).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(seq: int, dhead: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / base ** (torch.arange(0, dhead, 2).float() / dhead)
    ang = torch.outer(torch.arange(seq).float(), inv)
    return ang.cos(), ang.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, arch: str, hidden: int, ffn: int, heads: int, kv_heads: int):
        super().__init__()
        self.arch, self.heads, self.kv_heads, self.dhead = arch, heads, kv_heads, hidden // heads
        bias = arch == "gpt"
        norm = (lambda: nn.LayerNorm(hidden)) if arch == "gpt" else (lambda: RMSNorm(hidden))
        self.ln1, self.ln2 = norm(), norm()
        self.qkv = nn.Linear(hidden, (heads + 2 * kv_heads) * self.dhead, bias=bias)
        self.proj = nn.Linear(hidden, hidden, bias=bias)
        if arch == "gpt":
            self.fc1 = nn.Linear(hidden, ffn, bias=True)
        else:
            self.fc1 = nn.Linear(hidden, 2 * ffn, bias=False)  # gate and up in one GEMM
        self.fc2 = nn.Linear(ffn, hidden, bias=bias)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(
            [self.heads * self.dhead, self.kv_heads * self.dhead, self.kv_heads * self.dhead], dim=-1)
        q = q.view(b, s, self.heads, self.dhead).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, self.dhead).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, self.dhead).transpose(1, 2)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, h))
        y = self.ln2(x)
        if self.arch == "gpt":
            y = F.gelu(self.fc1(y))
        else:
            g, u = self.fc1(y).chunk(2, dim=-1)
            y = F.silu(g) * u
        return x + self.fc2(y)


class Decoder(nn.Module):
    """A decoder-only LM; `first`/`last` let a pipeline stage hold a slice of it."""

    def __init__(self, arch: str, n_layers: int, hidden: int, ffn: int, heads: int, kv_heads: int, vocab: int,
                 seq: int, first: bool = True, last: bool = True, layer_range: range | None = None):
        super().__init__()
        self.arch, self.first, self.last = arch, first, last
        self.emb = nn.Embedding(vocab, hidden) if first else None
        self.pos = nn.Embedding(seq, hidden) if first and arch == "gpt" else None
        rng = layer_range if layer_range is not None else range(n_layers)
        self.blocks = nn.ModuleList(Block(arch, hidden, ffn, heads, kv_heads) for _ in rng)
        if last:
            self.ln_f = nn.LayerNorm(hidden) if arch == "gpt" else RMSNorm(hidden)
            self.head = nn.Linear(hidden, vocab, bias=False)
        if arch == "llama":
            cos, sin = rope_tables(seq, hidden // heads)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)

    def forward(self, x: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        if self.first:
            s = x.shape[1]
            h = self.emb(x)
            if self.pos is not None:
                h = h + self.pos(torch.arange(s))
            x = h
        rope = (self.cos[: x.shape[1]], self.sin[: x.shape[1]]) if self.arch == "llama" else None
        for blk in self.blocks:
            x = blk(x, rope)
        if not self.last:
            return x
        logits = self.head(self.ln_f(x))
        assert targets is not None
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


class LSTMForecaster(nn.Module):
    def __init__(self, input_size: int, hidden: int, n_layers: int, out: int):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden, n_layers, batch_first=True)
        self.head = nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h, _ = self.lstm(x)
        return F.mse_loss(self.head(h[:, -1]).float(), y)


class TemporalBlock(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, dilation: int):
        super().__init__()
        self.pad = (k - 1) * dilation
        self.conv1 = nn.Conv1d(cin, cout, k, dilation=dilation)
        self.conv2 = nn.Conv1d(cout, cout, k, dilation=dilation)
        self.down = nn.Conv1d(cin, cout, 1) if cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.conv1(F.pad(x, (self.pad, 0))))
        y = self.conv2(F.pad(y, (self.pad, 0)))
        return F.relu(y + (self.down(x) if self.down is not None else x))


class TCN(nn.Module):
    def __init__(self, input_size: int, hidden: int, n_layers: int, k: int, out: int):
        super().__init__()
        self.levels = nn.Sequential(*(TemporalBlock(input_size if i == 0 else hidden, hidden, k, 2**i)
                                      for i in range(n_layers)))
        self.head = nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.levels(x.transpose(1, 2))  # [b, C, s]
        return F.mse_loss(self.head(h[:, :, -1]).float(), y)


class MLP(nn.Module):
    def __init__(self, input_size: int, hidden: int, n_layers: int, out: int):
        super().__init__()
        widths = [input_size] + [hidden] * n_layers
        self.body = nn.Sequential(*(m for i in range(n_layers) for m in (nn.Linear(widths[i], hidden), nn.ReLU())))
        self.head = nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.head(self.body(x)).float(), y)


def n_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())

