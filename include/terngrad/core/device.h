// Device: where memory lives and ops run: the host CPU or CUDA device k.
#pragma once

#include <string>

namespace tg {

enum class DeviceKind { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;

  static Device cpu() { return {DeviceKind::kCpu, 0}; }
  static Device cuda(int k) { return {DeviceKind::kCuda, k}; }
  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

}  // namespace tg
