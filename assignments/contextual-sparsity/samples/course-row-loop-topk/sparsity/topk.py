"""Contextual sparsity, as the course's provided code suggests writing it: the dense forward pass, with each
hidden layer's output masked row by row (torch.topk on the row, a zero mask with ones at its indices)."""

import torch


def mask_rows(h: torch.Tensor, k: int) -> torch.Tensor:
    rows = h.reshape(-1, h.shape[-1])
    masked = torch.zeros_like(rows)
    for i in range(rows.shape[0]):
        values, indices = torch.topk(rows[i], k)
        masked[i, indices] = values
    return masked.reshape(h.shape)


def topk_forward(model, x, k):
    h = x
    for layer in model.hidden:
        h = mask_rows(torch.relu(layer(h)), k)
    return model.out(h)


def topk_mlp_forward(mlp, x, k):
    return mlp.c_proj(mask_rows(mlp.gelu(mlp.c_fc(x)), k))


def topk_attention_forward(attn, x, k):
    heads = attn.heads(x)  # (B, n_head, T, head size)
    B, n_head, T, size = heads.shape
    kept = torch.zeros_like(heads)
    for b in range(B):
        for t in range(T):
            for h in torch.topk(heads[b, :, t].norm(dim=-1), k).indices:
                kept[b, h, t] = heads[b, h, t]
    return attn.c_proj(kept.transpose(1, 2).reshape(B, T, n_head * size))
