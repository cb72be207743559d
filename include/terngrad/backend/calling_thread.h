// bind_calling_thread_to: the device a thread that is not a replica's works on. A process's main thread makes CUDA
// calls of its own (page-locked staging memory, the NCCL communicators' setup, a device guard's restore); without a
// current device each of those would make one on GPU 0, so every process of a multi-process run would hold a
// context there. The trainer binds its main thread to its first GPU before any of them.
#pragma once

#include <string>

namespace tg {

// "cuda" / "cuda:<k>": makes that device the calling thread's current CUDA device (an unknown index is an error
// naming the machine's devices); "cpu": nothing. Other names are errors naming the choices.
void bind_calling_thread_to(const std::string& device);

}  // namespace tg
