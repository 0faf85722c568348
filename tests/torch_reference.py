"""Small torch modules equivalent to what perfmodel.workload.builder expands, for FLOP checks.

Each module is written the plain way (nn.Linear, explicit matmuls for attention) so that
torch.utils.flop_counter.FlopCounterMode counts every matmul: Linear -> 2·m·n·k (bias not
counted), attention as two batched matmuls over the full s x s score matrix (causal masking
does not change what the dense kernel computes). Element-wise ops (norms, activations, RoPE,
softmax) count 0 in FlopCounterMode, so the tests compare against the graph's matmul ops only.

Modules run on device='meta' (shapes only, no memory) except the LSTM, whose ATen kernel wants
real tensors: it runs on small CPU tensors.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def count_flop(module: nn.Module, *inputs: torch.Tensor) -> int:
    """Forward FLOPs of module(*inputs) as FlopCounterMode counts them."""
    with FlopCounterMode(display=False) as fc:
        module(*inputs)
    return fc.get_total_flops()


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """q [b, a, s, d], k/v [b, a, s, d] -> [b, a, s, d]; scores as a plain matmul."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        s = q.shape[-2]
        mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return scores.softmax(-1) @ v


class GPTBlock(nn.Module):
    """Pre-LN GPT-2/3 block: LN, fused QKV, attention, out-proj, LN, FC1 (ffn), GELU, FC2."""

    def __init__(self, h: int, heads: int, ffn: int, causal: bool = True, bias: bool = True):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * h, bias=bias)
        self.proj = nn.Linear(h, h, bias=bias)
        self.fc1, self.fc2 = nn.Linear(h, ffn, bias=bias), nn.Linear(ffn, h, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        y = _attention(q, k, v, self.causal).transpose(1, 2).reshape(b, s, h)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    """Token + learned position embeddings, blocks, final LN, tied LM head."""

    def __init__(self, layers: int, h: int, heads: int, ffn: int, vocab: int, seq: int):
        super().__init__()
        # uninitialised tables (nn.Embedding's normal_ init costs seconds on first use on meta)
        self.wte = nn.Parameter(torch.empty(vocab, h))
        self.wpe = nn.Parameter(torch.empty(seq, h))
        self.blocks = nn.ModuleList(GPTBlock(h, heads, ffn) for _ in range(layers))
        self.ln_f = nn.LayerNorm(h)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = F.embedding(idx, self.wte) + F.embedding(torch.arange(idx.shape[1], device=idx.device), self.wpe)
        for blk in self.blocks:
            x = blk(x)
        return self.ln_f(x) @ self.wte.t()


class RMSNorm(nn.Module):
    def __init__(self, h: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


def _rope(x: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on [b, a, s, d] (element-wise: no matmul FLOPs)."""
    s, d = x.shape[-2], x.shape[-1]
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    ang = torch.arange(s, device=x.device, dtype=torch.float32)[:, None] * inv[None]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class SwiGLU(nn.Module):
    def __init__(self, h: int, ffn: int):
        super().__init__()
        self.w1, self.w3 = nn.Linear(h, ffn, bias=False), nn.Linear(h, ffn, bias=False)
        self.w2 = nn.Linear(ffn, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class GQAAttention(nn.Module):
    """Llama attention: separate q/k/v projections, kv heads repeated to the q heads, RoPE."""

    def __init__(self, h: int, heads: int, kv_heads: int):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, h // heads
        self.q = nn.Linear(h, heads * self.d, bias=False)
        self.k = nn.Linear(h, kv_heads * self.d, bias=False)
        self.v = nn.Linear(h, kv_heads * self.d, bias=False)
        self.o = nn.Linear(heads * self.d, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.d).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv_heads, self.d).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv_heads, self.d).transpose(1, 2)
        q, k = _rope(q), _rope(k)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return self.o(_attention(q, k, v, True).transpose(1, 2).reshape(b, s, -1))


class LlamaBlock(nn.Module):
    def __init__(self, h: int, heads: int, kv_heads: int, ffn: int):
        super().__init__()
        self.n1, self.n2 = RMSNorm(h), RMSNorm(h)
        self.attn = GQAAttention(h, heads, kv_heads)
        self.mlp = SwiGLU(h, ffn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.n1(x))
        return x + self.mlp(self.n2(x))


class MoEFFN(nn.Module):
    """Router + E SwiGLU experts with top-k routing, dispatched *balanced*: token copy j goes to
    expert j mod E, so every expert sees exactly T·k/E tokens (the builder's assumption; a real
    router's imbalance is data dependent). Plus `shared` always-on experts of the same width."""

    def __init__(self, h: int, experts: int, top_k: int, ffn: int, shared: int = 0):
        super().__init__()
        self.E, self.k = experts, top_k
        self.router = nn.Linear(h, experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(h, ffn) for _ in range(experts))
        self.shared = SwiGLU(h, ffn * shared) if shared else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        t = x.reshape(b * s, h)
        weights = self.router(t).softmax(-1).topk(self.k, dim=-1).values  # noqa: F841  (routing probs)
        copies = t.repeat_interleave(self.k, dim=0)  # [T·k, h]
        per = copies.shape[0] // self.E
        out = torch.cat([self.experts[e](copies[e * per:(e + 1) * per]) for e in range(self.E)])
        y = out.view(b * s, self.k, h).sum(1)
        if self.shared is not None:
            y = y + self.shared(t)
        return y.view(b, s, h)


class PermutedMoEFFN(nn.Module):
    """The MoE FFN the way Megatron-Core's token dispatcher runs it: fp32 router, sigmoid or
    softmax scores, top-k, token copies permuted into expert order (index_select), each expert
    on its contiguous chunk, then un-permuted with a weighted scatter-add (index_add_). Routing
    is forced balanced (copy j goes to expert j mod E) so the chunk sizes are known on 'meta'."""

    def __init__(self, h: int, experts: int, top_k: int, ffn: int, shared: int = 0, score: str = "softmax"):
        super().__init__()
        self.E, self.k, self.score = experts, top_k, score
        self.router = nn.Linear(h, experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(h, ffn) for _ in range(experts))
        self.shared = SwiGLU(h, ffn * shared) if shared else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        t = x.reshape(b * s, h)
        logits = F.linear(t.float(), self.router.weight.float())
        scores = logits.sigmoid() if self.score == "sigmoid" else logits.softmax(-1)
        probs = scores.topk(self.k, dim=-1).values.reshape(-1)  # [T·k]
        copies = torch.arange(b * s * self.k, device=x.device)
        expert = copies % self.E
        order = torch.sort(expert, stable=True).indices  # permutation into expert order
        token = copies[order] // self.k
        routed = t.index_select(0, token)  # permute: gather T·k rows
        per = routed.shape[0] // self.E
        out = torch.cat([self.experts[e](routed[e * per:(e + 1) * per]) for e in range(self.E)])
        y = torch.zeros_like(t).index_add_(0, token, out * probs[order, None].to(out.dtype))  # unpermute
        if self.shared is not None:
            y = y + self.shared(t)
        return y.view(b, s, h)


class MLAAttention(nn.Module):
    """DeepSeek-V2/V3 multi-head latent attention (training form: K/V up-projected per head)."""

    def __init__(self, h: int, heads: int, q_lora: int, kv_lora: int, nope: int, rope: int, v: int):
        super().__init__()
        self.heads, self.nope, self.rope, self.v = heads, nope, rope, v
        self.q_down, self.q_norm = nn.Linear(h, q_lora, bias=False), RMSNorm(q_lora)
        self.q_up = nn.Linear(q_lora, heads * (nope + rope), bias=False)
        self.kv_down, self.kv_norm = nn.Linear(h, kv_lora + rope, bias=False), RMSNorm(kv_lora)
        self.kv_up = nn.Linear(kv_lora, heads * (nope + v), bias=False)
        self.o = nn.Linear(heads * v, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        a = self.heads
        q = self.q_up(self.q_norm(self.q_down(x))).view(b, s, a, self.nope + self.rope).transpose(1, 2)
        ckv = self.kv_down(x)
        c, k_pe = ckv[..., : -self.rope], ckv[..., -self.rope:]
        kv = self.kv_up(self.kv_norm(c)).view(b, s, a, self.nope + self.v).transpose(1, 2)
        k_nope, v = kv[..., : self.nope], kv[..., self.nope:]
        k_pe = _rope(k_pe.view(b, 1, s, self.rope)).expand(b, a, s, self.rope)
        q = torch.cat([q[..., : self.nope], _rope(q[..., self.nope:])], -1)
        k = torch.cat([k_nope, k_pe], -1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.nope + self.rope)
        y = scores.softmax(-1) @ v
        return self.o(y.transpose(1, 2).reshape(b, s, a * self.v))


class LSTMForecaster(nn.Module):
    """nn.LSTM stack, then a linear head on the last time step's hidden state."""

    def __init__(self, input_size: int, hidden: int, layers: int, out: int):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(x)
        return self.head(y[:, -1])


class UnrolledLSTMForecaster(nn.Module):
    """The same computation as LSTMForecaster written as matmuls FlopCounterMode can see (it
    counts nothing inside the fused aten.lstm kernel): per layer one input projection of all
    time steps [b·s, in] x [in, 4H], then s recurrent projections [b, H] x [H, 4H]; gates i, f, g, o
    as torch.nn.LSTM. Shares the parameters of `ref`, so its output must equal ref's."""

    def __init__(self, ref: LSTMForecaster):
        super().__init__()
        self.ref = ref

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lstm = self.ref.lstm
        b, s, _ = x.shape
        H = lstm.hidden_size
        for i in range(lstm.num_layers):
            w_ih, w_hh = getattr(lstm, f"weight_ih_l{i}"), getattr(lstm, f"weight_hh_l{i}")
            bias = getattr(lstm, f"bias_ih_l{i}") + getattr(lstm, f"bias_hh_l{i}")
            xin = (x.reshape(b * s, -1) @ w_ih.t() + bias).view(b, s, 4 * H)
            h = x.new_zeros(b, H)
            c = x.new_zeros(b, H)
            outs = []
            for t in range(s):
                gates = xin[:, t] + h @ w_hh.t()
                ig, fg, gg, og = gates.chunk(4, dim=-1)
                c = fg.sigmoid() * c + ig.sigmoid() * gg.tanh()
                h = og.sigmoid() * c.tanh()
                outs.append(h)
            x = torch.stack(outs, dim=1)
        return self.ref.head(x[:, -1])


class TemporalBlock(nn.Module):
    """Bai et al. 2018 residual block: two dilated causal Conv1d + ReLU, 1x1 downsample when
    channels change. Causal padding on the left only, so each conv outputs exactly s steps."""

    def __init__(self, cin: int, cout: int, k: int, dilation: int):
        super().__init__()
        self.pad = (k - 1) * dilation
        self.conv1 = nn.Conv1d(cin, cout, k, dilation=dilation)
        self.conv2 = nn.Conv1d(cout, cout, k, dilation=dilation)
        self.down = nn.Conv1d(cin, cout, 1) if cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.conv1(F.pad(x, (self.pad, 0))))
        y = F.relu(self.conv2(F.pad(y, (self.pad, 0))))
        return F.relu(y + (x if self.down is None else self.down(x)))


class TCN(nn.Module):
    def __init__(self, input_size: int, channels: int, levels: int, k: int, out: int):
        super().__init__()
        self.blocks = nn.Sequential(*(TemporalBlock(input_size if i == 0 else channels, channels, k, 2 ** i)
                                      for i in range(levels)))
        self.head = nn.Linear(channels, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [b, C_in, s]
        return self.head(self.blocks(x)[:, :, -1])


class MLP(nn.Module):
    def __init__(self, input_size: int, hidden: int, layers: int, out: int):
        super().__init__()
        widths = [input_size] + [hidden] * layers
        self.body = nn.Sequential(*(m for i in range(layers) for m in (nn.Linear(widths[i], hidden), nn.ReLU())))
        self.head = nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class PatchTST(nn.Module):
    """Channel-independent patching, a linear patch embedding, non-causal encoder blocks and the
    flatten head Linear(num_patches·h, horizon), as Nie et al. 2023."""

    def __init__(self, channels: int, seq: int, patch: int, stride: int, h: int, heads: int, ffn: int,
                 layers: int, horizon: int):
        super().__init__()
        self.patch, self.stride = patch, stride
        self.n = (seq - patch) // stride + 1
        self.embed = nn.Linear(patch, h)
        self.pos = nn.Parameter(torch.zeros(self.n, h))
        self.blocks = nn.ModuleList(GPTBlock(h, heads, ffn, causal=False) for _ in range(layers))
        self.head = nn.Linear(self.n * h, horizon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [b, channels, seq]
        b, c, _ = x.shape
        p = x.unfold(-1, self.patch, self.stride).reshape(b * c, self.n, self.patch)
        z = self.embed(p) + self.pos
        for blk in self.blocks:
            z = blk(z)
        return self.head(z.reshape(b * c, -1)).view(b, c, -1)


class Mamba2Mixer(nn.Module):
    """Mamba-2 mixer (Dao & Gu 2024): in_proj -> z, xBC, dt; depthwise causal conv1d on xBC; SiLU;
    the chunked SSD scan of the paper's Listing 1 written as explicit matmuls (CBᵀ per group and
    chunk, the masked diagonal block times X, chunk states Bᵀ·X, states to outputs C·h), the
    inter-chunk recurrence as an element-wise scan (FlopCounterMode counts 0 for it); D skip,
    y·silu(z), RMSNorm, out_proj. Runs on the meta device (shapes only)."""

    def __init__(self, h: int, heads: int, head_dim: int, state: int, groups: int, conv: int, chunk: int):
        super().__init__()
        self.H, self.P, self.N, self.G, self.K, self.Q = heads, head_dim, state, groups, conv, chunk
        self.d_in = heads * head_dim
        self.conv_dim = self.d_in + 2 * groups * state
        self.in_proj = nn.Linear(h, 2 * self.d_in + 2 * groups * state + heads, bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, conv, groups=self.conv_dim)
        self.A_log, self.D, self.dt_bias = (nn.Parameter(torch.zeros(heads)) for _ in range(3))
        self.norm = RMSNorm(self.d_in)
        self.out_proj = nn.Linear(self.d_in, h, bias=False)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        b, s, _ = u.shape
        H, P, N, G, Q = self.H, self.P, self.N, self.G, self.Q
        z, xbc, dt = self.in_proj(u).split([self.d_in, self.conv_dim, H], dim=-1)
        xbc = F.silu(self.conv1d(F.pad(xbc.transpose(1, 2), (self.K - 1, 0))).transpose(1, 2))  # causal: s outputs
        x, B, C = xbc.split([self.d_in, G * N, G * N], dim=-1)
        c = s // Q
        x = x.reshape(b, c, Q, H, P).permute(0, 1, 3, 2, 4)  # [b, c, H, Q, P]
        B = B.reshape(b, c, Q, G, N).permute(0, 1, 3, 2, 4)  # [b, c, G, Q, N]
        C = C.reshape(b, c, Q, G, N).permute(0, 1, 3, 2, 4)
        a = (F.softplus(dt + self.dt_bias) * -torch.exp(self.A_log)).reshape(b, c, Q, H).permute(0, 1, 3, 2)
        a_cum = a.cumsum(-1)  # [b, c, H, Q]
        decay = torch.exp(a_cum[..., :, None] - a_cum[..., None, :]).tril()  # L: [b, c, H, Q, Q]
        rep = H // G
        cb = (C @ B.transpose(-1, -2)).repeat_interleave(rep, dim=2)  # CBᵀ per group: 2·Q²·N each
        y_diag = (cb * decay) @ x  # 2·Q²·P per head and chunk
        Bh, Ch = B.repeat_interleave(rep, dim=2), C.repeat_interleave(rep, dim=2)
        to_end = torch.exp(a_cum[..., -1:] - a_cum)  # [b, c, H, Q]
        states = (Bh * to_end[..., None]).transpose(-1, -2) @ x  # [b, c, H, N, P]: 2·Q·N·P
        h_prev, carried = torch.zeros_like(states[:, 0]), []
        for i in range(c):  # the inter-chunk scan: element-wise
            carried.append(h_prev)
            h_prev = h_prev * torch.exp(a_cum[:, i, :, -1])[..., None, None] + states[:, i]
        h_in = torch.stack(carried, dim=1)
        y_off = (Ch * torch.exp(a_cum)[..., None]) @ h_in  # 2·Q·N·P per head and chunk
        y = (y_diag + y_off + x * self.D[None, None, :, None, None]).permute(0, 1, 3, 2, 4).reshape(b, s, self.d_in)
        return self.out_proj(self.norm(y * F.silu(z)))


def local_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, chunked: bool) -> torch.Tensor:
    """Blocked local attention, q/k/v [b, a, s, d], s a multiple of `window`: query block i
    scores against key blocks i - 1 and i (sliding window w: 2·s·w - w² score entries, the dense
    blocks a tiled kernel computes), or only block i (chunked attention: s·c entries); the causal
    and window masks are applied to those blocks."""
    b, a, s, d = q.shape
    w = window
    nb = s // w
    qb = q.reshape(b, a, nb, w, d)
    kb, vb = k.reshape(b, a, nb, w, d), v.reshape(b, a, nb, w, d)
    out = []
    for i in range(nb):
        lo = i if chunked or i == 0 else i - 1
        keys, vals = kb[:, :, lo:i + 1].flatten(2, 3), vb[:, :, lo:i + 1].flatten(2, 3)
        scores = qb[:, :, i] @ keys.transpose(-1, -2) / math.sqrt(d)
        qpos = torch.arange(i * w, (i + 1) * w, device=q.device)[:, None]
        kpos = torch.arange(lo * w, (i + 1) * w, device=q.device)[None, :]
        mask = (kpos > qpos) | (kpos <= qpos - w)
        out.append(scores.masked_fill(mask, float("-inf")).softmax(-1) @ vals)
    return torch.stack(out, dim=2).reshape(b, a, s, d)


class LocalGQAAttention(GQAAttention):
    """GQAAttention with blocked sliding-window (or chunked) attention."""

    def __init__(self, h: int, heads: int, kv_heads: int, window: int, chunked: bool = False):
        super().__init__(h, heads, kv_heads)
        self.window, self.chunked = window, chunked

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.d).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv_heads, self.d).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv_heads, self.d).transpose(1, 2)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return self.o(local_attention(q, k, v, self.window, self.chunked).transpose(1, 2).reshape(b, s, -1))


class LatentMoEFFN(PermutedMoEFFN):
    """LatentMoE as Megatron-Core's MoELayer runs it (moe_latent_size): the router and the shared
    expert see the full hidden state; fc1_latent_proj takes the routed tokens down to l before the
    permutation, the experts work at l, and fc2_latent_proj brings the un-permuted sum back to h."""

    def __init__(self, h: int, latent: int, experts: int, top_k: int, ffn: int, shared: int = 0):
        super().__init__(latent, experts, top_k, ffn, 0, "sigmoid")
        self.router = nn.Linear(h, experts, bias=False)
        self.down, self.up = nn.Linear(h, latent, bias=False), nn.Linear(latent, h, bias=False)
        self.full_shared = SwiGLU(h, ffn * shared) if shared else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        t = x.reshape(b * s, h)
        probs = F.linear(t.float(), self.router.weight.float()).sigmoid().topk(self.k, dim=-1).values.reshape(-1)
        z = self.down(t)
        copies = torch.arange(b * s * self.k, device=x.device)
        order = torch.sort(copies % self.E, stable=True).indices
        token = copies[order] // self.k
        routed = z.index_select(0, token)
        per = routed.shape[0] // self.E
        out = torch.cat([self.experts[e](routed[e * per:(e + 1) * per]) for e in range(self.E)])
        y = self.up(torch.zeros_like(z).index_add_(0, token, out * probs[order, None].to(out.dtype)))
        if self.full_shared is not None:
            y = y + self.full_shared(t)
        return y.view(b, s, h)


class DeepSeekV4Attention(nn.Module):
    """The matmuls of DeepSeek-V4's attention block (deepseek-ai/DeepSeek-V4-Flash inference/model.py
    Attention / Compressor / Indexer) for one compress ratio r: low-rank query, one K = V head, the
    gated pooling compressor (r > 0), the indexer's scores and top-k (r == 4), attention over the
    window slots plus the compressed slots (padded as the reference's index lists are), grouped
    low-rank output. Element-wise work (norms, RoPE, softmax, pooling) counts 0 in FlopCounterMode."""

    def __init__(self, h: int, heads: int, d: int, q_lora: int, o_lora: int, o_groups: int, window: int, r: int,
                 idx_heads: int, idx_dim: int, topk: int):
        super().__init__()
        self.H, self.d, self.w, self.r, self.og, self.ol, self.topk = heads, d, window, r, o_groups, o_lora, topk
        self.ih, self.idim = idx_heads, idx_dim
        self.wq_a, self.wq_b = nn.Linear(h, q_lora, bias=False), nn.Linear(q_lora, heads * d, bias=False)
        self.wkv = nn.Linear(h, d, bias=False)
        self.wo_a = nn.Linear(heads * d // o_groups, o_groups * o_lora, bias=False)
        self.wo_b = nn.Linear(o_groups * o_lora, h, bias=False)
        c = 2 if r == 4 else 1
        if r:
            self.c_kv, self.c_gate = nn.Linear(h, c * d, bias=False), nn.Linear(h, c * d, bias=False)
        if r == 4:
            self.i_q, self.i_w = nn.Linear(q_lora, idx_heads * idx_dim, bias=False), nn.Linear(h, idx_heads, bias=False)
            self.i_kv, self.i_gate = nn.Linear(h, 2 * idx_dim, bias=False), nn.Linear(h, 2 * idx_dim, bias=False)

    def _pool(self, kv: torch.Tensor, gate: torch.Tensor, width: int) -> torch.Tensor:
        b, s, _ = kv.shape
        kv, gate = kv.view(b, s // self.r, self.r, -1), gate.view(b, s // self.r, self.r, -1)
        return (kv * gate.softmax(dim=2)).sum(dim=2)[..., :width]  # [b, s/r, width]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        qr = self.wq_a(x)
        q = self.wq_b(qr).view(b, s, self.H, self.d)
        kv = self.wkv(x)
        slots = min(s, self.w)
        win = (torch.arange(s, device=x.device)[:, None] - torch.arange(slots, device=x.device)[None, :]).clamp(min=0)
        keys = kv[:, win]  # [b, s, W, d]
        if self.r:
            comp = self._pool(self.c_kv(x), self.c_gate(x), self.d)  # [b, n, d]
            n = s // self.r
            if self.r == 4:
                iq = self.i_q(qr).view(b, s, self.ih, self.idim)
                ik = self._pool(self.i_kv(x), self.i_gate(x), self.idim)
                score = (torch.einsum("bshd,btd->bsht", iq, ik).relu() * self.i_w(x)[..., None]).sum(2)
                idx = score.topk(min(self.topk, n), dim=-1).indices  # [b, s, K]
                sel = torch.gather(comp[:, None].expand(b, s, n, self.d), 2, idx[..., None].expand(-1, -1, -1, self.d))
            else:
                sel = comp[:, None].expand(b, s, n, self.d)
            keys = torch.cat([keys, sel], dim=2)
        p = torch.einsum("bshd,bskd->bshk", q, keys).softmax(-1)
        o = torch.einsum("bshk,bskd->bshd", p, keys).reshape(b, s, self.og, -1)
        o = torch.einsum("bsgd,grd->bsgr", o, self.wo_a.weight.view(self.og, self.ol, -1))
        return self.wo_b(o.flatten(2))


class HyperConnectionMix(nn.Module):
    """DeepSeek-V4 Block.hc_pre's one matmul: [T, n·h] x [n·h, (2 + n)·n] (the rest is element-wise)."""

    def __init__(self, h: int, n: int):
        super().__init__()
        self.n = n
        self.fn = nn.Parameter(torch.empty((2 + n) * n, n * h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [b, s, n, h]
        flat = x.flatten(2).float()
        mixes = F.linear(flat, self.fn) * torch.rsqrt(flat.square().mean(-1, keepdim=True) + 1e-6)
        pre = mixes[..., :self.n].sigmoid()
        return (pre.unsqueeze(-1) * x).sum(dim=2)
