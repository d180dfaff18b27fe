"""The models of contextual-sparsity (provided: the grader's copy replaces yours; do not edit).

- MLPClassifier: the course's multi-class classifier, D_IN -> WIDTH -> WIDTH -> CLASSES, ReLU after each hidden
  layer. `hidden` holds the hidden layers' nn.Linear in order, `activation` is their ReLU, `out` the last layer
  (logits: never masked).
- GPT2MLP: GPT-2's MLP block as nanoGPT writes it (c_fc: C -> 4C, GELU with the tanh approximation, c_proj:
  4C -> C), without dropout (the grader runs it in eval mode).
"""

import torch
from torch import nn

D_IN, WIDTH, CLASSES, GPT2_C = 16, 64, 8, 48


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
