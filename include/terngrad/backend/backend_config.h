// The settings a backend is made with, each default written once: BackendOptions (what make_backend takes:
// --threads, --allow_tf32, --deterministic, --conv_search) and BackendConfig (those and --device: the flags' struct),
// with the flags' sub-table (backend_flags()). TrainConfig and the evaluator's options derive from BackendConfig and
// embed the table (core/flag_table.h, embed_flags), so the trainer and terngrad-eval read the same flags the same way.
#pragma once

#include <string>
#include <vector>

#include "terngrad/core/flag_table.h"

namespace tg {

struct BackendOptions {
  int threads = 0;  // CPU threads (0: all hardware threads)
  // CUDA: let fp32 convolutions and GEMMs use TF32 tensor cores (10-bit mantissa products, errors ~1e-3);
  // off: FMA math, comparable with the CPU backend.
  bool allow_tf32 = false;
  // CUDA: only algorithms that give the same bits on every run (no atomics-based cuDNN algorithms).
  bool deterministic = true;
  // CUDA: a convolution's first call in each direction times every acceptable cuDNN algorithm (the filters above, a
  // scratch limit) and keeps the fastest (PyTorch's cudnn.benchmark); off: the heuristics' first one that runs. The
  // measured choice can differ between runs, and with it the last bits of the results.
  bool conv_search = false;
};

struct BackendConfig : BackendOptions {
  std::string device = "cpu";  // cpu | cuda | cuda:<k>
};
// --device, --threads, --allow_tf32, --deterministic, --conv_search.
const std::vector<Flag<BackendConfig>>& backend_flags();

}  // namespace tg
