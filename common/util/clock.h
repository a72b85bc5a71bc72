#pragma once

#include <chrono>
#include <cstdint>

namespace ferry {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// Milliseconds on the steady clock since an arbitrary epoch; for deadlines and logs.
int64_t NowMs();
// Microseconds on the steady clock; for timings.
int64_t NowUs();

}  // namespace ferry
