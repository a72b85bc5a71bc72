#pragma once

// The one exception type Ferry throws, its error codes, and the check that raises it.
//
// Policy (see STYLE.md): everything that arrives from the wire or the environment is
// validated at the boundary and reported with a FerryError naming the peer, the key
// and the reason. CHECK (glog) is only for broken invariants inside our own code.
// Functions that report a problem to their caller without throwing return a Status
// (common/util/status.h) carrying the same codes.

#include <stdexcept>
#include <string>

#include "common/util/strings.h"

namespace ferry {

// Stable codes: they travel in Error messages (proto Error.code).
enum class ErrorCode : int {
  kOk = 0,
  kInvalidConfig = 1,     // environment variable missing or malformed (exit code 2)
  kTimeout = 2,           // a deadline passed
  kPeerFailed = 3,        // a node died or is unreachable
  kMismatch = 4,          // workers disagree on a tensor's size, dtype or declaration
  kBadMessage = 5,        // malformed or unexpected message
  kShutdown = 6,          // the cluster is shutting down
  kInvalidArgument = 7,   // a caller passed bad arguments
  kInternal = 8,
  // Elastic training: the job's membership changed (a node died or joined); the
  // operation was abandoned and the worker must Reset() (worker/worker.h).
  kMembershipChanged = 9,
};

const char* ErrorCodeName(ErrorCode code);

class FerryError : public std::runtime_error {
 public:
  FerryError(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// Throws FerryError(code, StrCat(args...)) unless cond holds.
#define FERRY_ENFORCE(cond, code, ...)                                     \
  do {                                                                     \
    if (!(cond)) throw ::ferry::FerryError((code), ::ferry::StrCat(__VA_ARGS__)); \
  } while (0)

}  // namespace ferry
