#pragma once

// Config's scheduling settings (config.cc reads the rest): FERRY_SCHEDULING_POLICY and its
// companions, the window and autotune lists, and what mercury and trirace turn on.

#include <cstdint>

#include "common/config/config.h"
#include "common/config/env_reader.h"

namespace ferry::config_internal {

// Whether `bytes` may be a frame size: 0 (whole partitions) or a multiple of 8 (whole
// elements of every dtype) of at least 4096.
bool ValidFrameBytes(int64_t bytes);

// FERRY_SCHEDULING_POLICY and its companions. REQUIRES: partition_bytes and
// max_message_bytes read.
void ReadScheduling(const EnvReader& r, Config* c);

// What mercury and trirace turn on unless set, and the default policy's trirace_on_sends.
// REQUIRES: the transport and the policy read.
void ApplyTransportDefaults(const EnvReader& r, Config* c);

}  // namespace ferry::config_internal
