"""Contextual sparsity (Liu et al., 2023): "two forward passes: the first using all weights, and the second using
only the top-k weights with the largest outputs". Write the second.

In each hidden layer keep, per input (per row, per token), the k neurons whose output (after the activation) is
largest by value, set the others to 0, then go on to the next layer; the last layer (the logits) is never masked.
"""

import torch


def topk_forward(model, x: torch.Tensor, k: int) -> torch.Tensor:
    """The classifier's logits for x (batch, D_IN): model.hidden (nn.Linear layers, each followed by
    model.activation), then model.out. Returns (batch, CLASSES)."""
    raise NotImplementedError("topk_forward(model, x, k) is yours to write (sparsity/topk.py)")


def topk_mlp_forward(mlp, x: torch.Tensor, k: int) -> torch.Tensor:
    """GPT-2's MLP block (mlp.c_fc, mlp.gelu, mlp.c_proj) on x (batch, T, C), its 4C hidden outputs cut to the k
    largest per token. Returns (batch, T, C)."""
    raise NotImplementedError("topk_mlp_forward(mlp, x, k) is yours to write (sparsity/topk.py)")


def topk_attention_forward(attn, x: torch.Tensor, k: int) -> torch.Tensor:
    """GPT-2's causal self-attention (attn.heads(x): each head's output, (batch, n_head, T, head size); then
    attn.c_proj of the heads side by side) on x (batch, T, C), each token keeping the k heads whose outputs are
    largest (their L2 norm), the others' outputs set to 0 before c_proj. Returns (batch, T, C)."""
    raise NotImplementedError("topk_attention_forward(attn, x, k) is yours to write (sparsity/topk.py)")
