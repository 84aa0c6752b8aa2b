#!/usr/bin/env python3
"""PyTorch's side of bench/keras_layers.sh: the same training steps as
bench_keras_layers (forward, backward, SGD with momentum 0.9), f32, on the
given threads. Prints one JSON object like bench_keras_layers.

  resnet  ResNet-18 in its CIFAR shape, 32x32x3, no BatchNormalization,
          convolutions with biases (as bench/keras_layers.cc), channels
          first (PyTorch's native layout).
  lstm    Embedding(vocab, 512), a 2-layer nn.LSTM(512) batch-first,
          Linear(vocab) on every step, cross-entropy over the steps.
  gru     the same with a 2-layer nn.GRU(512).
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a = nn.Conv2d(cin, cout, 3, stride, 1)
        self.b = nn.Conv2d(cout, cout, 3, 1, 1)
        self.short = nn.Conv2d(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x):
        y = self.b(F.relu(self.a(x)))
        return F.relu(y + (self.short(x) if self.short is not None else x))


class ResNet18(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 64, 3, 1, 1)
        blocks, cin = [], 64
        for width in (64, 128, 256, 512):
            blocks += [Block(cin, width, 1 if width == 64 else 2), Block(width, width, 1)]
            cin = width
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(512, 10)

    def forward(self, x):
        x = self.blocks(F.relu(self.stem(x)))
        return self.head(x.mean(dim=(2, 3)))


class RecurrentLM(nn.Module):
    """Embedding, two recurrent layers (nn.LSTM or nn.GRU: PyTorch's GRU
    applies the reset gate after the recurrent product, as Keras's
    reset_after does), a Linear head on every step."""

    def __init__(self, vocab, units, cell):
        super().__init__()
        self.embed = nn.Embedding(vocab, units)
        self.rnn = cell(units, units, num_layers=2, batch_first=True)
        self.head = nn.Linear(units, vocab)

    def forward(self, x):
        y, _ = self.rnn(self.embed(x))
        return self.head(y)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["resnet", "lstm", "gru"], default="resnet")
    p.add_argument("--batch", type=int, default=0)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--units", type=int, default=512)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    batch = a.batch or (64 if a.model == "resnet" else 32)
    if a.model == "resnet":
        model = ResNet18()
        x = torch.randn(batch, 3, 32, 32)
        y = torch.randint(0, 10, (batch,))
    else:
        model = RecurrentLM(a.vocab, a.units, nn.GRU if a.model == "gru" else nn.LSTM)
        x = torch.randint(0, a.vocab, (batch, a.seq))
        y = torch.randint(0, a.vocab, (batch, a.seq))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        out = model(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(a.warmup):
        step()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    times.sort()
    print(json.dumps({"engine": "pytorch " + torch.__version__, "model": a.model, "batch": batch,
                      "threads": torch.get_num_threads(), "steps": a.steps,
                      "median_step_s": times[len(times) // 2], "min_step_s": times[0]}))


if __name__ == "__main__":
    main()
