"""The PyTorch models of the stitch.torch tests and of the GPU step benchmark
(torch_step_bench.py), written in plain torch.nn or taken from torchvision. Sizes are
arguments: the tests use small ones, the benchmark BERT-base's and ResNet-50's."""

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
