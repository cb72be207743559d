// exchange_replay DIR: redoes the exchange a training run wrote with --exchange_dump DIR on the CPU backend and
// compares its average with every rank's (exchange/exchange_dump.h): TernGrad's ternary-coded tensors bit for bit (the
// same codes for the same gradients, e.g. a GPU's against the CPU's), the rest within a relative 1e-6.
// Exit 0: the same; 1: a difference (the first one named); 2: bad input (one line naming the file and what).
#include <cstdio>
#include <cstring>
#include <exception>

#include "terngrad/exchange/exchange_dump.h"

int main(int argc, char** argv) {
  if (argc != 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fprintf(argc == 2 ? stdout : stderr,
                 "usage: exchange_replay DIR   (DIR: a folder terngrad-train --exchange_dump DIR wrote)\n"
                 "redoes the dumped exchange on the CPU and compares its average with every rank's\n");
    return argc == 2 ? 0 : 2;
  }
  try {
    const tg::ExchangeReplayResult r = tg::replay_exchange_dump(argv[1]);
    std::printf("%s\n", r.summary().c_str());
    return r.passed() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "exchange_replay: %s\n", e.what());
    return 2;
  }
}
