// StepExchange: a replica's exchange of one step, whichever the step needs: the run's exchange (the scheme the
// flags choose), or an fp32 one during --fp32_warmup_steps (which leaves the weight decay to backward); on a probe
// step (--quantization_error_every) the fp32 reference first and the run's exchange after backward
// (QuantizationProbe); on the dump step (--exchange_dump) its inputs and its average written beside it. The trainer
// asks it once per step what the step is (plan), lets backward feed the exchange when it overlaps, and calls finish.
// One object per replica; what it holds is its own (the exchanges, the probe, the dump's views).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "terngrad/exchange/gradient_exchange.h"
#include "terngrad/exchange/quantization_probe.h"

namespace tg {

class StepExchange {
 public:
  struct Settings {
    int64_t fp32_warmup_steps = 0;  // --fp32_warmup_steps
    int64_t probe_every = 0;        // --quantization_error_every
    std::string dump_dir;           // --exchange_dump ("" : none)
    int64_t dump_step = 0;          // --exchange_dump_step (1-based)
    bool error_feedback = false;    // (a dump refuses a scheme with state)
  };
  // What one step does.
  struct Step {
    bool warm = false;   // the fp32 exchange instead of the run's
    bool probe = false;  // the quantization probe: the fp32 reference, then the run's exchange after backward
    bool dump = false;   // writes the exchange's inputs and average
  };

  // exchange: the run's; fp32: the fp32 exchange of the same workers (warm-up, probe reference; null without
  // either); probe: null without --quantization_error_every. exchange_decays: the run's exchange adds the weight
  // decay (GradientExchange::apply_weight_decay was called). worker_grads: the replica's workers' gradients (the
  // dump's inputs), the first one's the average's target, on `backend`; rank: the replica's in the world group.
  StepExchange(const Settings& settings, Backend& backend, std::unique_ptr<GradientExchange> exchange,
               std::unique_ptr<GradientExchange> fp32, std::unique_ptr<QuantizationProbe> probe, bool exchange_decays,
               std::vector<std::vector<Tensor>> worker_grads, int rank);

  Step plan(int64_t t) const;  // step t (0-based)
  GradientExchange& of(const Step& s) const { return s.warm ? *fp32_ : *exchange_; }
  // Whether backward feeds the step's exchange bucket by bucket (a probe or a dump exchanges after backward).
  bool overlaps(const Step& s) const { return !s.probe && !s.dump && of(s).overlapped(); }
  // Whether backward adds the weight decay (else the run's exchange does, in a pass of its own).
  bool backward_adds_weight_decay(const Step& s) const { return s.warm || !decays_; }
  // Before backward: the exchange's step begins (a probe's begins after backward, after the reference).
  void begin(const Step& s, uint32_t step32);
  // After every worker's backward: what the step's exchange still has to do, the probe and the dump around it.
  ExchangeStats finish(const Step& s, uint32_t step32, int64_t t);

  GradientExchange& exchange() { return *exchange_; }
  const GradientExchange& exchange() const { return *exchange_; }
  GradientExchange* fp32() { return fp32_.get(); }
  const QuantizationProbe* probe() const { return probe_.get(); }
  bool overlapped() const { return exchange_->overlapped(); }  // the run's exchange runs inside backward

 private:
  bool in_warmup(int64_t t) const { return t < settings_.fp32_warmup_steps && fp32_; }
  void dump_inputs(GradientExchange& x, uint32_t step32);
  void dump_average(GradientExchange& x);

  Settings settings_;
  Backend* backend_;
  std::unique_ptr<GradientExchange> exchange_, fp32_;
  std::unique_ptr<QuantizationProbe> probe_;
  bool decays_ = false;
  std::vector<std::vector<Tensor>> worker_grads_;
  int rank_ = 0;
};

}  // namespace tg
