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
// Microseconds since the Unix epoch on the system clock: comparable between the nodes of
// one host exactly, between hosts only as well as their clocks are synchronised (NTP: about
// a millisecond). For diagnostics that span nodes (Envelope.sent_us), never for deadlines.
int64_t UnixUs();

}  // namespace ferry
