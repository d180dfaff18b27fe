"""Contextual sparsity (Liu et al., 2023): forward passes that keep, per input, the top-k neurons of each hidden
layer, those with the largest outputs (after the activation, by value), and zero the rest."""

import torch


def keep_topk(h: torch.Tensor, k: int) -> torch.Tensor:
    """h with all but the k largest values of each row (its last dimension) set to 0."""
    if k >= h.shape[-1]:
        return h
    mask = torch.zeros_like(h).scatter_(-1, torch.topk(h, k, dim=-1).indices, 1.0)
    return h * mask


def topk_forward(model, x: torch.Tensor, k: int) -> torch.Tensor:
    """The classifier's logits for x (batch, D_IN), each hidden layer cut to its k largest outputs per row."""
    for layer in model.hidden:
        x = keep_topk(model.activation(layer(x)), k)
    return model.out(x)


def topk_mlp_forward(mlp, x: torch.Tensor, k: int) -> torch.Tensor:
    """GPT-2's MLP block on x (batch, T, C), its 4C hidden outputs cut to the k largest per token."""
    return mlp.c_proj(keep_topk(mlp.gelu(mlp.c_fc(x)), k))


def topk_attention_forward(attn, x: torch.Tensor, k: int) -> torch.Tensor:
    """GPT-2's attention on x (batch, T, C), each token keeping the k heads whose outputs are largest (L2 norm)."""
    heads = attn.heads(x)  # (batch, n_head, T, head size)
    norms = heads.norm(dim=-1).transpose(1, 2)  # (batch, T, n_head)
    mask = torch.zeros_like(norms).scatter_(-1, torch.topk(norms, k, dim=-1).indices, 1.0)
    B, T, C = x.shape
    return attn.c_proj((heads * mask.transpose(1, 2).unsqueeze(-1)).transpose(1, 2).reshape(B, T, C))
