#pragma once

// Status: the outcome of an operation that reports failure to its caller instead of
// throwing (validating a message read from the wire, say, where the caller drops the
// message and carries on). OK, or an ErrorCode with a message; like absl::Status, but
// only what Ferry uses.
//
// The message is the whole human-readable text (no code prefix added), so a caller that
// logs or rethrows it produces exactly the text the check wrote.

#include <string>
#include <utility>

#include "common/util/error.h"

namespace ferry {

class [[nodiscard]] Status {
 public:
  // OK.
  Status() = default;
  // An error. REQUIRES: code != ErrorCode::kOk (an OK status has no message).
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  // The error's text; empty when ok().
  const std::string& message() const { return message_; }
  // "ok", or "<code name>: <message>" (for logs).
  std::string ToString() const;

  // Throws FerryError(code(), message()) unless ok(): for callers whose own contract is
  // to throw.
  void ThrowIfError() const {
    if (!ok()) throw FerryError(code_, message_);
  }

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

// Shorthand for the commonest error: a message read from the wire fails a check.
inline Status BadMessageError(std::string message) {
  return Status(ErrorCode::kBadMessage, std::move(message));
}

}  // namespace ferry
