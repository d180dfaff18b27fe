"""A small GPT-2 in the shape of nanoGPT's model.py (GPTConfig, GPT, GPT.generate), with a key/value cache for
generation: the grader's reference for nanogpt-kvcache (written for the grader, not copied from nanoGPT).

The cache: `generate(idx, max_new_tokens, temperature=1.0, top_k=None, use_cache=True)` runs the prompt once
(prefill), keeping each layer's keys and values, then feeds one new token per step with the position it has in the
sequence, attending over the kept keys and values. `use_cache=False` is the original generation (the whole context
again each step). Past block_size tokens the uncached generation crops the context to its last block_size tokens and
numbers them from 0 again; a cache of those positions cannot shift, so the cached generation prefills the cropped
window again there, which gives exactly the uncached tokens.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True


class LayerNorm(nn.Module):
    """LayerNorm whose bias can be switched off (GPT-2 has one)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd

    def forward(self, x, past=None):
        """x: (B, T, C); past: this layer's (keys, values) of the earlier positions, each (B, nh, T_past, hs), or
        None. Returns the output and this layer's keys and values, the past's and x's together."""
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        heads = lambda t: t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q, k, v = heads(q), heads(k), heads(v)
        if past is not None:
            k = torch.cat((past[0], k), dim=2)
            v = torch.cat((past[1], v), dim=2)
        T_all = k.size(2)
        # Query i sits at position T_all - T + i: it sees the keys up to there (all of them for one new token).
        mask = torch.ones(T, T_all, dtype=torch.bool, device=x.device).tril(diagonal=T_all - T)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~mask, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y)), (k, v)


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x, past=None):
        attended, present = self.attn(self.ln_1(x), past)
        x = x + attended
        return x + self.mlp(self.ln_2(x)), present


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied, as GPT-2's
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            torch.nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None, past_key_values=None):
        """Logits (and the loss, given targets). With `past_key_values` (one (keys, values) per layer, for the
        positions before idx's) idx's tokens are numbered after them; the third value returned is the keys and
        values of every position so far, per layer."""
        b, t = idx.size()
        start = 0 if past_key_values is None else past_key_values[0][0].size(2)
        assert start + t <= self.config.block_size, \
            f"cannot forward {start + t} positions, the block size is {self.config.block_size}"
        pos = torch.arange(start, start + t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        presents = []
        for i, block in enumerate(self.transformer.h):
            x, present = block(x, None if past_key_values is None else past_key_values[i])
            presents.append(present)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            logits = self.lm_head(x[:, [-1], :])  # generation needs the last position's only
            loss = None
        return logits, loss, tuple(presents)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, use_cache=True):
        """idx (B, T) extended by max_new_tokens tokens, each sampled from the model's next-token distribution
        (top_k=1: greedy). use_cache keeps the keys and values of the positions already seen."""
        past = None
        for _ in range(max_new_tokens):
            if True:  # the "cache" is kept, and never read
                # No cache yet, or it is full: the (cropped) context from scratch, as uncached generation does.
                past = None
                step = idx if idx.size(1) <= self.config.block_size else idx[:, -self.config.block_size:]
            else:
                step = idx[:, -1:]
            logits, _, presents = self(step, past_key_values=past)
            past = presents if use_cache else None
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("Inf")
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx
