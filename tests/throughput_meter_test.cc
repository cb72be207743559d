// ThroughputMeter: window rates, the warm-up of the first --log_every steps, the median of the warm windows (odd
// and even counts), and the fallbacks of a run too short for a warm window (its first window) or for any window (the
// timed steps).
#include "terngrad/train/throughput_meter.h"

#include <gtest/gtest.h>

#include "terngrad/core/error.h"

namespace tg {
namespace {

TEST(ThroughputMeter, WindowRateIsExamplesOverMeanStepTime) {
  ThroughputMeter m(64, 2);
  m.add_step(0.5);
  m.add_step(1.5);
  const ThroughputMeter::Window w = m.close_window();
  EXPECT_EQ(w.steps, 2);
  EXPECT_DOUBLE_EQ(w.sec_per_step, 1.0);
  EXPECT_DOUBLE_EQ(w.examples_per_sec, 64.0);
  EXPECT_DOUBLE_EQ(m.first_window_rate(), 64.0);
}

TEST(ThroughputMeter, MedianOfTheWindowsAfterTheWarmUp) {
  ThroughputMeter m(100, 1);                    // --log_every 1: the first step is warm-up
  const double secs[] = {10.0, 1.0, 4.0, 2.0};  // rates 10 (warm-up), 100, 25, 50
  for (double s : secs) {
    m.add_step(s);
    m.close_window();
  }
  EXPECT_DOUBLE_EQ(m.first_window_rate(), 10.0);
  EXPECT_DOUBLE_EQ(m.median_examples_per_sec(), 50.0);  // of {25, 50, 100}
}

// An even count of warm windows: the mean of the middle two (not the upper or lower one).
TEST(ThroughputMeter, MedianOfAnEvenCountIsTheMeanOfTheMiddleTwo) {
  ThroughputMeter m(100, 1);
  const double secs[] = {10.0, 1.0, 4.0, 2.0, 5.0};  // rates 10 (warm-up), 100, 25, 50, 20
  for (double s : secs) {
    m.add_step(s);
    m.close_window();
  }
  EXPECT_DOUBLE_EQ(m.median_examples_per_sec(), 37.5);  // of {20, 25, 50, 100}: (25 + 50) / 2
}

TEST(ThroughputMeter, MedianOfTwoAndOfOneWindow) {
  ThroughputMeter two(100, 1);
  for (double s : {10.0, 1.0, 4.0}) {  // warm rates 100, 25
    two.add_step(s);
    two.close_window();
  }
  EXPECT_DOUBLE_EQ(two.median_examples_per_sec(), 62.5);
  ThroughputMeter one(100, 1);
  for (double s : {10.0, 4.0}) {  // warm rate 25
    one.add_step(s);
    one.close_window();
  }
  EXPECT_DOUBLE_EQ(one.median_examples_per_sec(), 25.0);
}

TEST(ThroughputMeter, WarmAfterTheWarmUpSteps) {
  ThroughputMeter m(8, 3);
  for (int i = 0; i < 3; ++i) {
    m.add_step(1.0);
    EXPECT_FALSE(m.warm()) << "step " << i;
  }
  m.add_step(1.0);
  EXPECT_TRUE(m.warm());
}

// Resumed at an unaligned step, max_steps inside the first log_every steps: two windows, both warm-up. The
// run's rate is the first window's, not the last one's.
TEST(ThroughputMeter, ShortRunGetsItsFirstWindowRate) {
  ThroughputMeter m(10, 10);
  for (int i = 0; i < 5; ++i) m.add_step(1.0);  // 10 examples/sec
  m.close_window();
  for (int i = 0; i < 2; ++i) m.add_step(0.1);  // 100 examples/sec
  m.close_window();
  EXPECT_DOUBLE_EQ(m.first_window_rate(), 10.0);
  EXPECT_DOUBLE_EQ(m.median_examples_per_sec(), 10.0);
}

TEST(ThroughputMeter, NoWindowGivesTheMeanOfTheTimedSteps) {
  ThroughputMeter m(6, 10);
  EXPECT_EQ(m.median_examples_per_sec(), 0.0);
  m.add_step(1.0);
  m.add_step(2.0);
  EXPECT_DOUBLE_EQ(m.median_examples_per_sec(), 4.0);  // 12 examples in 3 s
  EXPECT_EQ(m.first_window_rate(), 0.0);
}

TEST(ThroughputMeter, EmptyWindowAndBadSizesAreErrors) {
  ThroughputMeter m(6, 10);
  EXPECT_THROW(m.close_window(), Error);
  EXPECT_THROW(ThroughputMeter(0, 1), Error);
  EXPECT_THROW(ThroughputMeter(1, -1), Error);
}

}  // namespace
}  // namespace tg
