#!/usr/bin/python3
"""PyTorch peers of bench/train_step_bench.cc: images/sec of one full CPU training step (forward + backward +
momentum SGD update) of the same networks at the same input sizes, batches and thread counts.

    python3 bench/pytorch_peers.py --net lenet --threads 1 [--batch 64] [--min_time 2] [--precision bf16] [--json]

--precision bf16: forward and loss under torch.autocast("cpu", torch.bfloat16) (PyTorch's CPU mixed precision:
bf16 convolutions and matrix products, fp32 parameters and optimizer), the peer of terngrad-train --precision bf16.

Networks (NCHW, PyTorch's layout):
  lenet         models/lenet.cc: conv 5x5 20 pad 2 relu, maxpool 2, conv 5x5 50 pad 2 relu, maxpool 2,
                fc 2450->500 relu, fc 500->10
  cifarnet      models/cifarnet.cc (TF CIFAR-10 tutorial net): conv 5x5 64 relu, maxpool 3/2, LRN, conv 5x5 64
                relu, LRN, maxpool 3/2, fc 2304->384->192->10
  alexnet       models/alexnet.cc (the reference's two-tower AlexNet, BN on every conv, LRN, dropout, 1001
                classes)
  resnet50      torchvision.models.resnet50(num_classes=1001) (v1.5, as ours)
  inception_v3  torchvision.models.inception_v3(num_classes=1001, aux_logits=True), aux loss weight 0.4,
                label smoothing 0.1 (as the reference)
Loss: softmax cross-entropy (mean); optimizer: torch.optim.SGD(momentum=0.9, weight_decay=wd), whose cost
matches our momentum update plus the weight-decay gradient. Inputs are fixed random tensors.
--steps K times exactly K steps after the warm-up; --ema D also keeps a moving average of the weights and BN
statistics (AveragedModel, decay D, updated every step) as terngrad-train does (bench/memory_bench.sh).
Prints one line: "<net> threads=<t> batch=<b> images/s=<rate> steps=<k> step_s_median=<s> maxrss_mb=<MB>" (or JSON
with --json).
"""
import argparse
import json
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class LeNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, 5, padding=2)
        self.conv2 = nn.Conv2d(20, 50, 5, padding=2)
        self.fc3 = nn.Linear(7 * 7 * 50, 500)
        self.logits = nn.Linear(500, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)  # (N, 20, 14, 14)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # (N, 50, 7, 7)
        x = F.relu(self.fc3(torch.flatten(x, 1)))
        return self.logits(x)


def tf_lrn(depth_radius, bias, alpha, beta):
    # TF's alpha multiplies the plain sum of squares; PyTorch's LocalResponseNorm divides alpha by the size.
    size = 2 * depth_radius + 1
    return nn.LocalResponseNorm(size, alpha=alpha * size, beta=beta, k=bias)


class CifarNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 5, padding=2)
        self.pool1 = nn.MaxPool2d(3, 2, padding=1)  # 24 -> 12 (TF SAME)
        self.lrn1 = tf_lrn(4, 1.0, 0.001 / 9, 0.75)
        self.conv2 = nn.Conv2d(64, 64, 5, padding=2)
        self.lrn2 = tf_lrn(4, 1.0, 0.001 / 9, 0.75)
        self.pool2 = nn.MaxPool2d(3, 2, padding=1)  # 12 -> 6
        self.fc3 = nn.Linear(6 * 6 * 64, 384)
        self.fc4 = nn.Linear(384, 192)
        self.logits = nn.Linear(192, num_classes)

    def forward(self, x):
        x = self.lrn1(self.pool1(F.relu(self.conv1(x))))
        x = self.pool2(self.lrn2(F.relu(self.conv2(x))))
        x = F.relu(self.fc3(torch.flatten(x, 1)))
        x = F.relu(self.fc4(x))
        return self.logits(x)


