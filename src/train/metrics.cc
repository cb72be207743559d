// JSON lines for --metrics_jsonl.
#include "terngrad/train/metrics.h"

#include "terngrad/exchange/quantization_probe.h"
#include "terngrad/train/trainer.h"

namespace tg {

namespace {
std::string phases_json(const PhaseTimes& t) {
  JsonObject o;
  for (const auto& [name, secs] : t.named("")) o.add(name, secs);
  return o.str();
}
}  // namespace

void MetricsWriter::step(const StepMetrics& m) {
  std::vector<std::string> processes;
  for (const PhaseTimes& p : m.process_time) processes.push_back(phases_json(p));
  JsonObject o;
  o.add("step", m.step)
      .add("elapsed", m.elapsed)
      .add("exchange", m.exchange)
      .add("entropy_loss", m.entropy_loss)
      .add("reg_loss", m.reg_loss)
      .add("total_loss", m.total_loss)
      .add("learning_rate", m.learning_rate)
      .add("examples_per_sec", m.examples_per_sec)
      .add("sec_per_batch", m.sec_per_batch)
      .add("bytes_exchanged", m.bytes_exchanged)
      .add("fp32_bytes", m.fp32_bytes)
      .add("payload_bytes", m.payload_bytes)
      .add("wire_bytes", m.wire_bytes)
      .add("intra_node_bytes", m.intra_node_bytes)
      .add("inter_node_bytes", m.inter_node_bytes)
      .add("loss_scale", m.loss_scale)
      .add("skipped_steps", m.skipped_steps)
      .add("host_syncs", m.host_syncs)
      .add("device_launches", m.device_launches)
      .add_json("time", phases_json(m.time))
      .add_json("process_time", json_array(processes))
      .add("worker_forward_backward", m.worker_forward_backward);
  file_.write(o);
}

void MetricsWriter::summary(const TrainResult& r) {
  JsonObject o;
  o.add("summary", true)
      .add("steps", r.steps_done)
      .add("median_examples_per_sec", r.median_examples_per_sec)
      .add("bytes_exchanged", r.bytes_moved)
      .add("fp32_bytes", r.fp32_bytes_moved)
      .add("final_loss", static_cast<double>(r.final_loss))
      .add("parameter_digest", r.parameter_digest)
      .add_json("time", phases_json(r.time_per_step));
  file_.write(o);
}

void MetricsWriter::quantization(const QuantizationReport& q) {
  std::vector<std::string> tensors;
  for (const TensorQuantization& t : q.tensors) {
    JsonObject o;
    o.add("name", t.name)
        .add("numel", t.numel)
        .add("relative_error", t.relative_error)
        .add("nonzero_fraction", t.nonzero_fraction)
        .add("scaler", static_cast<double>(t.scaler))
        .add("num_scalers", static_cast<int64_t>(t.num_scalers));
    tensors.push_back(o.str());
  }
  JsonObject o;
  o.add("quantization", true)
      .add("step", q.step)
      .add("relative_error", q.relative_error)
      .add("nonzero_fraction", q.nonzero_fraction)
      .add("seconds", q.seconds)
      .add_json("tensors", json_array(tensors));
  file_.write(o);
}

}  // namespace tg
