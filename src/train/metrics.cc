// JSON lines for --metrics_jsonl.
#include "terngrad/train/metrics.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "terngrad/core/error.h"

namespace tg {

namespace {
std::string num(double v) { return std::isfinite(v) ? fmt::format("{:.9g}", v) : "null"; }
}  // namespace

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "a");
  TG_CHECK(file_ != nullptr, "--metrics_jsonl {}: cannot open: {}", path, std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

void MetricsWriter::line(const std::string& json) {
  TG_CHECK(std::fputs(json.c_str(), file_) >= 0 && std::fputc('\n', file_) != EOF && std::fflush(file_) == 0,
           "--metrics_jsonl {}: write failed: {}", path_, std::strerror(errno));
}

void MetricsWriter::step(int64_t step, double entropy_loss, double reg_loss, double total_loss, double lr,
                         double examples_per_sec, double sec_per_batch, uint64_t bytes_moved,
                         uint64_t fp32_bytes_moved, uint64_t payload_bytes) {
  line(fmt::format("{{\"step\": {}, \"entropy_loss\": {}, \"reg_loss\": {}, \"total_loss\": {}, "
                   "\"learning_rate\": {}, \"examples_per_sec\": {}, \"sec_per_batch\": {}, "
                   "\"bytes_exchanged\": {}, \"fp32_bytes\": {}, \"payload_bytes\": {}}}",
                   step, num(entropy_loss), num(reg_loss), num(total_loss), num(lr), num(examples_per_sec),
                   num(sec_per_batch), bytes_moved, fp32_bytes_moved, payload_bytes));
}

void MetricsWriter::summary(int64_t steps, double median_examples_per_sec, uint64_t bytes_moved,
                            uint64_t fp32_bytes_moved, double final_loss, const std::string& parameter_digest) {
  line(fmt::format("{{\"summary\": true, \"steps\": {}, \"median_examples_per_sec\": {}, "
                   "\"bytes_exchanged\": {}, \"fp32_bytes\": {}, \"final_loss\": {}, \"parameter_digest\": \"{}\"}}",
                   steps, num(median_examples_per_sec), bytes_moved, fp32_bytes_moved, num(final_loss),
                   parameter_digest));
}

}  // namespace tg
