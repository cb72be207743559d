#!/usr/bin/env python3
"""The layering rule of docs/design.md ("The layers"), checked: every project #include must point to the file's own room or
to a room below it (apps -> export/import -> train -> {comm, compress, optim, nn/models, data} -> backend -> core).
Prints one line per violation (file:line: room includes room/header) and exits 1 if there is any.
Usage: scripts/check_includes.py [REPO_ROOT]"""
import os
import re
import sys

# room -> rooms it may include (besides itself); "math" is the shared host/device math beside core.
BELOW = {
    "core": set(),
    "math": {"core"},
    "backend": {"core", "math"},
    "kernels": {"core", "math", "backend"},
    "nn": {"core", "math", "backend"},
    "models": {"core", "math", "backend", "nn"},
    "optim": {"core", "math", "backend"},
    "compress": {"core", "math", "backend"},
    "comm": {"core", "math", "backend"},
    # The exchange strings the codec (compress) and the communicators together (README, design section).
    "exchange": {"core", "math", "backend", "compress", "comm"},
    "data": {"core"},
    "train": {"core", "math", "backend", "nn", "models", "optim", "compress", "comm", "exchange", "data"},
    # The ONNX exporter (terngrad-export) reads checkpoints and nets: above train, below the apps.
    "export": {"core", "math", "backend", "nn", "models", "optim", "compress", "comm", "exchange", "data", "train"},
    # The PyTorch importer (terngrad-import) writes checkpoints of the nets: beside the exporter.
    "import": {"core", "math", "backend", "nn", "models", "optim", "compress", "comm", "exchange", "data", "train"},
    "apps": {"core", "math", "backend", "nn", "models", "optim", "compress", "comm", "exchange", "data", "train", "export",
             "import"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def room_of_file(rel):
    parts = rel.split("/")
    if parts[0] == "kernels":
        return "kernels"
    if parts[0] == "models":
        return "models"
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    if parts[:2] == ["include", "terngrad"] and len(parts) > 3:
        return parts[2]
    return None


def room_of_include(inc):
    parts = inc.split("/")
    if parts[0] == "terngrad" and len(parts) > 2:
        return parts[1]
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    if parts[0] in ("kernels", "models"):
        return parts[0]
    return None  # system, generated (event.pb.h) or same-folder headers


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    bad = 0
    for top in ("src", "include", "kernels", "models"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith((".h", ".cc", ".cu", ".cuh")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, f), root)
                room = room_of_file(rel)
                if room is None:
                    continue
                if room not in BELOW:
                    print(f"{rel}: room '{room}' is not in the layering table of scripts/check_includes.py")
                    bad += 1
                    continue
                with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
                    for n, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = room_of_include(m.group(1))
                        if target is None or target == room or target in BELOW[room]:
                            continue
                        print(f"{rel}:{n}: {room} includes {m.group(1)} ({target} is not below {room})")
                        bad += 1
    if bad:
        print(f"check_includes: {bad} include(s) break the layering (apps -> train -> comm/compress/optim/nn/data "
              "-> backend -> core)")
        return 1
    print("check_includes: every project include points to its own room or below")
    return 0


if __name__ == "__main__":
    sys.exit(main())
