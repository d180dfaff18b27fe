"""Contextual sparsity by a threshold: keep what is >= each row's k-th largest value. On ReLU's 0s tied at the k-th
place it keeps more than k neurons, all of them 0: the same next layer."""

import torch


def keep_topk(h, k):
    kth = torch.topk(h, k, dim=-1).values[..., -1:]
    return torch.where(h >= kth, h, torch.zeros_like(h))


def topk_forward(model, x, k):
    for layer in model.hidden:
        x = keep_topk(model.activation(layer(x)), k)
    return model.out(x)


def topk_mlp_forward(mlp, x, k):
    return mlp.c_proj(keep_topk(mlp.gelu(mlp.c_fc(x)), k))


def topk_attention_forward(attn, x, k):
    heads = attn.heads(x)
    norms = heads.norm(dim=-1, keepdim=True)  # (B, n_head, T, 1)
    kth = torch.topk(norms, k, dim=1).values[:, -1:]
    B, T, C = x.shape
    return attn.c_proj(torch.where(norms >= kth, heads, torch.zeros_like(heads)).transpose(1, 2).reshape(B, T, C))
