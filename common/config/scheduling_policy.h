#pragma once

// The worker's scheduling policies (FERRY_SCHEDULING_POLICY), as an enum: the name is
// parsed and checked once, in Config, and everything after compares enum values. What
// each policy guarantees is described in worker/partition_scheduling/policies.h.
//
// Here, below the worker, because Config holds the choice.

#include <string>

namespace ferry {

enum class SchedulingPolicy {
  kFifo,        // "fifo"
  kPriority,    // "priority"
  kCredit,      // "credit" (the default)
  kP3,          // "p3"
  kFifoBucket,  // "fifo-bucket"
  kMercury,     // "mercury"
  kUsbyte,      // "usbyte"
  kProphet,     // "prophet"
  kTrirace,     // "trirace"
};

// The name as FERRY_SCHEDULING_POLICY spells it: "fifo", "priority", "credit", "p3",
// "fifo-bucket", "mercury", "usbyte", "prophet", "trirace" (for logs, the Summary() line and
// the frameworks' API).
const char* SchedulingPolicyName(SchedulingPolicy policy);

// Parses one of the names above (exact spelling). Returns false, leaving `out` as it
// was, for anything else.
bool ParseSchedulingPolicy(const std::string& name, SchedulingPolicy* out);

// The accepted names, for error messages: "fifo, priority, credit, p3 or fifo-bucket".
constexpr const char* kSchedulingPolicyNames =
    "fifo, priority, credit, p3, fifo-bucket, mercury, usbyte, prophet or trirace";

// The policies whose partitions go under `credit`'s rules (priority, credit, the window,
// fusion): credit itself, and trirace (credit for the partitions, with frames and the
// transport's order below them: config.cc).
inline bool CreditLike(SchedulingPolicy p) {
  return p == SchedulingPolicy::kCredit || p == SchedulingPolicy::kTrirace;
}

// Whether a worker's point-to-point sends hold back the other tensor bytes on their links
// (the Van's Links, van.h): under every policy but the two readiness-order ones, where a
// send goes in arrival order like everything else.
inline bool SchedulesLinks(SchedulingPolicy p) {
  return p != SchedulingPolicy::kFifo && p != SchedulingPolicy::kFifoBucket;
}

}  // namespace ferry
