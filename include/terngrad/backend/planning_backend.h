// make_planning_backend: a backend to plan a run's memory on, for a device this machine may not have (terngrad-train
// --plan_memory --device cuda on a CPU-only machine). "cpu": the CPU backend itself (one thread). "cuda[:k]": a
// stand-in that answers what setting up a net asks of a backend, as the CUDA backend of an sm_80 or newer GPU
// answers it (f32, f16 and bf16 compute; no workspace kept by pooling or LRN between forward and backward: the CUDA
// backward finds the arg-max in x again), and refuses every operation and allocation with one line naming it.
#pragma once

#include <memory>
#include <string>

#include "terngrad/backend/backend.h"

namespace tg {

std::unique_ptr<Backend> make_planning_backend(const std::string& device);
// The "cuda:<index>" stand-in itself.
std::unique_ptr<Backend> make_cuda_planning_backend(int index);

}  // namespace tg
