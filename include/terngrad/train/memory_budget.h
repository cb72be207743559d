// The memory a training run holds on each of its devices, area by area (parameters, optimizer state, moving
// averages, parameter gradients, half copies, activations, exchange buffers, input batches), planned before
// anything is allocated: from a worker's net planned on the device's backend (Net::plan, memory_plan.h), the
// parameter specs and the run's settings. What the device has available, and the largest batch that fits. The
// trainer checks the plan before it builds anything (a run that cannot fit stops with one line, nothing written)
// and logs it; `terngrad-train --plan_memory` prints it for any device, one this machine has or not
// (make_planning_backend).
//
// Every area but two is exact: the sizes the trainer's slabs and buffers will have. Estimated: the exchange
// buffers (the schemes' own layouts, rounded: within a few KiB for fp32, fp16 and terngrad, within 2% for
// hierarchical and powersgd; tests/memory_budget_test.cc) and nothing for the backend's scratch (oneDNN's
// per-primitive scratchpads, cuDNN's workspace up to 1 GiB), which a device needs on top.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/nn/net.h"
#include "terngrad/train/train_config.h"

namespace tg {

struct MemoryArea {
  std::string name;  // "parameters", "activations", ...
  size_t bytes = 0;
};

struct DeviceMemoryPlan {
  std::string device;             // the backend's name
  std::vector<MemoryArea> areas;  // in the order of the report
  Net::MemoryReport net;          // one worker's net (its activations plan)
  int workers = 1;                // workers computing on the device (their nets share the activation arena)
  size_t total() const;
  size_t area(const std::string& name) const;  // 0 when absent
  // "parameters 97.5 MiB, optimizer state 97.5 MiB, ..., total 3.6 GiB".
  std::string describe() const;
  // A table of the areas, one per line, then the activations' details.
  std::string table() const;
};

// The run's shape as the trainer derives it from the flags and the processes (cfg resolved and validated).
struct TrainingLayout {
  int processes = 1;
  int replicas = 1;             // per process (--num_gpus or --cpu_replicas)
  int workers_per_replica = 1;  // virtual nodes computing one after another on a device
  int64_t worker_batch = 1;
  int num_nodes = 1, ranks_per_node = 1;  // the topology (the hierarchical exchange's shape)
  int world_workers() const { return processes * replicas * workers_per_replica; }
  static TrainingLayout of(const TrainConfig& cfg, int processes);  // one node of all ranks
};

// The plan of one replica's device (every replica holds the same). backend: the device's own, or a planning one.
// The host staging of the input batch (two process batches) is counted on the device when it is the CPU.
DeviceMemoryPlan plan_device_memory(const TrainConfig& cfg, Backend& backend, const TrainingLayout& layout);

// Bytes a device can still give to one process: CPU: the host's MemAvailable (and the cgroup's memory.max less its
// memory.current when lower) divided by the processes of this host (`host_processes`); CUDA: cudaMemGetInfo's free
// bytes (via the backend). Nothing known: SIZE_MAX.
size_t available_memory(Backend& backend, int host_processes);

// The largest worker batch, at most `limit`, whose plan is at most `available` bytes; 0 when not even 1 fits.
int64_t largest_fitting_worker_batch(const TrainConfig& cfg, Backend& backend, const TrainingLayout& layout,
                                     size_t available, int64_t limit);

// Parses a size: "80GiB", "80 GB", "8e10", "512MiB", "1.5TiB" (units B, KB/KiB, MB/MiB, GB/GiB, TB/TiB, any case;
// KB = 1000, KiB = 1024; no unit: bytes). Anything else throws naming `flag` and the accepted forms.
size_t parse_memory_size(const std::string& text, const std::string& flag);

}  // namespace tg
