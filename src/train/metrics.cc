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

namespace {
std::string phases_json(const PhaseTimes& t) {
  std::string out = "{";
  for (const auto& [name, secs] : t.named("")) out += fmt::format("{}\"{}\": {}", out.size() > 1 ? ", " : "", name, num(secs));
  return out + "}";
}
}  // namespace

void MetricsWriter::step(const StepMetrics& m) {
  std::string processes, workers;
  for (const PhaseTimes& p : m.process_time) processes += (processes.empty() ? "" : ", ") + phases_json(p);
  for (double w : m.worker_forward_backward) workers += (workers.empty() ? "" : ", ") + num(w);
  line(fmt::format("{{\"step\": {}, \"entropy_loss\": {}, \"reg_loss\": {}, \"total_loss\": {}, "
                   "\"learning_rate\": {}, \"examples_per_sec\": {}, \"sec_per_batch\": {}, "
                   "\"bytes_exchanged\": {}, \"fp32_bytes\": {}, \"payload_bytes\": {}, \"wire_bytes\": {}, "
                   "\"loss_scale\": {}, \"skipped_steps\": {}, "
                   "\"time\": {}, \"process_time\": [{}], \"worker_forward_backward\": [{}]}}",
                   m.step, num(m.entropy_loss), num(m.reg_loss), num(m.total_loss), num(m.learning_rate),
                   num(m.examples_per_sec), num(m.sec_per_batch), m.bytes_exchanged, m.fp32_bytes, m.payload_bytes,
                   m.wire_bytes, num(m.loss_scale), m.skipped_steps, phases_json(m.time), processes, workers));
}

void MetricsWriter::summary(int64_t steps, double median_examples_per_sec, uint64_t bytes_moved,
                            uint64_t fp32_bytes_moved, double final_loss, const std::string& parameter_digest,
                            const PhaseTimes& time) {
  line(fmt::format("{{\"summary\": true, \"steps\": {}, \"median_examples_per_sec\": {}, "
                   "\"bytes_exchanged\": {}, \"fp32_bytes\": {}, \"final_loss\": {}, \"parameter_digest\": \"{}\", "
                   "\"time\": {}}}",
                   steps, num(median_examples_per_sec), bytes_moved, fp32_bytes_moved, num(final_loss),
                   parameter_digest, phases_json(time)));
}

}  // namespace tg
