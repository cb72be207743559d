// The message of the tg::Error a piece of code throws, for tests that check what an error says:
//   EXPECT_NE(error_of([&] { Timeline::check_path(""); }).find("empty path"), std::string::npos);
#pragma once

#include <functional>
#include <string>

namespace tg::testing {

std::string error_of(const std::function<void()>& f);  // "(no error)" when f throws nothing

}  // namespace tg::testing
