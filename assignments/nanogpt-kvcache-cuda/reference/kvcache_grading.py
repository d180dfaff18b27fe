"""The grader's adapter for nanogpt-kvcache: your model.py's GPT, run by the grader. Do not edit it: the grader
replaces it with its own copy (the assignment's `provided` file), whatever your repository holds.

Each kernel builds your GPT from model.py with the case's small config (GPTConfig(n_layer=..., n_head=...,
n_embd=..., block_size=..., vocab_size=..., dropout=0.0, bias=True)), sets every parameter to deterministic
random values (seeded per parameter name: no checkpoint), and runs greedy generation (top_k=1) from the case's
prompt, on the GPU where the harness sees one (CUDA), else on the CPU, in float32 (TF32 off).

The truth is your own model's: nanoGPT's original generation loop, run by this file on your GPT with the cache
off: each step `logits = model(idx_cond)[0]` on the context cropped to its last block_size tokens, the next token
the argmax of the last position's logits. It is written beside your generation, in the same call
(`original_tokens`, `original_logits`), and the grader compares the two (`judged_against`): your model may differ
from nanoGPT's (GPT-2's tanh GELU, say); your cache must not change what it generates.

- cached_generation: your GPT.generate with the cache on; writes the new tokens and, for each, the logits it was
  chosen from (lm_head's output at the last position, read by a hook on model.lm_head).
- uncached_generation: the same with the cache off (your generate without the cache must still be the original).
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
# The truth of each input, computed once per harness: `grader time` calls a kernel many times on one case's inputs,
# and its warm-up call computes the truth, so that the timed calls time your generation alone.
_ORIGINAL = {}


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
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
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


def prompt_tensor(prompt, batch, prompt_len):
    return torch.from_numpy(prompt.astype("int64")).to(device()).view(batch, prompt_len)


def original(prompt, batch, prompt_len, new_tokens, sizes):
    """nanoGPT's original generation on the student's GPT, greedy, the cache off: (tokens, logits) of the new tokens,
    as NumPy arrays (batch, new_tokens) and (batch, new_tokens, vocab_size)."""
    key = (prompt.tobytes(), batch, prompt_len, new_tokens, sizes)
    if key not in _ORIGINAL:
        model, _ = built(*sizes, False)
        block_size = sizes[3]
        idx = prompt_tensor(prompt, batch, prompt_len)
        steps = []
        with torch.no_grad():
            for _ in range(new_tokens):
                out = model(idx if idx.size(1) <= block_size else idx[:, -block_size:])
                logits = (out[0] if isinstance(out, (tuple, list)) else out)[:, -1, :].float()
                steps.append(logits)
                idx = torch.cat((idx, logits.argmax(dim=-1, keepdim=True)), dim=1)
        _ORIGINAL[key] = (idx[:, prompt_len:].cpu().numpy(), torch.stack(steps, dim=1).cpu().numpy())
    return _ORIGINAL[key]


def greedy(prompt, batch, prompt_len, new_tokens, sizes, cached):
    """The student's generate, greedy (top_k=1): (tokens, logits) of the new tokens, as `original` gives them."""
    model, extra = built(*sizes, cached)
    steps = []
    hook = model.lm_head.register_forward_hook(lambda module, args, out: steps.append(out[:, -1, :].float()))
    try:
        idx = prompt_tensor(prompt, batch, prompt_len)
        out = model.generate(idx, new_tokens, temperature=1.0, top_k=1, **extra)
    finally:
        hook.remove()
    if tuple(out.shape) != (batch, prompt_len + new_tokens):
        raise ValueError(f"generate returned a tensor of shape {tuple(out.shape)}, expected "
                         f"{(batch, prompt_len + new_tokens)} (the prompt and {new_tokens} new tokens)")
    if not torch.equal(out[:, :prompt_len].to(idx.device, torch.int64), idx):
        raise ValueError(f"generate returned a tensor whose first {prompt_len} tokens per row are not the prompt: "
                         "it returns the prompt followed by the new tokens")
    if len(steps) != new_tokens:
        raise ValueError(f"model.lm_head ran {len(steps)} times for {new_tokens} new tokens: the adapter reads each "
                         "new token's logits from lm_head, once per token")
    return out[:, prompt_len:].cpu().numpy(), torch.stack(steps, dim=1).cpu().numpy()


def generation(prompt, generated, logits, original_tokens, original_logits, batch, prompt_len, new_tokens, sizes,
               cached):
    """The truth first (it takes no cache), then the student's generation; each written into its outputs."""
    truth_tokens, truth_logits = original(prompt, batch, prompt_len, new_tokens, sizes)
    tokens, steps = greedy(prompt, batch, prompt_len, new_tokens, sizes, cached)
    original_tokens[:] = truth_tokens.astype(original_tokens.dtype)
    original_logits[:] = truth_logits
    generated[:] = tokens.astype(generated.dtype)
    logits[:] = steps


def cached_generation(prompt, generated, logits, original_tokens, original_logits, batch, prompt_len, new_tokens,
                      n_layer, n_head, n_embd, block_size, vocab_size):
    generation(prompt, generated, logits, original_tokens, original_logits, batch, prompt_len, new_tokens,
               (n_layer, n_head, n_embd, block_size, vocab_size), True)


def uncached_generation(prompt, generated, logits, original_tokens, original_logits, batch, prompt_len, new_tokens,
                        n_layer, n_head, n_embd, block_size, vocab_size):
    generation(prompt, generated, logits, original_tokens, original_logits, batch, prompt_len, new_tokens,
               (n_layer, n_head, n_embd, block_size, vocab_size), False)


def cache_evidence(prompt, positions, batch, prompt_len, new_tokens, n_layer, n_head, n_embd, block_size,
                   vocab_size):
    model, extra = built(n_layer, n_head, n_embd, block_size, vocab_size, True)
    fed = []
    hook = model.transformer.wte.register_forward_hook(lambda module, args, out: fed.append(args[0].shape[-1]))
    try:
        model.generate(prompt_tensor(prompt, batch, prompt_len), new_tokens, temperature=1.0, top_k=1, **extra)
    finally:
        hook.remove()
    if len(fed) < 2:
        raise ValueError(f"model.transformer.wte ran {len(fed)} time(s) for {new_tokens} new tokens: the adapter "
                         "counts the positions each step feeds the model there")
    positions[0] = max(fed[1:])
