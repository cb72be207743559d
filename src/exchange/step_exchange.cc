// StepExchange (step_exchange.h): which exchange a step runs, the probe and the dump around it.
#include "terngrad/exchange/step_exchange.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "terngrad/core/enum_names.h"
#include "terngrad/exchange/exchange_dump.h"
#include "terngrad/exchange/scheme_registry.h"

namespace tg {

StepExchange::StepExchange(const Settings& settings, Backend& backend, std::unique_ptr<GradientExchange> exchange,
                           std::unique_ptr<GradientExchange> fp32, std::unique_ptr<QuantizationProbe> probe,
                           bool exchange_decays, std::vector<std::vector<Tensor>> worker_grads, int rank)
    : settings_(settings),
      backend_(&backend),
      exchange_(std::move(exchange)),
      fp32_(std::move(fp32)),
      probe_(std::move(probe)),
      decays_(exchange_decays),
      worker_grads_(std::move(worker_grads)),
      rank_(rank) {
  TG_CHECK(exchange_ != nullptr, "StepExchange: no exchange");
  TG_CHECK(!probe_ || fp32_, "StepExchange: a quantization probe needs the fp32 exchange");
}

StepExchange::Step StepExchange::plan(int64_t t) const {
  Step s;
  s.warm = in_warmup(t);
  s.probe = probe_ && settings_.probe_every > 0 && (t + 1) % settings_.probe_every == 0 && !s.warm;
  s.dump = !settings_.dump_dir.empty() && t + 1 == settings_.dump_step;
  return s;
}

void StepExchange::begin(const Step& s, uint32_t step32) {
  if (!s.probe) of(s).begin(step32);
}

ExchangeStats StepExchange::finish(const Step& s, uint32_t step32, int64_t t) {
  GradientExchange& x = of(s);
  if (s.probe) {
    probe_->reference(*fp32_, step32);
    x.begin(step32);
  }
  if (s.dump) dump_inputs(x, step32);
  ExchangeStats stats = x.finish();
  if (s.probe) probe_->measure(x, t + 1);
  if (s.dump) dump_average(x);
  return stats;
}

// --exchange_dump: the step's exchange inputs of this replica (its workers' gradients, the parameters when the exchange
// adds the weight decay) and, from replica 0 of process 0, the manifest of everything else the exchange depends on.
void StepExchange::dump_inputs(GradientExchange& x, uint32_t step32) {
  check_replayable(x.scheme_name(), settings_.error_feedback);
  write_exchange_dump_inputs(settings_.dump_dir, rank_, *backend_, worker_grads_, x.weight_decay().params);
  if (rank_ != 0) return;
  ExchangeDumpManifest m;
  m.step = step32;
  m.seed = x.options().seed;
  m.exchange = x.options().exchange;
  m.compression = x.policy().flags();
  for (const TensorCodingPlan& t : x.policy().tensors()) m.tensors.push_back({t.name, t.numel});
  const int local = static_cast<int>(worker_grads_.size());
  m.ranks = x.num_workers() / local;
  m.workers_per_rank = local;
  m.weight_decay = x.weight_decay().coefficients;
  write_exchange_dump_manifest(settings_.dump_dir, m);
}

void StepExchange::dump_average(GradientExchange& x) {
  x.decode_deferred_now();  // the optimizer's decode, done here: the same bits
  write_exchange_dump_average(settings_.dump_dir, rank_, *backend_, worker_grads_[0]);
  if (rank_ == 0)
    spdlog::info("exchange of step {} written to {} (exchange_replay {} redoes it on the CPU)", settings_.dump_step,
                 settings_.dump_dir, settings_.dump_dir);
}

}  // namespace tg
