"""GPT-2 in the shape of nanoGPT's model.py, whole: GPTConfig, LayerNorm, CausalSelfAttention, MLP, Block and GPT
(forward, crop_block_size, from_pretrained, configure_optimizers, estimate_mfu, generate), with a key/value cache
for generation: the grader's reference for nanogpt-kvcache (written for the grader, not copied from nanoGPT).

The cache: `generate(idx, max_new_tokens, temperature=1.0, top_k=None, use_cache=True)` runs the prompt once
(prefill), keeping each layer's keys and values, then feeds one new token per step with the position it has in the
sequence, attending over the kept keys and values. `use_cache=False` is the original generation (the whole context
again each step). Past block_size tokens the uncached generation crops the context to its last block_size tokens and
numbers them from 0 again; a cache of those positions cannot shift, so the cached generation prefills the cropped
window again there, which gives exactly the uncached tokens.
"""

import inspect
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F


class LayerNorm(nn.Module):
    """LayerNorm whose bias can be switched off (PyTorch's has no such option)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        # the keys, queries and values of every head, in one projection
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        # PyTorch >= 2.0 has a fused attention kernel; without it, a causal mask kept as a buffer
        self.flash = hasattr(torch.nn.functional, 'scaled_dot_product_attention')
        if not self.flash:
            print("WARNING: using slow attention. Flash Attention requires PyTorch >= 2.0")
            self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                 .view(1, 1, config.block_size, config.block_size))

    def forward(self, x, past=None):
        """x: (B, T, C); past: this layer's (keys, values) of the earlier positions, each (B, nh, T_past, hs), or
        None. Returns the output and this layer's keys and values, the past's and x's together."""
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if past is not None:
            k = torch.cat((past[0], k), dim=2)
            v = torch.cat((past[1], v), dim=2)
        T_all = k.size(2)
        if self.flash:
            # is_causal aligns the mask top-left: right for the prefill (T == T_all) only. A cached step's queries
            # sit at the end, at positions T_all - T .. T_all - 1: query i sees the keys up to T_all - T + i.
            mask = None if T == T_all else torch.ones(T, T_all, dtype=torch.bool, device=x.device).tril(T_all - T)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0,
                                               is_causal=T == T_all)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, T_all - T:T_all, :T_all] == 0, float('-inf'))
            att = self.attn_dropout(F.softmax(att, dim=-1))
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # the heads side by side again
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
        x = x + self.mlp(self.ln_2(x))
        return x, present


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304  # GPT-2's 50257, padded up to a multiple of 64
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True  # biases in the Linears and LayerNorms, as GPT-2; False is a bit better and faster


