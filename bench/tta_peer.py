#!/usr/bin/env python3
"""PyTorch DDP peer of bench/tta_bench.sh (time to accuracy): one data-parallel rank training LeNet on
Fashion-MNIST with the recipe of configs/fashion_mnist_lenet_fp32.ini, on the CPU, gloo backend, started once in
each emulated machine (network namespace), so its gradients cross the same shaped link as terngrad-train's.

    MASTER_ADDR=10.77.0.1 MASTER_PORT=29600 RANK=0 WORLD_SIZE=2 GLOO_SOCKET_IFNAME=tglink0 \
        /opt/terngrad-peers-venv/bin/python bench/tta_peer.py --method fp32 --steps 1875 --eval_every 75 \
        --seed 1 --json_out out.json
    python3 bench/tta_peer.py --method none --steps 50 --eval_every 25     # one process, no DDP (a check)

What it does, as ours does (each point checked against the C++):
  net        bench/pytorch_peers.py's LeNet = models/lenet.cc: conv 5x5x20 SAME (pad 2) ReLU, max pool 2/2,
             conv 5x5x50 SAME ReLU, max pool 2/2, fc 2450->500 ReLU, fc 500->10; weights drawn from a normal
             truncated at 2 standard deviations (TF's truncated_normal; stds 0.05, 0.05, 0.048, 0.0767), biases 0
             (ours draws from Philox, so the values differ, not the distribution)
  data       the idx files of Debian's dataset-fashion-mnist (--data_dir), each pixel (x / 255 - 0.5) * 2 as
             src/data/preprocess.cc's kMnist preprocessing (no augmentation), 28x28x1
  batches    --batch is the total over all ranks (64); every epoch a fresh permutation of the 60000 training
             images (torch.Generator seeded by --seed), cut into consecutive global batches; rank r trains on
             the r-th slice of each. (Ours shuffles through its input pipeline's buffer; both see each image once
             per epoch, in an order of their own.)
  loss       mean softmax cross-entropy over the rank's slice; DDP averages the ranks' gradients, so the update
             is that of the mean over the global batch, as ours
  optimizer  momentum 0.9 (acc = m acc + g; w -= lr acc: torch.optim.SGD without dampening is TF's update),
             weight decay 5e-4 on the weights only (the gradient of wd/2 |w|^2, as models/lenet.cc's layers:
             biases have none), learning rate 0.01 sqrt(1 - t / steps) at step t (0-based: ours' polynomial)
  EMA        the moving average terngrad-eval evaluates by default (--restore_avg_var true): after step t,
             ema -= (1 - d)(ema - w) with d = min(0.9999, (1 + t) / (10 + t)), starting from the initial weights
             (src/optim/moving_average.cc); the peer is evaluated on these averages too, so both are judged alike
  eval       every --eval_every steps and after the last, rank 0 counts top-1 over the 10000 test images with the
             averaged weights while the other ranks wait at a barrier; the clock is paused meanwhile (its time
             is reported apart, eval_s)
  clock      seconds of the training steps only (input slice, forward, backward with DDP's all-reduce or the
             comm hook, update, EMA), summed, as ours' step times: no start-up, no evaluation
Methods: fp32 (DDP's bucketed fp32 all-reduce), powersgd (torch.distributed.algorithms.ddp_comm_hooks
powerSGD_hook, PowerSGDState(matrix_approximation_rank=--powersgd_rank, start_powerSGD_iter=
--start_powersgd_iter, error feedback and warm start on: PyTorch's defaults), one bucket for all gradients as
bench/ddp_peer.py does on gloo), none (one process, no process group).
Rank 0 prints one JSON line (and writes it to --json_out): the curve [[step, seconds, accuracy], ...], train_s,
eval_s, final accuracy, wire bytes in and out of --iface over the run, parameters, torch version.
"""
import argparse
import gzip
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_io import emit_result, wire_bytes  # noqa: E402
from pytorch_peers import LeNet  # noqa: E402  (models/lenet.cc in PyTorch)

# models/lenet.cc's truncated-normal standard deviations per layer.
INIT_STD = {"conv1": 0.05, "conv2": 0.05, "fc3": 0.048, "logits": 0.0767}


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(magic & 0xFF)]
    offset = 4 + 4 * len(dims)
    return torch.frombuffer(bytearray(data[offset:]), dtype=torch.uint8).reshape(dims)


def idx_file(folder, name):
    for candidate in (os.path.join(folder, name + ".gz"), os.path.join(folder, name)):
        if os.path.exists(candidate):
            return candidate
    sys.exit("tta_peer: no %s(.gz) in %s (apt-get install dataset-fashion-mnist)" % (name, folder))


def load(folder, prefix):
    images = read_idx(idx_file(folder, prefix + "-images-idx3-ubyte"))
    labels = read_idx(idx_file(folder, prefix + "-labels-idx1-ubyte"))
    x = (images.to(torch.float32) / 255.0 - 0.5) * 2.0  # src/data/preprocess.cc, kMnist
    return x.unsqueeze(1).contiguous(), labels.to(torch.int64)



def init_lenet(model):
    with torch.no_grad():
        for name, module in model.named_children():
            std = INIT_STD[name]
            torch.nn.init.trunc_normal_(module.weight, mean=0.0, std=std, a=-2 * std, b=2 * std)
            module.bias.zero_()


