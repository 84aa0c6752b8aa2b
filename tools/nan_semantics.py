#!/usr/bin/env python3
"""Lists what PyTorch's elementwise functions give for NaN and the
infinities, one character per element of x = [nan, inf, -inf, -0, 1, -1]:
'n' NaN, '+' +inf, '-' -inf, 'f' finite. tests/nan_propagation_test.cc
holds these strings (the test does not need torch). Run with the system
python that has python3-torch: /usr/bin/python3 tools/nan_semantics.py"""
import torch
import torch.nn.functional as F

NAN, INF = float("nan"), float("inf")


def kinds(t):
    out = ""
    for v in t.tolist():
        out += "n" if v != v else ("+" if v == INF else ("-" if v == -INF else "f"))
    return out


FUNCTIONS = {
    "relu": torch.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
    "silu": F.silu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu6": F.relu6,
    "hard_sigmoid": F.hardsigmoid,
    "hard_silu": F.hardswish,
    "leaky_relu": lambda t: F.leaky_relu(t, 0.3),
    "elu": F.elu,
    "selu": F.selu,
    "softplus": F.softplus,
    "softsign": F.softsign,
    "mish": F.mish,
    "exp": torch.exp,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "square": torch.square,
    "abs": torch.abs,
    "soft_cap": lambda t: 2 * torch.tanh(t / 2),
    "scale": lambda t: 2 * t,
}


def main():
    x = torch.tensor([NAN, INF, -INF, -0.0, 1.0, -1.0])
    for name, f in FUNCTIONS.items():
        print(f"{name:14s} {kinds(f(x))}")
    row = torch.tensor([[1.0, NAN, 2.0], [1.0, 2.0, 3.0]])
    print("softmax rows  ", [kinds(r) for r in torch.softmax(row, -1)])
    print("max_pool1d    ", kinds(F.max_pool1d(torch.tensor([[[1.0, NAN, 2.0, 3.0, 5.0, 4.0]]]), 2)[0, 0]))
    print("dropout(nan)  ", kinds(F.dropout(torch.full((8,), NAN), 0.5, True)))
    print("clamp         ", kinds(torch.clamp(x, 1e-7, 1 - 1e-7)))


if __name__ == "__main__":
    main()
