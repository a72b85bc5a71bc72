// The Van's receiving side: multipart messages read, parsed and validated (a bad one is
// counted and dropped, its sender served on), shared-memory descriptors resolved, and the
// message handed to the handler through the fault injection of tests.

#include <glog/logging.h>
#include <zmq.h>

#include <memory>
#include <string>
#include <vector>

#include "common/transport/van.h"
#include "common/transport/van_internal.h"
#include "common/util/logging.h"

namespace ferry {

using van_internal::CloseFrames;

namespace {

// A zmq_msg_t that owns a received frame; the payload Buffer's owner.
struct FrameOwner {
  zmq_msg_t msg;
  ~FrameOwner() { zmq_msg_close(&msg); }
};

// Receives one multipart message into `frames` (at most kMaxFrames kept; the rest
// are received and discarded, counted in `extra`). Returns false if none was waiting.
// zmq_msg_t must not be copied, so the vector never grows past its reserved size.
bool ReceiveMultipart(void* socket, std::vector<zmq_msg_t>* frames, size_t* extra) {
  constexpr size_t kMaxFrames = 4;
  frames->reserve(kMaxFrames);
  *extra = 0;
  int more = 1;
  bool first = true;
  while (more) {
    zmq_msg_t scratch;
    bool keep = frames->size() < kMaxFrames;
    zmq_msg_t* f = keep ? &frames->emplace_back() : &scratch;
    zmq_msg_init(f);
    // Only the first frame may be absent; ZeroMQ delivers a multipart message whole.
    int flags = first ? ZMQ_DONTWAIT : 0;
    first = false;
    if (zmq_msg_recv(f, socket, flags) < 0) {
      zmq_msg_close(f);
      if (keep) frames->pop_back();
      return false;
    }
    more = zmq_msg_more(f);
    if (!keep) {
      zmq_msg_close(f);
      ++*extra;
    }
  }
  return true;
}

std::string LaneKey(const Origin& origin) {
  return origin.inbound ? DataIdentity(origin.identity) : ShmLanes::PeerKey(origin.peer);
}

}  // namespace

void Van::ReceiveFrom(void* socket, bool inbound, int peer) {
  for (int n = 0; n < 64; ++n) {
    std::vector<zmq_msg_t> frames;
    size_t extra = 0;
    if (!ReceiveMultipart(socket, &frames, &extra)) return;
    Origin origin;
    origin.inbound = inbound;
    origin.peer = peer;
    size_t first = 0;
    if (inbound) {
      origin.identity.assign(static_cast<char*>(zmq_msg_data(&frames[0])), zmq_msg_size(&frames[0]));
      first = 1;
    }
    size_t data_frames = frames.size() + extra - first;
    uint64_t total = 0;
    for (auto& f : frames) total += zmq_msg_size(&f);
    counters_.bytes_received += total;
    Status invalid = Status::Ok();
    std::string error;
    Message message;
    bool parsed = false;
    if (data_frames < 1 || data_frames > 2) {
      error = StrCat(data_frames, " frames (a Ferry message has 1 or 2)");
    } else if (ParseEnvelope(zmq_msg_data(&frames[first]), zmq_msg_size(&frames[first]),
                             &message.envelope, &error)) {
      parsed = true;
      if (data_frames == 2) {
        auto owner = std::make_shared<FrameOwner>();
        zmq_msg_init(&owner->msg);
        zmq_msg_move(&owner->msg, &frames[first + 1]);
        message.payload = Buffer(zmq_msg_data(&owner->msg), zmq_msg_size(&owner->msg), owner);
      }
      if (message.envelope.has_shm_slot()) {
        invalid = !message.payload.empty()
                      ? BadMessageError("a shared-memory descriptor and a payload frame")
                  : lanes_ ? lanes_->Resolve(LaneKey(origin), &message)
                           : BadMessageError("a shared-memory descriptor, but FERRY_SHM is off");
      }
      if (invalid.ok()) invalid = ValidateMessage(message, options_.max_message_bytes);
      error = invalid.message();
    }
    CloseFrames(frames);
    if (!error.empty()) {
      uint64_t count = ++counters_.bad_messages_dropped;
      if (parsed && inbound && options_.on_version_mismatch && message.type() == proto::REGISTER &&
          message.envelope.version() != kProtocolVersion) {
        options_.on_version_mismatch(message, origin);  // it answers, and logs
        continue;
      }
      if (count <= 20 || count % 1000 == 0) {
        LOG(WARNING) << options_.name << ": dropped a bad message from "
                     << (inbound ? "an inbound connection" : StrCat("node ", peer)) << ": "
                     << error << " (" << count << " dropped so far)";
      }
      if (parsed && inbound && options_.on_invalid) options_.on_invalid(message, invalid, origin);
      continue;
    }
    counters_.messages_received++;
    if (message.type() == proto::SHM_READY) {  // the lane's own: never reaches the handler
      std::vector<ShmLanes::Outgoing> answers;
      if (lanes_) lanes_->OnReady(LaneKey(origin), message, &answers);
      SendLaneMessages(&answers);
      continue;
    }
    if (!faults_.Deliver(std::move(message), origin, handler_)) {  // left as it was
      counters_.injected_drops++;
      VLOG(1) << options_.name << ": fault injection dropped " << Describe(message);
    }
  }
}

}  // namespace ferry
