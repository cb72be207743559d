// MetricsWriter: --metrics_jsonl, one JSON object per logged step and a final summary object, each on its
// own line and flushed, so a run that dies keeps what it logged.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace tg {

class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);  // appends; errors name the path
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void step(int64_t step, double entropy_loss, double reg_loss, double total_loss, double lr,
            double examples_per_sec, double sec_per_batch, uint64_t bytes_moved, uint64_t fp32_bytes_moved,
            uint64_t payload_bytes);
  void summary(int64_t steps, double median_examples_per_sec, uint64_t bytes_moved, uint64_t fp32_bytes_moved,
               double final_loss, const std::string& parameter_digest);

 private:
  void line(const std::string& json);
  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace tg
