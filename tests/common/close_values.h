// The comparison the op tests make between a backend's result and the double-precision reference
// (reference_ops.h): |got - want| <= tol * max(1, max |want|) everywhere, and no NaN or Inf.
#pragma once

#include <vector>

namespace tg::testing {

// Adds a failure naming `what`, the worst element, its value and the reference's.
void expect_close_values(const std::vector<double>& got, const std::vector<double>& want, const char* what, double tol);

}  // namespace tg::testing