class GPT(nn.Module):

    def __init__(self, config):
        super().__init__()
        assert config.vocab_size is not None
        assert config.block_size is not None
        self.config = config

        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # the token embedding and the output projection share one matrix (weight tying)
        self.transformer.wte.weight = self.lm_head.weight

        self.apply(self._init_weights)
        # GPT-2's scaled init of the projections into the residual stream
        for name, parameter in self.named_parameters():
            if name.endswith('c_proj.weight'):
                torch.nn.init.normal_(parameter, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

        print("number of parameters: %.2fM" % (self.get_num_params() / 1e6,))

    def get_num_params(self, non_embedding=True):
        """The parameter count; without the position embeddings by default (the token embeddings are counted: they
        are lm_head's weights too)."""
        n_params = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n_params -= self.transformer.wpe.weight.numel()
        return n_params

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None, past_key_values=None):
        """Logits (and the loss, given targets). With `past_key_values` (one (keys, values) per layer, for the
        positions before idx's) idx's tokens are numbered after them; the third value returned is the keys and
        values of every position so far, per layer."""
        device = idx.device
        b, t = idx.size()
        start = 0 if past_key_values is None else past_key_values[0][0].size(2)
        assert start + t <= self.config.block_size, \
            f"Cannot forward sequence of length {start + t}, block size is only {self.config.block_size}"
        pos = torch.arange(start, start + t, dtype=torch.long, device=device)

        tok_emb = self.transformer.wte(idx)  # (b, t, n_embd)
        pos_emb = self.transformer.wpe(pos)  # (t, n_embd)
        x = self.transformer.drop(tok_emb + pos_emb)
        presents = []
        for i, block in enumerate(self.transformer.h):
            x, present = block(x, None if past_key_values is None else past_key_values[i])
            presents.append(present)
        x = self.transformer.ln_f(x)

        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            # generation needs the last position's logits only (a list index keeps the time dimension)
            logits = self.lm_head(x[:, [-1], :])
            loss = None

        return logits, loss, tuple(presents)

    def crop_block_size(self, block_size):
        """A smaller block size than the checkpoint's (GPT-2's 1024): the position embeddings and masks cut down."""
        assert block_size <= self.config.block_size
        self.config.block_size = block_size
        self.transformer.wpe.weight = nn.Parameter(self.transformer.wpe.weight[:block_size])
        for block in self.transformer.h:
            if hasattr(block.attn, 'bias'):
                block.attn.bias = block.attn.bias[:, :, :block_size, :block_size]

    @classmethod
    def from_pretrained(cls, model_type, override_args=None):
        """OpenAI's GPT-2 weights, from Hugging Face's transformers (imported here alone: nothing else needs it)."""
        assert model_type in {'gpt2', 'gpt2-medium', 'gpt2-large', 'gpt2-xl'}
        override_args = override_args or {}
        assert all(k == 'dropout' for k in override_args)  # dropout is all that may differ from the checkpoint's
        from transformers import GPT2LMHeadModel
        print("loading weights from pretrained gpt: %s" % model_type)

        config_args = {
            'gpt2': dict(n_layer=12, n_head=12, n_embd=768),  # 124M parameters
            'gpt2-medium': dict(n_layer=24, n_head=16, n_embd=1024),  # 350M
            'gpt2-large': dict(n_layer=36, n_head=20, n_embd=1280),  # 774M
            'gpt2-xl': dict(n_layer=48, n_head=25, n_embd=1600),  # 1558M
        }[model_type]
        config_args.update(vocab_size=50257, block_size=1024, bias=True)  # every GPT-2 checkpoint's
        if 'dropout' in override_args:
            config_args['dropout'] = override_args['dropout']
        model = GPT(GPTConfig(**config_args))
        sd = model.state_dict()
        sd_keys = [k for k in sd if not k.endswith('.attn.bias')]  # a mask, not a parameter

        hf = GPT2LMHeadModel.from_pretrained(model_type).state_dict()
        hf_keys = [k for k in hf if not k.endswith(('.attn.masked_bias', '.attn.bias'))]
        # OpenAI's checkpoints keep these as Conv1D weights, (in, out): a Linear's are their transpose
        conv1d = ('attn.c_attn.weight', 'attn.c_proj.weight', 'mlp.c_fc.weight', 'mlp.c_proj.weight')
        assert len(hf_keys) == len(sd_keys), f"mismatched keys: {len(hf_keys)} != {len(sd_keys)}"
        for k in hf_keys:
            with torch.no_grad():
                if k.endswith(conv1d):
                    assert hf[k].shape[::-1] == sd[k].shape
                    sd[k].copy_(hf[k].t())
                else:
                    assert hf[k].shape == sd[k].shape
                    sd[k].copy_(hf[k])
        return model

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        """AdamW with weight decay on the matrices (every parameter of 2 or more dimensions) and none on the
        biases and LayerNorm gains; fused where the device is CUDA and this PyTorch has it."""
        params = {name: p for name, p in self.named_parameters() if p.requires_grad}
        decay_params = [p for p in params.values() if p.dim() >= 2]
        nodecay_params = [p for p in params.values() if p.dim() < 2]
        optim_groups = [
            {'params': decay_params, 'weight_decay': weight_decay},
            {'params': nodecay_params, 'weight_decay': 0.0},
        ]
        print(f"num decayed parameter tensors: {len(decay_params)}, with {sum(p.numel() for p in decay_params):,} "
              "parameters")
        print(f"num non-decayed parameter tensors: {len(nodecay_params)}, with "
              f"{sum(p.numel() for p in nodecay_params):,} parameters")
        use_fused = 'fused' in inspect.signature(torch.optim.AdamW).parameters and device_type == 'cuda'
        extra_args = dict(fused=True) if use_fused else dict()
        optimizer = torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)
        print(f"using fused AdamW: {use_fused}")
        return optimizer

    def estimate_mfu(self, fwdbwd_per_iter, dt):
        """Model flops utilization: the flops a training iteration does (PaLM's appendix B count) per second,
        as a share of an A100's bfloat16 peak (312 TFLOPS)."""
        N = self.get_num_params()
        cfg = self.config
        L, H, Q, T = cfg.n_layer, cfg.n_head, cfg.n_embd // cfg.n_head, cfg.block_size
        flops_per_token = 6 * N + 12 * L * H * Q * T
        flops_per_iter = flops_per_token * T * fwdbwd_per_iter
        flops_achieved = flops_per_iter * (1.0 / dt)
        flops_promised = 312e12
        return flops_achieved / flops_promised

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, use_cache=True):
        """idx (b, t) extended by max_new_tokens tokens, each sampled from the model's next-token distribution
        (top_k=1: greedy). use_cache keeps the keys and values of the positions already seen. Call model.eval()
        first, for dropout."""
        past = None
        for _ in range(max_new_tokens):
            if not use_cache or past is None or past[0][0].size(2) >= self.config.block_size:
                # No cache yet, or it is full: the (cropped) context from scratch, as uncached generation does.
                past = None
                idx_cond = idx if idx.size(1) <= self.config.block_size else idx[:, -self.config.block_size:]
            else:
                idx_cond = idx[:, -1:]
            logits, _, presents = self(idx_cond, past_key_values=past)
            past = presents if use_cache else None
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float('Inf')
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx
