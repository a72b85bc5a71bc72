#include "server/key_protocol.h"

#include <utility>

namespace ferry {

void KeyProtocol::Reject(const Request& request, ErrorCode code, std::string reason) const {
  context_.counters->Refuse(code == ErrorCode::kBadMessage ? Refusal::kBadMessage
                                                           : Refusal::kMismatch);
  context_.reply(ErrorReply(request.reply_to(), request.envelope().key(), code, std::move(reason)));
}

}  // namespace ferry
