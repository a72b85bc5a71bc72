#include "common/util/error.h"

namespace ferry {

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidConfig: return "invalid configuration";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kPeerFailed: return "peer failed";
    case ErrorCode::kMismatch: return "mismatch";
    case ErrorCode::kBadMessage: return "bad message";
    case ErrorCode::kShutdown: return "shutdown";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kInternal: return "internal error";
    case ErrorCode::kMembershipChanged: return "membership changed";
  }
  return "unknown error";
}

}  // namespace ferry
