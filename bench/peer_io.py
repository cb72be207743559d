"""What the distributed PyTorch peers (ddp_peer.py, tta_peer.py) share with the benches that run them: the byte
counters of the emulated machine's link, and the one JSON line a run reports (printed, and written to --json_out)."""
import json


def wire_bytes(iface):
    """(rx, tx) bytes of network interface `iface` so far; (0, 0) without one."""
    if not iface:
        return 0, 0
    base = "/sys/class/net/%s/statistics/" % iface
    with open(base + "rx_bytes") as rx, open(base + "tx_bytes") as tx:
        return int(rx.read()), int(tx.read())


def emit_result(out, json_out=""):
    """Prints `out` as one JSON line and, with `json_out`, writes the same line to that file."""
    line = json.dumps(out)
    print(line, flush=True)
    if json_out:
        with open(json_out, "w") as f:
            f.write(line + "\n")
