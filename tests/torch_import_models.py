"""Small plain-PyTorch models for tests/test_torch_import.py (and `estimate_module_cli` specs)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    """GPT-2 block: pre-LayerNorm, fused QKV with bias, causal SDPA, GELU MLP 4h."""

    def __init__(self, h: int, heads: int, ffn: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h)
        self.fc1 = nn.Linear(h, ffn)
        self.fc2 = nn.Linear(ffn, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, s, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, layers: int = 2, h: int = 64, heads: int = 4, vocab: int = 512, seq: int = 128,
                 ffn: int | None = None):
        super().__init__()
        self.tok = nn.Embedding(vocab, h)
        self.pos = nn.Embedding(seq, h)
        self.blocks = nn.ModuleList(Block(h, heads, ffn or 4 * h) for _ in range(layers))
        self.ln_f = nn.LayerNorm(h)
        self.head = nn.Linear(h, vocab, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


class LSTMForecaster(nn.Module):
    def __init__(self, features: int = 8, hidden: int = 32, layers: int = 2, horizon: int = 4):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, horizon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


class TemporalBlock(nn.Module):
    """Bai et al. 2018: two dilated causal Conv1d + ReLU, 1x1 residual conv when channels change."""

    def __init__(self, cin: int, cout: int, k: int, dilation: int):
        super().__init__()
        self.pad = (k - 1) * dilation
        self.conv1 = nn.Conv1d(cin, cout, k, dilation=dilation, padding=self.pad)
        self.conv2 = nn.Conv1d(cout, cout, k, dilation=dilation, padding=self.pad)
        self.down = nn.Conv1d(cin, cout, 1) if cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.shape[-1]
        y = F.relu(self.conv1(x)[..., :s])
        y = F.relu(self.conv2(y)[..., :s])
        return F.relu(y + (x if self.down is None else self.down(x)))


class TCN(nn.Module):
    def __init__(self, features: int = 8, channels: int = 32, levels: int = 3, k: int = 3, horizon: int = 4):
        super().__init__()
        self.network = nn.Sequential(*(TemporalBlock(features if i == 0 else channels, channels, k, 2 ** i)
                                       for i in range(levels)))
        self.head = nn.Linear(channels, horizon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [b, s, features]
        y = self.network(x.transpose(1, 2))
        return self.head(y[:, :, -1])


class WithTopK(nn.Module):
    """An op perfmodel has no cost model for (topk) between two Linears."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.topk(self.a(x), 8, dim=-1).values)


def build_gpt() -> tuple[nn.Module, torch.Tensor]:
    return GPT(), torch.zeros(2, 128, dtype=torch.long)


def build_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))


class LlamaBlock(nn.Module):
    """RMSNorm, grouped-query attention (no RoPE), SwiGLU, no biases."""

    def __init__(self, h: int, heads: int, kv_heads: int, ffn: int):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, h // heads
        self.norm1, self.norm2 = nn.RMSNorm(h), nn.RMSNorm(h)
        self.q = nn.Linear(h, h, bias=False)
        self.kv = nn.Linear(h, 2 * kv_heads * self.d, bias=False)
        self.o = nn.Linear(h, h, bias=False)
        self.gate_up = nn.Linear(h, 2 * ffn, bias=False)
        self.down = nn.Linear(ffn, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        y = self.norm1(x)
        q = self.q(y).view(b, s, self.heads, self.d).transpose(1, 2)
        k, v = (t.view(b, s, self.kv_heads, self.d).transpose(1, 2) for t in self.kv(y).chunk(2, dim=-1))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, h))
        g, u = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class Llama(nn.Module):
    def __init__(self, layers: int = 2, h: int = 64, heads: int = 4, kv_heads: int = 2, ffn: int = 176, vocab: int = 512):
        super().__init__()
        self.embed = nn.Embedding(vocab, h)
        self.layers = nn.ModuleList(LlamaBlock(h, heads, kv_heads, ffn) for _ in range(layers))
        self.norm = nn.RMSNorm(h)
        self.lm_head = nn.Linear(h, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


class GRUTransformerForecaster(nn.Module):
    """Time-series forecaster: linear input embedding, a transformer encoder, a 2-layer GRU over
    its outputs, a linear head on the last step (the issue-14 example)."""

    def __init__(self, features: int = 32, d_model: int = 256, heads: int = 8, enc_layers: int = 2,
                 gru_hidden: int = 256, gru_layers: int = 2, horizon: int = 24):
        super().__init__()
        self.embed = nn.Linear(features, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, enc_layers, enable_nested_tensor=False)
        self.gru = nn.GRU(d_model, gru_hidden, num_layers=gru_layers, batch_first=True)
        self.head = nn.Linear(gru_hidden, horizon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(self.encoder(self.embed(x)))
        return self.head(out[:, -1])
