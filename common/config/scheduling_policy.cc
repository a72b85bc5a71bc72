#include "common/config/scheduling_policy.h"

namespace ferry {

const char* SchedulingPolicyName(SchedulingPolicy policy) {
  switch (policy) {
    case SchedulingPolicy::kFifo: return "fifo";
    case SchedulingPolicy::kPriority: return "priority";
    case SchedulingPolicy::kCredit: return "credit";
    case SchedulingPolicy::kP3: return "p3";
    case SchedulingPolicy::kFifoBucket: return "fifo-bucket";
    case SchedulingPolicy::kMercury: return "mercury";
    case SchedulingPolicy::kUsbyte: return "usbyte";
    case SchedulingPolicy::kProphet: return "prophet";
    case SchedulingPolicy::kTrirace: return "trirace";
  }
  return "unknown";
}

bool ParseSchedulingPolicy(const std::string& name, SchedulingPolicy* out) {
  for (SchedulingPolicy p : {SchedulingPolicy::kFifo, SchedulingPolicy::kPriority,
                             SchedulingPolicy::kCredit, SchedulingPolicy::kP3,
                             SchedulingPolicy::kFifoBucket, SchedulingPolicy::kMercury,
                             SchedulingPolicy::kUsbyte, SchedulingPolicy::kProphet,
                             SchedulingPolicy::kTrirace}) {
    if (name == SchedulingPolicyName(p)) {
      *out = p;
      return true;
    }
  }
  return false;
}

}  // namespace ferry