def conv_bn_relu(cin, cout, k, stride=1, pad=None):
    # TF SAME padding; for the odd total (conv1: 11x11/4 on 224) the extra pixel goes after, as in TF.
    layers = []
    if pad is None:
        layers.append(nn.Conv2d(cin, cout, k, stride, padding=k // 2, bias=False))
    else:
        layers += [nn.ZeroPad2d(pad), nn.Conv2d(cin, cout, k, stride, bias=False)]
    layers += [nn.BatchNorm2d(cout, eps=0.001), nn.ReLU(inplace=True)]
    return nn.Sequential(*layers)


class AlexNetTower(nn.Module):
    """One of the reference's two towers up to pool2 (each tower reads the full image)."""

    def __init__(self):
        super().__init__()
        self.conv1 = conv_bn_relu(3, 48, 11, 4, pad=(3, 4, 3, 4))  # 224 -> 56
        self.lrn1 = tf_lrn(2, 2.0, 1e-4, 0.75)
        self.conv2 = conv_bn_relu(48, 128, 5)
        self.lrn2 = tf_lrn(2, 2.0, 1e-4, 0.75)

    def forward(self, x):
        x = F.max_pool2d(self.lrn1(self.conv1(x)), 3, 2)  # (N, 48, 27, 27)
        return F.max_pool2d(self.lrn2(self.conv2(x)), 3, 2)  # (N, 128, 13, 13)


class AlexNet(nn.Module):
    def __init__(self, num_classes=1001, keep_prob=0.5):
        super().__init__()
        self.tower1, self.tower2 = AlexNetTower(), AlexNetTower()
        self.conv3 = nn.ModuleList([conv_bn_relu(256, 192, 3) for _ in range(2)])
        self.conv4 = nn.ModuleList([conv_bn_relu(192, 192, 3) for _ in range(2)])
        self.conv5 = nn.ModuleList([conv_bn_relu(192, 128, 3) for _ in range(2)])
        self.fc6 = nn.Linear(6 * 6 * 256, 4096)
        self.fc7 = nn.Linear(4096, 4096)
        self.logits = nn.Linear(4096, num_classes)
        self.drop = nn.Dropout(1 - keep_prob)

    def forward(self, x):
        x = torch.cat([self.tower1(x), self.tower2(x)], 1)  # (N, 256, 13, 13)
        branches = [F.max_pool2d(self.conv5[i](self.conv4[i](self.conv3[i](x))), 3, 2) for i in range(2)]
        x = torch.flatten(torch.cat(branches, 1), 1)  # (N, 9216)
        x = self.drop(F.relu(self.fc6(x)))
        x = self.drop(F.relu(self.fc7(x)))
        return self.logits(x)


# name -> (builder, image size, channels, default batch, weight decay, label smoothing)
NETS = {
    "lenet": (lambda: LeNet(10), 28, 1, 64, 5e-4, 0.0),
    "cifarnet": (lambda: CifarNet(10), 24, 3, 128, 5e-4, 0.0),
    "alexnet": (lambda: AlexNet(1001), 224, 3, 8, 5e-4, 0.0),
    "resnet50": (lambda: __import__("torchvision").models.resnet50(num_classes=1001), 224, 3, 8, 5e-4, 0.0),
    "inception_v3": (lambda: __import__("torchvision").models.inception_v3(
        num_classes=1001, aux_logits=True, init_weights=True), 299, 3, 8, 5e-4, 0.1),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--net", default="lenet", choices=sorted(NETS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=0, help="0: the network's default")
    ap.add_argument("--min_time", type=float, default=2.0, help="seconds of timed steps (at least 3 steps)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--steps", type=int, default=0, help="exactly this many timed steps (instead of --min_time)")
    ap.add_argument("--ema", type=float, default=0.0,
                    help="also keep a moving average of the weights and BN statistics with this decay "
                         "(torch.optim.swa_utils.AveragedModel, updated every step), as terngrad-train keeps one")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    build, size, channels, default_batch, wd, smoothing = NETS[args.net]
    batch = args.batch or default_batch
    model = build().train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, weight_decay=wd)
    ema = None
    if args.ema > 0:
        from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
        ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(args.ema), use_buffers=True)
    x = torch.rand(batch, channels, size, size) * 2 - 1
    y = torch.randint(0, 1001 if size >= 224 else 10, (batch,))

    def step():
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            out = model(x)
        out = tuple(o.float() for o in out) if isinstance(out, tuple) else out.float()  # the loss in fp32
        if isinstance(out, tuple):  # inception_v3 in training mode: (logits, aux_logits)
            loss = F.cross_entropy(out[0], y, label_smoothing=smoothing) + \
                0.4 * F.cross_entropy(out[1], y, label_smoothing=smoothing)
        else:
            loss = F.cross_entropy(out, y, label_smoothing=smoothing)
        loss.backward()
        opt.step()
        if ema is not None:
            ema.update_parameters(model)
        return loss

    for _ in range(args.warmup):
        step()
    steps, start, times = 0, time.perf_counter(), []
    while True:
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
        steps += 1
        elapsed = time.perf_counter() - start
        if (args.steps and steps >= args.steps) or (not args.steps and steps >= 3 and elapsed >= args.min_time):
            break
    rate = steps * batch / elapsed
    step_s = statistics.median(times)
    maxrss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if args.json:
        print(json.dumps({"net": args.net, "threads": args.threads, "batch": batch, "images_per_sec": rate,
                          "steps": steps, "step_s_median": step_s, "maxrss_mb": maxrss_mb,
                          "precision": args.precision, "torch": torch.__version__}))
    else:
        print(f"{args.net} threads={args.threads} batch={batch} precision={args.precision} images/s={rate:.2f} "
              f"steps={steps} step_s_median={step_s:.4f} maxrss_mb={maxrss_mb:.1f}")


if __name__ == "__main__":
    main()
