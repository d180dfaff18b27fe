"""The grader's adapter for contextual-sparsity (provided: the grader's copy replaces yours; do not edit).

The grader calls kernels with C-style signatures, arrays in and outputs written in place (host NumPy arrays). This
module is those kernels: it builds the pack's model (sparsity_models.py) from the case's weights, in float64, on the
GPU where PyTorch sees one (else the CPU), calls your sparsity/topk.py on a tensor of the case's inputs, and copies
what it returns back:

- classifier_logits: topk_forward(model, x, k), x of shape (batch, D_IN): the logits, (batch, CLASSES);
- classifier_accuracy: topk_forward(model, x, k) on the held-out set for each k of `ks` (k/width 1/16 .. 1): the
  fraction of samples whose largest logit is their label's, and k/width (the report draws one against the
  other);
- gpt2_mlp_topk: topk_mlp_forward(mlp, x, k), x of shape (batch, T, C): the block's output, (batch, T, C);
- gpt2_attention_topk_heads: topk_attention_forward(attn, x, k), x of shape (batch, T, C): the attention's output
  with k of its n_head heads kept per token, (batch, T, C).
"""

import numpy as np
import torch

from sparsity import topk as student
from sparsity_models import CLASSES, D_IN, GPT2_C, WIDTH, GPT2Attention, GPT2MLP, MLPClassifier

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def tensor(array: np.ndarray, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.from_numpy(np.array(array, dtype=np.float64).reshape(shape)).to(DEVICE)


def classifier(w1, b1, w2, b2, w3, b3) -> MLPClassifier:
    model = MLPClassifier().to(device=DEVICE, dtype=torch.float64).eval()
    with torch.no_grad():
        for layer, (w, b) in zip([*model.hidden, model.out], [(w1, b1), (w2, b2), (w3, b3)]):
            layer.weight.copy_(tensor(w, tuple(layer.weight.shape)))
            layer.bias.copy_(tensor(b, tuple(layer.bias.shape)))
    return model


def returned(result: object, shape: tuple[int, ...], name: str) -> np.ndarray:
    """The student's result on the host as float64 of `shape`, or an error that says what it was instead."""
    if not isinstance(result, torch.Tensor):
        raise TypeError(f"{name} returned {type(result).__module__}.{type(result).__name__}; it must return a "
                        f"torch.Tensor of shape {shape}")
    if tuple(result.shape) != shape:
        raise ValueError(f"{name} returned a tensor of shape {tuple(result.shape)}; expected {shape}")
    return result.detach().to("cpu", torch.float64).numpy()


def classifier_logits(x, w1, b1, w2, b2, w3, b3, logits, batch, k):
    model = classifier(w1, b1, w2, b2, w3, b3)
    with torch.no_grad():
        found = student.topk_forward(model, tensor(x, (batch, D_IN)), k)
    logits[:] = returned(found, (batch, CLASSES), "topk_forward").reshape(-1)


def classifier_accuracy(x, labels, ks, w1, b1, w2, b2, w3, b3, k_over_width, accuracy, n, n_k):
    model = classifier(w1, b1, w2, b2, w3, b3)
    rows = tensor(x, (n, D_IN))
    for i, k in enumerate(ks.tolist()):
        with torch.no_grad():
            found = returned(student.topk_forward(model, rows, int(k)), (n, CLASSES), "topk_forward")
        k_over_width[i] = k / WIDTH
        accuracy[i] = float(np.mean(found.argmax(axis=1) == labels))
        print(f"k = {k} of {WIDTH} (k/width {k / WIDTH:.4g}): accuracy {accuracy[i]:.4f}, on {DEVICE.type}")


def gpt2_mlp_topk(x, w_fc, b_fc, w_proj, b_proj, out, batch, T, k):
    mlp = GPT2MLP().to(device=DEVICE, dtype=torch.float64).eval()
    with torch.no_grad():
        mlp.c_fc.weight.copy_(tensor(w_fc, (4 * GPT2_C, GPT2_C)))
        mlp.c_fc.bias.copy_(tensor(b_fc, (4 * GPT2_C,)))
        mlp.c_proj.weight.copy_(tensor(w_proj, (GPT2_C, 4 * GPT2_C)))
        mlp.c_proj.bias.copy_(tensor(b_proj, (GPT2_C,)))
        found = student.topk_mlp_forward(mlp, tensor(x, (batch, T, GPT2_C)), k)
    out[:] = returned(found, (batch, T, GPT2_C), "topk_mlp_forward").reshape(-1)


def gpt2_attention_topk_heads(x, w_attn, b_attn, w_proj, b_proj, out, batch, T, k):
    attn = GPT2Attention().to(device=DEVICE, dtype=torch.float64).eval()
    with torch.no_grad():
        attn.c_attn.weight.copy_(tensor(w_attn, (3 * GPT2_C, GPT2_C)))
        attn.c_attn.bias.copy_(tensor(b_attn, (3 * GPT2_C,)))
        attn.c_proj.weight.copy_(tensor(w_proj, (GPT2_C, GPT2_C)))
        attn.c_proj.bias.copy_(tensor(b_proj, (GPT2_C,)))
        found = student.topk_attention_forward(attn, tensor(x, (batch, T, GPT2_C)), k)
    out[:] = returned(found, (batch, T, GPT2_C), "topk_attention_forward").reshape(-1)
