#pragma once

// What ferry-sim does with each FERRY_* variable a real worker or server reads
// (docs/configuration.md lists them; tests/sim/knobs_test.cc fails when one is missing
// here, so a new knob needs a decision: modelled, no effect on the modelled time, or
// refused with the reason).

#include <string>
#include <vector>

#include "common/config/scheduling_policy.h"

namespace ferry::sim {

enum class KnobUse {
  kModelled,  // changes the simulated job as it changes the real one
  kNoEffect,  // accepted; does not change what the model times (logs, deadlines, ...)
  kRefused,   // the model cannot honour it: --env refuses it, with `note`
};

struct Knob {
  const char* name;
  KnobUse use;
  const char* note;  // how it is modelled, why it has no effect, or why refused
};

const std::vector<Knob>& Knobs();
// nullptr for a name not in Knobs().
const Knob* FindKnob(const std::string& name);
// Whether the simulator models `policy` (every policy: a switch without default, so a new
// one fails to compile until it is decided here).
bool PolicyModelled(SchedulingPolicy policy);

}  // namespace ferry::sim
