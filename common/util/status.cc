#include "common/util/status.h"

namespace ferry {

std::string Status::ToString() const {
  if (ok()) return "ok";
  return StrCat(ErrorCodeName(code_), ": ", message_);
}

}  // namespace ferry
