#!/usr/bin/python3
"""PyTorch DDP peer of bench/link_bench.sh: one data-parallel rank of a CPU training run (gloo backend), started
once in each of the two network namespaces link_bench.sh makes, so the gradient all-reduce crosses the same
shaped veth link as terngrad-train's MPI traffic.

    MASTER_ADDR=10.77.0.1 MASTER_PORT=29533 RANK=0 WORLD_SIZE=2 GLOO_SOCKET_IFNAME=tglink0 \
        python3 bench/ddp_peer.py --net alexnet --batch 8 --method fp32 --steps 20 --warmup 3 --iface tglink0

Networks: lenet and alexnet are the definitions of bench/pytorch_peers.py, which match models/lenet.cc and
models/alexnet.cc (the reference's two-tower AlexNet with batch norm: the same parameter count as ours, so the
same gradient bytes); --torchvision_alexnet uses torchvision.models.alexnet(num_classes=1001) instead;
resnet50 is torchvision.models.resnet50(num_classes=1001). torch.set_num_threads(1); SGD momentum 0.9,
weight decay 5e-4; fixed random inputs and labels; per-rank batch --batch.

Methods (DDP communication hooks, torch.distributed.algorithms.ddp_comm_hooks):
  fp32      no hook: DDP's bucketed all-reduce of fp32 gradients (25 MB buckets, overlapped with backward)
  fp16      default_hooks.fp16_compress_hook (gradients cast to fp16 for the all-reduce)
  powersgd  powerSGD_hook.powerSGD_hook, PowerSGDState(matrix_approximation_rank=2, start_powerSGD_iter=2):
            compression from the second step on (the warm-up steps cover the uncompressed ones); all
            gradients in one bucket (see below), so no overlap with the backward
  none      the compute-only baseline: the same model, batch, optimizer and thread count without DDP and
            without a process group (no communication at all); link_bench.sh starts one in each namespace
            at once, pinned as the DDP ranks are, and each prints its own JSON line

Rank 0 (every process with --method none) prints one JSON line: net, method, batch, timed steps, median and mean s/step, parameters, gradient
bytes (fp32), and the bytes per timed step that crossed --iface (rx and tx, from
/sys/class/net/IFACE/statistics, read at step boundaries; `ip netns exec` mounts the namespace's sysfs).
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_io import emit_result, wire_bytes  # noqa: E402
from pytorch_peers import NETS  # noqa: E402  (the networks matching ours)



def build(net, torchvision_alexnet):
    if net == "alexnet" and torchvision_alexnet:
        import torchvision
        return torchvision.models.alexnet(num_classes=1001), 224, 3, 1001
    builder, size, channels, _, _, _ = NETS[net]
    return builder(), size, channels, (1001 if size >= 224 else 10)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--net", required=True, choices=["lenet", "alexnet", "resnet50"])
    ap.add_argument("--batch", type=int, required=True, help="per-rank batch")
    ap.add_argument("--method", default="fp32", choices=["fp32", "fp16", "powersgd", "none"])
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--iface", default="", help="network interface whose byte counters are read")
    ap.add_argument("--torchvision_alexnet", action="store_true")
    ap.add_argument("--json_out", default="", help="also write rank 0's JSON line to this file")
    ap.add_argument("--bucket_cap_mb", type=float, default=0,
                    help="DDP bucket size (0: DDP's 25, one bucket for powersgd)")
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.batch < 1:
        ap.error("--steps and --batch must be >= 1, --warmup >= 0")

    torch.set_num_threads(1)
    torch.manual_seed(0)
    distributed = args.method != "none"
    if distributed:
        dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank() if distributed else int(os.environ.get("RANK", "0"))
    model, size, channels, classes = build(args.net, args.torchvision_alexnet)
    # PowerSGD on gloo: with several buckets the hook's chained collectives are issued in the order their
    # futures fire, which differs between ranks (AlexNet in 25 MB buckets failed with "gloo enforce fail
    # op.preamble.length <= op.nbytes"); one bucket for every gradient keeps them in order.
    bucket_mb = args.bucket_cap_mb or (100000 if args.method == "powersgd" else 25)
    model = DDP(model.train(), bucket_cap_mb=bucket_mb) if distributed else model.train()
    state = None
    if args.method == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif args.method == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2,
                                            start_powerSGD_iter=2)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, weight_decay=5e-4)
    gen = torch.Generator().manual_seed(1 + rank)
    x = torch.rand(args.batch, channels, size, size, generator=gen) * 2 - 1
    y = torch.randint(0, classes, (args.batch,), generator=gen)

    def step():
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(x), y)
        loss.backward()  # DDP's all-reduce (or the hook) runs here, overlapped with the backward
        opt.step()

    for _ in range(args.warmup):
        step()
    if distributed:
        dist.barrier()
    rx0, tx0 = wire_bytes(args.iface)
    secs = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        secs.append(time.perf_counter() - t0)
    rx1, tx1 = wire_bytes(args.iface)
    if distributed:
        dist.barrier()
    if rank == 0 or not distributed:
        params = sum(p.numel() for p in model.parameters())
        out = {"net": args.net, "method": args.method, "batch": args.batch, "steps": args.steps, "bucket_cap_mb": bucket_mb,
               "median_s": statistics.median(secs), "mean_s": statistics.fmean(secs), "params": params,
               "grad_bytes": 4 * params, "wire_rx_per_step": (rx1 - rx0) / args.steps,
               "wire_tx_per_step": (tx1 - tx0) / args.steps, "torch": torch.__version__}
        emit_result(out, args.json_out)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
