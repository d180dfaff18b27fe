"""The models of contextual-sparsity (provided: the grader's copy replaces yours; do not edit).

- MLPClassifier: the course's multi-class classifier, D_IN -> WIDTH -> WIDTH -> CLASSES, ReLU after each hidden
  layer. `hidden` holds the hidden layers' nn.Linear in order, `activation` is their ReLU, `out` the last layer
  (logits: never masked).
- GPT2MLP: GPT-2's MLP block as nanoGPT writes it (c_fc: C -> 4C, GELU with the tanh approximation, c_proj:
  4C -> C), without dropout (the grader runs it in eval mode).
- GPT2Attention: GPT-2's causal self-attention as nanoGPT writes it (c_attn: C -> 3C for q, k, v; n_head heads of
  C / n_head; softmax(q k^T / sqrt(head size)) over the positions up to each token; the heads' outputs side by
  side; c_proj: C -> C), without dropout. `heads(x)` gives the heads' outputs, (batch, n_head, T, head size), before
  c_proj; `forward` is c_proj of them, heads joined.
"""

import math

import torch
from torch import nn

D_IN, WIDTH, CLASSES, GPT2_C, GPT2_HEADS = 16, 64, 8, 48, 4


class MLPClassifier(nn.Module):
    def __init__(self, d_in: int = D_IN, width: int = WIDTH, classes: int = CLASSES) -> None:
        super().__init__()
        self.hidden = nn.ModuleList([nn.Linear(d_in, width), nn.Linear(width, width)])
        self.activation = nn.ReLU()
        self.out = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.hidden:
            x = self.activation(layer(x))
        return self.out(x)


class GPT2MLP(nn.Module):
    def __init__(self, n_embd: int = GPT2_C) -> None:
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class GPT2Attention(nn.Module):
    def __init__(self, n_embd: int = GPT2_C, n_head: int = GPT2_HEADS) -> None:
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.shape[-1])
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        return att @ v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        return self.c_proj(self.heads(x).transpose(1, 2).reshape(B, T, C))
