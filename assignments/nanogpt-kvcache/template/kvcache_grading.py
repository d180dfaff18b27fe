"""The grader's adapter for nanogpt-kvcache: your model.py's GPT, run by the grader. Do not edit it: the grader
replaces it with its own copy (the assignment's `provided` file), whatever your repository holds.

Each kernel builds your GPT from model.py with the case's small config (GPTConfig(n_layer=..., n_head=...,
n_embd=..., block_size=..., vocab_size=..., dropout=0.0, bias=True)), sets every parameter to deterministic
random values (seeded per parameter name: no checkpoint), and runs greedy generation (top_k=1) from the case's
prompt, on the GPU where the harness sees one (CUDA), else on the CPU, in float32 (TF32 off).

- cached_generation: generate with your cache on; writes the tokens (prompt and new ones) and, for each new token,
  the logits it was chosen from (lm_head's output at the last position, read by a hook on model.lm_head).
- uncached_generation: the same with the cache off (the original generation must still work).
- cache_evidence: generate with the cache on, and the most positions one step after the first fed the model
  (model.transformer.wte's input, read by a hook): 1 with a cache, the whole context without one.

How the cache is switched (the first that fits): a `use_cache`, `use_kv_cache` or `kv_cache` parameter of
GPT.generate; else a GPTConfig field of one of those names. Neither: the cached kernels fail with that said.
"""

import dataclasses
import inspect
import zlib

import torch

import model as student

SWITCHES = ("use_cache", "use_kv_cache", "kv_cache")
SEED = 1234


def device():
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def switch():
    """("generate" | "config", name) where the cache is switched, else None."""
    parameters = inspect.signature(student.GPT.generate).parameters
    for name in SWITCHES:
        if name in parameters:
            return "generate", name
    fields = {f.name for f in dataclasses.fields(student.GPTConfig)} if dataclasses.is_dataclass(
        student.GPTConfig) else set(vars(student.GPTConfig))
    for name in SWITCHES:
        if name in fields:
            return "config", name
    return None


def built(n_layer, n_head, n_embd, block_size, vocab_size, cached):
    """The student's GPT on the device, its parameters set from SEED, and generate's extra keyword arguments."""
    where = switch()
    if cached and where is None:
        raise TypeError("model.py has no cache switch: give GPT.generate a `use_cache` parameter (or "
                        f"use_kv_cache, kv_cache), or GPTConfig such a field (tried {', '.join(SWITCHES)})")
    settings = dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size, vocab_size=vocab_size,
                    dropout=0.0, bias=True)
    if where is not None and where[0] == "config":
        settings[where[1]] = bool(cached)
    torch.manual_seed(SEED)
    model = student.GPT(student.GPTConfig(**settings))
    with torch.no_grad():
        for name, parameter in sorted(model.named_parameters()):
            generator = torch.Generator().manual_seed(SEED + zlib.crc32(name.encode()))
            if parameter.dim() == 1:  # LayerNorm's weight near 1, biases near 0
                base = 1.0 if name.endswith("weight") else 0.0
                values = base + 0.1 * torch.randn(parameter.shape, generator=generator)
            else:  # 1/sqrt(fan-in): activations of unit scale, logits far apart enough to be argmax-stable
                values = torch.randn(parameter.shape, generator=generator) / parameter.shape[-1] ** 0.5
            parameter.copy_(values)
    model = model.to(device()).eval()
    extra = {where[1]: bool(cached)} if where is not None and where[0] == "generate" else {}
    return model, extra


def greedy(prompt, tokens, logits, batch, prompt_len, new_tokens, sizes, cached):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model, extra = built(*sizes, cached)
    steps = []
    hook = model.lm_head.register_forward_hook(lambda module, args, out: steps.append(out[:, -1, :].float()))
    try:
        idx = torch.from_numpy(prompt.astype("int64")).to(device()).view(batch, prompt_len)
        out = model.generate(idx, new_tokens, temperature=1.0, top_k=1, **extra)
    finally:
        hook.remove()
    if tuple(out.shape) != (batch, prompt_len + new_tokens):
        raise ValueError(f"generate returned a tensor of shape {tuple(out.shape)}, expected "
                         f"{(batch, prompt_len + new_tokens)} (the prompt and {new_tokens} new tokens)")
    if len(steps) != new_tokens:
        raise ValueError(f"model.lm_head ran {len(steps)} times for {new_tokens} new tokens: the adapter reads each "
                         "new token's logits from lm_head, once per token")
    tokens[:] = out.cpu().numpy().astype(tokens.dtype).reshape(-1)
    logits[:] = torch.stack(steps, dim=1).cpu().numpy().reshape(-1)


def cached_generation(prompt, tokens, logits, batch, prompt_len, new_tokens, n_layer, n_head, n_embd, block_size,
                      vocab_size):
    greedy(prompt, tokens, logits, batch, prompt_len, new_tokens, (n_layer, n_head, n_embd, block_size, vocab_size),
           True)


def uncached_generation(prompt, tokens, logits, batch, prompt_len, new_tokens, n_layer, n_head, n_embd, block_size,
                        vocab_size):
    greedy(prompt, tokens, logits, batch, prompt_len, new_tokens, (n_layer, n_head, n_embd, block_size, vocab_size),
           False)


def cache_evidence(prompt, positions, batch, prompt_len, new_tokens, n_layer, n_head, n_embd, block_size,
                   vocab_size):
    model, extra = built(n_layer, n_head, n_embd, block_size, vocab_size, True)
    fed = []
    hook = model.transformer.wte.register_forward_hook(lambda module, args, out: fed.append(args[0].shape[-1]))
    try:
        idx = torch.from_numpy(prompt.astype("int64")).to(device()).view(batch, prompt_len)
        model.generate(idx, new_tokens, temperature=1.0, top_k=1, **extra)
    finally:
        hook.remove()
    if len(fed) < 2:
        raise ValueError(f"model.transformer.wte ran {len(fed)} time(s) for {new_tokens} new tokens: the adapter "
                         "counts the positions each step feeds the model there")
    positions[0] = max(fed[1:])
