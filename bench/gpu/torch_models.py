"""The PyTorch models of the stitch.torch tests and of the GPU step benchmark
(torch_step_bench.py), written in plain torch.nn or taken from torchvision. Sizes are
arguments: the tests use small ones, the benchmark the real ones (BERT-base, GPT-2 small,
ResNet-50's first stage, Stable Diffusion's first UNet level)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class LayerNormGeluMlp(nn.Module):
    """A Transformer's MLP block: pre-LayerNorm, GELU, residual."""

    def __init__(self, hidden=64, ffn=256):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.up = nn.Linear(hidden, ffn)
        self.down = nn.Linear(ffn, hidden)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class BertLayer(nn.Module):
    """One BERT encoder layer, post-LayerNorm, with an additive attention mask."""

    def __init__(self, hidden=64, heads=4, ffn=128, dropout=0.1):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attention_out = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, ffn)
        self.output = nn.Linear(ffn, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(dropout)

    def split_heads(self, x):
        return x.view(x.size(0), x.size(1), self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, mask):
        q, k, v = (self.split_heads(f(x)) for f in (self.query, self.key, self.value))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        scores = scores + (1.0 - mask[:, None, None, :]) * -10000.0
        probs = self.dropout(scores.softmax(dim=-1))
        context = (probs @ v).transpose(1, 2).reshape(x.shape)
        x = self.attention_norm(x + self.dropout(self.attention_out(context)))
        return self.output_norm(x + self.dropout(self.output(F.gelu(self.intermediate(x)))))


def resnet_block(channels=16):
    """torchvision's ResNet BasicBlock: conv-BN-ReLU-conv-BN, residual, ReLU."""
    from torchvision.models.resnet import BasicBlock
    return BasicBlock(channels, channels)


class CumsumBlock(nn.Module):
    """Elementwise work on both sides of an op stitch does not lower (cumsum)."""

    def forward(self, x):
        return torch.tanh(torch.cumsum(torch.exp(x) * 0.5, dim=-1)) + x


def bottleneck_block(channels=32, width=8):
    """torchvision's ResNet-50 Bottleneck: 1x1 conv to ``width``, 3x3 conv, 1x1 conv back to
    ``channels`` (= 4 x width), each followed by batch norm, ReLU between, residual, ReLU. At
    ResNet-50's first stage: channels 256, width 64."""
    from torchvision.models.resnet import Bottleneck
    if channels != width * Bottleneck.expansion:
        raise ValueError("an identity residual needs channels = %d x width" % Bottleneck.expansion)
    return Bottleneck(channels, width)


class CausalSelfAttention(nn.Module):
    """GPT-2's attention: one projection to queries, keys and values, a causal mask made from
    the positions at each call, softmax, and the output projection."""

    def __init__(self, hidden, heads, dropout):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        # Sizes from x.size() and indexing, not unpacking, so torch.fx.symbolic_trace takes it.
        batch, seq = x.size(0), x.size(1)
        qkv = self.qkv(x).view(batch, seq, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        position = torch.arange(seq, device=x.device)
        scores = scores.masked_fill(position[None, :] > position[:, None], float("-inf"))
        probs = self.dropout(scores.softmax(dim=-1))
        context = (probs @ v).transpose(1, 2).reshape(batch, seq, self.heads * self.head_dim)
        return self.proj(context)


class Gpt2Block(nn.Module):
    """One GPT-2 block: pre-LayerNorm causal self-attention and pre-LayerNorm MLP (GELU, tanh
    form, 4x wide), each with a residual. GPT-2 small: hidden 768, 12 heads."""

    def __init__(self, hidden=64, heads=4, dropout=0.1):
        super().__init__()
        self.attention_norm = nn.LayerNorm(hidden)
        self.attention = CausalSelfAttention(hidden, heads, dropout)
        self.mlp_norm = nn.LayerNorm(hidden)
        self.up = nn.Linear(hidden, 4 * hidden)
        self.down = nn.Linear(4 * hidden, hidden)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.dropout(self.attention(self.attention_norm(x)))
        return x + self.dropout(self.down(F.gelu(self.up(self.mlp_norm(x)), approximate="tanh")))


class GroupNormBlock(nn.Module):
    """A diffusion UNet's residual block: GroupNorm, SiLU, 3x3 conv, twice, and the residual.
    GroupNorm's statistics and its backward are reductions over each group's channels and
    pixels, the memory-bound part. Stable Diffusion's first level: 320 channels, 32 groups."""

    def __init__(self, channels=32, groups=8):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, channels)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm2 = nn.GroupNorm(groups, channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        return x + self.conv2(F.silu(self.norm2(h)))
