// expect_close_values (close_values.h).
#include "common/close_values.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace tg::testing {

void expect_close_values(const std::vector<double>& got, const std::vector<double>& want, const char* what,
                         double tol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1.0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << ": non-finite value at " << i;
    const double e = std::fabs(got[i] - want[i]);
    if (e > worst) worst = e, worst_i = i;
  }
  EXPECT_LE(worst, tol * scale) << what << ": worst error at " << worst_i << " got " << got[worst_i] << " want "
                                << want[worst_i];
}

}  // namespace tg::testing
