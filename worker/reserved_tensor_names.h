#pragma once

// Reserved tensor names: the tensors Ferry itself pushes or counts rounds under, all
// named "__ferry__/<kind>" or "__ferry__/<kind>/<name>" by ReservedTensorName, so they
// can never collide with each other or with a user's tensor.
//
// A user's tensor may not start with kReservedTensorPrefix: the public entry points
// (Worker, LocalGroup: declare, push_pull, push_pull_rows, broadcast) refuse one with
// CheckUserTensorName. The one exception is kind kBinding: names the language bindings
// use for their own collectives (ferry.torch's host-id exchange), which must travel
// through the public API.

#include <string>
#include <string_view>

#include "common/util/error.h"
#include "common/util/strings.h"

namespace ferry {

inline constexpr std::string_view kReservedTensorPrefix = "__ferry__/";

// The kinds of reserved tensors.
namespace reserved {
// Worker::Broadcast(name): a sum in which only the root contributes non-zeros.
inline constexpr std::string_view kBroadcast = "broadcast";
// Worker::Broadcast(name): what each worker called it with (root, dtype, count), summed
// before the data so that disagreeing workers all fail with the reason.
inline constexpr std::string_view kBroadcastVote = "broadcast_vote";
// Worker::StepBoundary: the workers' autotuning scores, summed once to decide.
inline constexpr std::string_view kAutotune = "autotune";
// LocalRoot: the rounds of the local group's Barrier() (a key, never pushed).
inline constexpr std::string_view kLocalBarrier = "local_barrier";
// LocalRoot: the rounds of device tensor T (a key, never pushed): a host and a device
// push_pull of one name are two sequences of rounds.
inline constexpr std::string_view kDevice = "device";
// Worker::HostsUpdated (elastic): whether any worker saw workers waiting to join, summed at
// a commit so that every worker admits them at the same one.
inline constexpr std::string_view kHostsUpdated = "hosts_updated";
// The language bindings' own collectives, sent through the public API (so
// CheckUserTensorName lets them pass): ferry.torch's "host_ids" (local rank discovery).
inline constexpr std::string_view kBinding = "binding";
}  // namespace reserved

// "__ferry__/<kind>", or "__ferry__/<kind>/<name>" when `name` is not empty.
inline std::string ReservedTensorName(std::string_view kind, std::string_view name = {}) {
  std::string out(kReservedTensorPrefix);
  out.append(kind);
  if (!name.empty()) {
    out += '/';
    out.append(name);
  }
  return out;
}

// True for every name in the reserved namespace (any kind).
inline bool IsReservedTensorName(std::string_view name) {
  return name.substr(0, kReservedTensorPrefix.size()) == kReservedTensorPrefix;
}

// Throws FerryError(kInvalidArgument) naming `what` (the operation) and the tensor if
// `name` is reserved and not a binding's (reserved::kBinding).
inline void CheckUserTensorName(const char* what, const std::string& name) {
  if (!IsReservedTensorName(name)) return;
  const std::string binding = ReservedTensorName(reserved::kBinding) + "/";
  if (name.compare(0, binding.size(), binding) == 0) return;
  throw FerryError(ErrorCode::kInvalidArgument,
                   StrCat(what, " of '", name, "': tensor names starting with '",
                          std::string(kReservedTensorPrefix),
                          "' are reserved for Ferry's own tensors; rename the tensor"));
}

}  // namespace ferry
