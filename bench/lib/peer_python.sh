# peer_python.sh: which python runs the PyTorch peers of the benchmarks (ddp_peer.py, pytorch_peers.py,
# tta_peer.py). Sourced.
#   default        the PyTorch a user installs today, from PyPI, in the venv of bench/setup_peers.sh --pypi
#                  (TG_PEER_VENV, default /opt/terngrad-peers-venv)
#   TG_PEER=debian Debian's PyTorch 1.13 (/usr/bin/python3; bench/setup_peers.sh)
#   PYTHON=...     this interpreter, whichever it is
# peer_python             the interpreter, one line
# peer_header_line PY     "# peer: torch VERSION (PY)" for a results file's header ("missing" when PY has none)
# shellcheck shell=bash

TG_PEER_VENV=${TG_PEER_VENV:-/opt/terngrad-peers-venv}

peer_python() {
  if [ -n "${PYTHON:-}" ]; then
    echo "$PYTHON"
  elif [ "${TG_PEER:-pypi}" = debian ]; then
    echo /usr/bin/python3
  else
    echo "$TG_PEER_VENV/bin/python"
  fi
}

peer_header_line() {
  local v
  v=$("$1" -c 'import torch; print(torch.__version__)' 2>/dev/null) || v=missing
  echo "# peer: torch $v ($1)"
}
