#!/usr/bin/python3
"""PyTorch AMP peer of terngrad-train --precision fp16|bf16 on one GPU (scripts/gpu_check.sh, mixed-precision
section): images/sec of full training steps (forward, backward, momentum SGD update) of torchvision's
resnet50 / inception_v3 on synthetic data, as NVIDIA's and PyTorch's published AMP numbers are measured.

    python3 bench/torch_amp_peer.py --net resnet50 --batch 256 --precision fp16 bf16 [--warmup 5] [--steps 20]

Per precision: channels_last model and input, torch.autocast(device_type="cuda", dtype=fp16|bf16) around the
forward and the loss, torch.cuda.amp.GradScaler for fp16 (bf16 needs none), fp32 master parameters (autocast
keeps them fp32), SGD(momentum=0.9, weight_decay=4e-5, lr=0.1), torch.backends.cudnn.benchmark on (PyTorch's
usual setting; cuDNN autotunes during the warm-up). "fp32" runs without autocast (TF32 off, as terngrad's
default). inception_v3 takes 299x299 input with its auxiliary head (loss weight 0.4) and label smoothing 0.1;
resnet50 224x224. 1001 classes (the reference's). Warm-up steps are not timed; each timed step is measured with
CUDA events around it (the step's kernels, as terngrad's per-step rate measures its steps), and the rate reported
is the true median over the timed steps (the mean of the middle two for an even count), as scripts/gpu_check.sh
takes terngrad's.
Prints one line per precision: "torch_amp_peer <net> <precision> batch=<b> images/s=<median rate> steps=<k>
mean_images/s=<rate>". Without torch or a GPU it prints one line saying so and exits 0 (the caller's check is
skipped, not failed).
"""
import argparse
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--net", choices=["resnet50", "inception_v3"], required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--precision", nargs="+", choices=["fp32", "fp16", "bf16"], default=["fp16", "bf16"])
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    try:
        import torch
        import torch.nn.functional as F
        import torchvision
    except ImportError as e:
        print(f"torch_amp_peer: skipped: {e.name or e} is not installed")
        return 0
    if not torch.cuda.is_available():
        print("torch_amp_peer: skipped: torch sees no CUDA device")
        return 0

    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 as terngrad's default (no TF32)
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    size = 299 if a.net == "inception_v3" else 224
    if a.net == "inception_v3":
        model = torchvision.models.inception_v3(weights=None, num_classes=1001, aux_logits=True, init_weights=False)
    else:
        model = torchvision.models.resnet50(weights=None, num_classes=1001)
    model = model.to(dev, memory_format=torch.channels_last).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=4e-5)
    x = torch.full((a.batch, 3, size, size), 0.5, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1001, (a.batch,), device=dev)
    smoothing = 0.1 if a.net == "inception_v3" else 0.0

    def loss_of(out):
        if isinstance(out, tuple):  # inception_v3 in training: (logits, aux_logits)
            return F.cross_entropy(out[0], y, label_smoothing=smoothing) + 0.4 * F.cross_entropy(
                out[1], y, label_smoothing=smoothing)
        return F.cross_entropy(out, y, label_smoothing=smoothing)

    for precision in a.precision:
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": None}[precision]
        if dtype is torch.bfloat16 and not torch.cuda.is_bf16_supported():
            print(f"torch_amp_peer {a.net} bf16: skipped: this GPU has no bf16")
            continue
        use_scaler = dtype is torch.float16
        scaler = (torch.amp.GradScaler("cuda", enabled=use_scaler) if hasattr(torch.amp, "GradScaler") else
                  torch.cuda.amp.GradScaler(enabled=use_scaler))

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device_type="cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
                loss = loss_of(model(x))
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

        for _ in range(a.warmup):
            step()
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(a.steps)]
        t0 = time.perf_counter()
        for begin, end in events:
            begin.record()
            step()
            end.record()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        rates = sorted(a.batch * 1000.0 / b.elapsed_time(e) for b, e in events)
        print(f"torch_amp_peer {a.net} {precision} batch={a.batch} images/s={median(rates):.1f} steps={a.steps} "
              f"mean_images/s={a.batch * a.steps / wall:.1f}", flush=True)
    return 0


def median(values):
    """The true median: the middle value, or the mean of the middle two for an even count."""
    v = sorted(values)
    k = len(v) // 2
    return v[k] if len(v) % 2 else (v[k - 1] + v[k]) / 2


if __name__ == "__main__":
    sys.exit(main())