class BatchStream:
    """Consecutive global batches over per-epoch permutations of the training set; this rank's slice of each."""

    def __init__(self, n, batch, rank, world, seed):
        self.n, self.batch, self.per_rank, self.rank = n, batch, batch // world, rank
        self.gen = torch.Generator().manual_seed(seed)
        self.order = torch.randperm(n, generator=self.gen)
        self.pos = 0

    def next(self):
        take = []
        need = self.batch
        while need > 0:
            if self.pos == self.n:
                self.order = torch.randperm(self.n, generator=self.gen)
                self.pos = 0
            k = min(need, self.n - self.pos)
            take.append(self.order[self.pos:self.pos + k])
            self.pos += k
            need -= k
        idx = torch.cat(take)
        return idx[self.rank * self.per_rank:(self.rank + 1) * self.per_rank]


def evaluate(eval_model, ema, x, y):
    with torch.no_grad():
        for p, avg in zip(eval_model.parameters(), ema):
            p.copy_(avg)
        correct = 0
        for i in range(0, x.shape[0], 1000):
            correct += (eval_model(x[i:i + 1000]).argmax(dim=1) == y[i:i + 1000]).sum().item()
    return correct / x.shape[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--method", default="fp32", choices=["fp32", "powersgd", "none"])
    ap.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist", help="the idx(.gz) files")
    ap.add_argument("--steps", type=int, default=1875)
    ap.add_argument("--batch", type=int, default=64, help="total over all ranks")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight_decay", type=float, default=5e-4)
    ap.add_argument("--ema_decay", type=float, default=0.9999)
    ap.add_argument("--eval_every", type=int, default=75)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--powersgd_rank", type=int, default=2)
    ap.add_argument("--start_powersgd_iter", type=int, default=0, help="0: 10%% of --steps (PyTorch's advice)")
    ap.add_argument("--iface", default="", help="network interface whose byte counters are read")
    ap.add_argument("--json_out", default="")
    args = ap.parse_args()
    if args.steps < 1 or args.eval_every < 1 or args.batch < 1:
        ap.error("--steps, --eval_every and --batch must be >= 1")

    torch.set_num_threads(args.threads)
    distributed = args.method != "none"
    if distributed:
        dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    if args.batch % world:
        sys.exit("tta_peer: --batch %d does not split over %d ranks" % (args.batch, world))

    torch.manual_seed(args.seed)
    model = LeNet(10)
    init_lenet(model)
    eval_model = LeNet(10).eval()
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    ddp = model
    start_iter = args.start_powersgd_iter or max(2, args.steps // 10)
    if distributed:
        from torch.nn.parallel import DistributedDataParallel as DDP
        # PowerSGD on gloo: one bucket keeps the hook's chained collectives in the same order on every rank
        # (bench/ddp_peer.py); LeNet's 5 MB of gradients fit in DDP's 25 MB bucket anyway.
        ddp = DDP(model, bucket_cap_mb=100000 if args.method == "powersgd" else 25)
        if args.method == "powersgd":
            from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
            state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=args.powersgd_rank,
                                                start_powerSGD_iter=start_iter)
            ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    opt = torch.optim.SGD([{"params": weights, "weight_decay": args.weight_decay},
                           {"params": biases, "weight_decay": 0.0}], lr=args.lr, momentum=args.momentum)
    ema = [p.detach().clone() for p in model.parameters()]

    train_x, train_y = load(args.data_dir, "train")
    test_x, test_y = load(args.data_dir, "t10k")
    stream = BatchStream(train_x.shape[0], args.batch, rank, world, args.seed)
    if distributed:
        dist.barrier()
    rx0, tx0 = wire_bytes(args.iface)
    train_s, eval_s, curve = 0.0, 0.0, []
    params = list(model.parameters())
    for t in range(args.steps):
        t0 = time.perf_counter()
        idx = stream.next()
        lr = args.lr * math.sqrt(1.0 - min(t, args.steps) / args.steps)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(ddp(train_x[idx]), train_y[idx])
        loss.backward()
        opt.step()
        d = min(args.ema_decay, (1.0 + t) / (10.0 + t))
        with torch.no_grad():
            torch._foreach_lerp_(ema, params, 1.0 - d)  # ema -= (1 - d)(ema - w)
        train_s += time.perf_counter() - t0
        done = t + 1
        if done % args.eval_every == 0 or done == args.steps:
            e0 = time.perf_counter()
            if rank == 0:
                acc = evaluate(eval_model, ema, test_x, test_y)
                curve.append([done, round(train_s, 6), acc])
            if distributed:
                dist.barrier()
            eval_s += time.perf_counter() - e0
            if rank == 0:
                print("step %d: %.1f s, loss %.4f, test accuracy (EMA) %.4f" % (done, train_s, loss.item(), acc),
                      file=sys.stderr, flush=True)
    rx1, tx1 = wire_bytes(args.iface)
    if rank == 0:
        out = {"method": args.method, "world": world, "steps": args.steps, "batch": args.batch, "seed": args.seed,
               "eval_every": args.eval_every, "train_s": train_s, "eval_s": eval_s, "curve": curve,
               "final_accuracy": curve[-1][2], "wire_rx": rx1 - rx0, "wire_tx": tx1 - tx0,
               "params": sum(p.numel() for p in params), "torch": torch.__version__,
               "powersgd_rank": args.powersgd_rank if args.method == "powersgd" else None,
               "start_powersgd_iter": start_iter if args.method == "powersgd" else None}
        emit_result(out, args.json_out)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
