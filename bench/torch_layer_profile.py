#!/usr/bin/python3
"""PyTorch side of bench/layer_profile.sh: where one CPU training step of a peer network spends its time.

    ONEDNN_VERBOSE=1 python3 bench/torch_layer_profile.py --net alexnet --batch 40 --steps 5 --warmup 2 \
        --json_out out.json

The network, input, loss and optimizer are bench/ddp_peer.py's with --method none (the compute-only peer of the
link benchmark): torch.set_num_threads(1), SGD momentum 0.9, weight decay 5e-4, fixed random inputs. After the
warm-up steps it times --steps plain steps (perf_counter; their median is the step time), then runs the same
number of steps under torch.profiler and reports each operator's self CPU time per step, grouped by operator
name and input shapes (forward operators such as aten::mkldnn_convolution and aten::addmm, backward ones such
as aten::convolution_backward). oneDNN's own per-primitive lines (ONEDNN_VERBOSE=1, on stdout) carry the split
of a convolution's backward into backward-data and backward-weights; layer_profile.py reads both.

Writes one JSON object: net, batch, steps, median_s (the plain steps), torch version, and "ops": a list of
{name, shapes, ms_per_step, calls_per_step}, largest first.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_peer import build  # noqa: E402  (the networks of the link benchmark)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--net", required=True, choices=["lenet", "alexnet", "resnet50"])
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, default=5, help="timed steps, then as many profiled ones")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--json_out", required=True)
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.batch < 1:
        ap.error("--steps and --batch must be >= 1, --warmup >= 0")

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, size, channels, classes = build(args.net, False)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, weight_decay=5e-4)
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(args.batch, channels, size, size, generator=gen) * 2 - 1
    y = torch.randint(0, classes, (args.batch,), generator=gen)

    def step():
        opt.zero_grad(set_to_none=False)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    secs = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        secs.append(time.perf_counter() - t0)
    print("# profiled steps begin", flush=True)  # oneDNN's lines after this one are the profiled steps'
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(args.steps):
            step()
    ops = []
    for e in prof.key_averages(group_by_input_shape=True):
        if e.self_cpu_time_total <= 0:
            continue
        ops.append({"name": e.key, "shapes": str(e.input_shapes), "ms_per_step": e.self_cpu_time_total / 1e3 / args.steps,
                    "calls_per_step": e.count / args.steps})
    ops.sort(key=lambda o: -o["ms_per_step"])
    out = {"net": args.net, "batch": args.batch, "steps": args.steps, "median_s": statistics.median(secs),
           "torch": torch.__version__, "ops": ops}
    with open(args.json_out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
