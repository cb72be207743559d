// WeightDecayTerms: the L2 weight decay of a net's parameters, for a pass that adds it to the gradients instead of
// backward (Net::weight_decay_terms hands it over; GradientExchange::apply_weight_decay fuses it into the
// codec's first pass over the gradients).
#pragma once

#include <vector>

#include "terngrad/core/tensor.h"

namespace tg {

// Per parameter (layer order, the compression policy's tensor order): g += coefficients[i] * params[i], the
// gradient of coefficients[i] * |params[i]|^2 / 2 (coefficient 0: none, params[i] then undefined).
struct WeightDecayTerms {
  std::vector<Tensor> params;
  std::vector<float> coefficients;
};

}  // namespace tg
