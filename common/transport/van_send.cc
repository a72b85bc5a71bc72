// The Van's sending side: a message's frames (zero copy, with the hold ZeroMQ keeps until
// it releases the payload), the command pipe from other threads, the order queues (van.h,
// "Order"; common/transport/order_queue.h) and the transmission on a socket.

#include <glog/logging.h>
#include <unistd.h>
#include <zmq.h>

#include <cstring>

#include "common/transport/van.h"
#include "common/transport/van_internal.h"
#include "common/util/logging.h"

namespace ferry {

using van_internal::SendBytes;

namespace {

// ZeroMQ calls this (on its own IO thread) once a payload frame's bytes are no longer
// needed; dropping the owner reference may free the bytes or tell their owner.
void ReleasePayload(void* data, void* hint) {
  auto* hold = static_cast<PayloadHold*>(hint);
  hold->unreleased->fetch_sub(hold->bytes, std::memory_order_relaxed);
  if (std::atomic<uint64_t>* d = hold->destination.load(std::memory_order_acquire)) {
    d->fetch_sub(hold->bytes, std::memory_order_relaxed);
    if (std::atomic<uint64_t>* c = hold->critical.load(std::memory_order_acquire)) {
      c->fetch_sub(hold->bytes, std::memory_order_relaxed);
    }
    const uint64_t one = 1;  // wakes the IO thread: the destination may take the next reply
    ssize_t written = write(hold->wake_fd, &one, sizeof one);
    (void)written;  // cannot fail: the descriptor outlives every hold, the count cannot overflow
  }
  if (*hold->observer) (*hold->observer)(data);
  delete hold;
}

// Whether a message with tensor bytes goes through the order queues (van.h, Order and
// Links): with a watermark, always; under link scheduling, a send, and anything while a flow
// is open (when none is, every queue is empty: the last flow's end pumped them all).
bool Queued(const VanOptions& options, size_t open_flows, bool critical) {
  return options.watermark_bytes > 0 || (options.link_scheduling && (critical || open_flows > 0));
}

// Closes the flows of `order` that are measured gone (van.h, Links): a flow ends once
// nothing of it is queued, unreleased or in the kernel, or at once while its connection is
// down (ZeroMQ keeps its bytes until a reconnect: none is on a link, and a dead peer must
// not hold this worker's other traffic for good). `data_fd(peer)`: the descriptor of the
// peer's data connection, -1 while it is down.
template <typename Queues, typename DataFd>
void CloseFlowsGone(Queues& order, DataFd&& data_fd) {
  for (auto* d : order.OpenFlows()) {
    const int fd = data_fd(d->peer());
    const bool sent = d->critical_queued() == 0 &&
                      d->critical_unreleased().load(std::memory_order_relaxed) == 0;
    if (fd < 0 || (sent && LinkPaths::Drained(fd))) order.CloseFlow(*d);
  }
}

void RaiseMax(std::atomic<uint64_t>& max, uint64_t value) {
  uint64_t seen = max.load(std::memory_order_relaxed);
  while (value > seen && !max.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

// Sends one frame; `more` sets ZMQ_SNDMORE. Returns false on failure (errno set).
bool SendFrame(void* socket, zmq_msg_t* msg, bool more) {
  return zmq_msg_send(msg, socket, (more ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) >= 0;
}

}  // namespace

void Van::QueueData(const std::string& name, int peer, Frames* frames) {
  auto owned = std::make_unique<OwnedFrames>();
  zmq_msg_move(&owned->f.envelope, &frames->envelope);
  zmq_msg_move(&owned->f.payload, &frames->payload);
  owned->f.has_payload = true;
  owned->f.hold = frames->hold;
  zmq_msg_close(&frames->envelope);  // moved from: empty
  zmq_msg_close(&frames->payload);
  frames->hold->built.load(std::memory_order_acquire);  // before its fields: PayloadHold::built
  OrderQueue::Destination& d = order_.At(name, peer);
  order_.Push(d, frames->priority, frames->hold->bytes, std::move(owned), frames->critical);
  counters_.data_queued++;
  counters_.link_flows.store(order_.flows_opened(), std::memory_order_relaxed);
  counters_.link_held.store(order_.held_items(), std::memory_order_relaxed);
  Pump(&d);  // only its queue changed
}

void Van::Pump(OrderQueue::Destination* only) {
  if (!only) {
    CloseFlowsGone(order_, [this](int peer) {
      Connection* c = peer >= 0 ? FindConnection(peer) : nullptr;
      return c ? c->data_fd : -1;
    });
  }
  auto hand_over = [this](OrderQueue::Destination& d, std::unique_ptr<OwnedFrames> owned,
                          bool critical) {
    Frames f;
    zmq_msg_init(&f.envelope);
    zmq_msg_init(&f.payload);
    zmq_msg_move(&f.envelope, &owned->f.envelope);
    zmq_msg_move(&f.payload, &owned->f.payload);
    f.has_payload = true;
    PayloadHold* hold = owned->f.hold;  // read in order after QueueData's acquire of `built`
    // Its bytes are counted (OrderQueues::Pump) before ZeroMQ can release them; the hook
    // subtracts them and wakes the IO thread.
    if (critical) hold->critical.store(&d.critical_unreleased(), std::memory_order_release);
    hold->destination.store(&d.unreleased(), std::memory_order_release);
    if (d.peer() >= 0) {
      Connection* p = FindConnection(d.peer());
      Transmit(p ? p->socket : nullptr, nullptr, &f, StrCat("node ", d.peer()));
    } else {
      Transmit(router_, &d.name(), &f, "an inbound peer");
    }
  };
  counters_.data_reordered += only ? order_.Pump(*only, hand_over) : order_.PumpAll(hand_over);
}

void Van::TransmitToPeer(int peer, Frames* frames) {
  if (frames->critical && options_.watermark_bytes == 0 &&
      options_.watermark_bytes_from_first_send > 0) {
    // The first send: the transport orders tensor bytes from now on (van.h, VanOptions).
    options_.watermark_bytes = options_.watermark_bytes_from_first_send;
    order_.SetWatermark(options_.watermark_bytes);
    if (options_.tcp_notsent_lowat == 0 && options_.tcp_notsent_lowat_from_first_send > 0) {
      options_.tcp_notsent_lowat = options_.tcp_notsent_lowat_from_first_send;
      for (const auto& c : connections_) {
        if (c->data_fd >= 0) TuneConnection(c->data_fd);
      }
    }
    LOG(INFO) << options_.name << ": a point-to-point send: watermark " << options_.watermark_bytes
            << " bytes, TCP_NOTSENT_LOWAT " << options_.tcp_notsent_lowat << " from now on";
  }
  if (!frames->control && frames->has_payload && Queued(options_, order_.open_flows(), frames->critical)) {
    QueueData(van_internal::PeerQueueName(peer), peer, frames);
    return;
  }
  Connection* p = FindConnection(peer);
  void* socket = !p ? nullptr : (frames->control && p->control) ? p->control : p->socket;
  Transmit(socket, nullptr, frames, StrCat("node ", peer));
}

void Van::TransmitReply(const std::string& identity, Frames* frames) {
  // Only where lanes exist: an identity ZeroMQ made up (a peer without a routing id) may
  // end in the control byte by chance.
  const std::string data_identity = options_.control_lane ? DataIdentity(identity) : identity;
  if (!frames->control && frames->has_payload && Queued(options_, order_.open_flows(), frames->critical)) {
    QueueData(data_identity, -1, frames);
    return;
  }
  if (frames->control && options_.control_lane) {
    // ROUTER_MANDATORY refuses an identity with no connection at its first frame, before
    // anything of the message is taken: then the data connection carries it.
    const std::string control = ControlIdentity(data_identity);
    if (SendBytes(router_, control.data(), control.size(), true)) {
      Transmit(router_, nullptr, frames, "an inbound peer's control connection");
      return;
    }
    counters_.control_fallbacks++;
  }
  Transmit(router_, &data_identity, frames, "an inbound peer");
}

Van::Frames Van::BuildFrames(const Message& message) {
  Frames f;
  f.control = IsControlMessage(message.type());
  f.priority = message.envelope.priority();
  f.critical = options_.link_scheduling && message.type() == proto::P2P_SEND &&
               !message.payload.empty();
  std::string envelope = message.envelope.SerializeAsString();
  zmq_msg_init_size(&f.envelope, envelope.size());
  std::memcpy(zmq_msg_data(&f.envelope), envelope.data(), envelope.size());
  f.has_payload = !message.payload.empty();
  if (f.has_payload) {
    // Zero copy: ZeroMQ sends from the payload's own bytes and holds its owner until
    // the release hook runs.
    const uint64_t bytes = message.payload.size();
    RaiseMax(counters_.unreleased_bytes_max,
             counters_.unreleased_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes);
    f.hold = new PayloadHold{message.payload.owner(), &options_.on_payload_released,
                             &counters_.unreleased_bytes, bytes, wake_fd_};
    f.hold->built.store(true, std::memory_order_release);
    zmq_msg_init_data(&f.payload, message.payload.data(), bytes, ReleasePayload, f.hold);
  }
  return f;
}

void Van::Transmit(void* socket, const std::string* identity, Frames* f,
                   const std::string& target) {
  size_t bytes = zmq_msg_size(&f->envelope) + (f->has_payload ? zmq_msg_size(&f->payload) : 0);
  bool ok = socket && (!identity || SendBytes(socket, identity->data(), identity->size(), true)) &&
            SendFrame(socket, &f->envelope, f->has_payload) &&
            (!f->has_payload || SendFrame(socket, &f->payload, false));
  // Closing a frame that was sent is a no-op; closing an unsent one releases it.
  zmq_msg_close(&f->envelope);
  if (f->has_payload) zmq_msg_close(&f->payload);
  if (!ok) {
    counters_.send_failures++;
    FERRY_LOG_EVERY_T(WARNING, 1) << options_.name << ": send to " << target << " failed: "
                                  << (socket ? zmq_strerror(zmq_errno()) : "no connection");
    return;
  }
  counters_.messages_sent++;
  counters_.bytes_sent += bytes;
  if (f->has_payload) counters_.payloads_sent_zero_copy++;
}

// Pipe frames: [command(1) + peer(4) + flag(1) + priority(4) + hold(8)] [text]
// [extra or envelope] [payload?]. The flag is Frames::control (bit 0) and Frames::critical
// (bit 1) for kSend/kReply, the control lane for kConnect; priority and hold are the Frames' (the pipe is in-process).
void Van::Enqueue(Command command, int peer, bool flag, const std::string& text,
                  const Message* message, const std::string& extra) {
  char header[kPipeHeaderBytes];
  header[0] = static_cast<char>(command);
  std::memcpy(header + 1, &peer, 4);
  header[5] = flag ? 1 : 0;
  Frames f;
  if (message) {
    f = BuildFrames(*message);
    header[5] = static_cast<char>((f.control ? 1 : 0) | (f.critical ? 2 : 0));
  }
  std::memcpy(header + 6, &f.priority, 4);
  std::memcpy(header + 10, &f.hold, sizeof f.hold);
  if (!message) {
    zmq_msg_init_size(&f.envelope, extra.size());
    std::memcpy(zmq_msg_data(&f.envelope), extra.data(), extra.size());
  }
  MutexLock lock(push_mutex_);
  if (pipe_closed_) {  // stopped: late sends (a heartbeat, a reply) are dropped
    zmq_msg_close(&f.envelope);
    if (f.has_payload) zmq_msg_close(&f.payload);
    return;
  }
  if (command == Command::kStop) pipe_closed_ = true;
  // The inproc pipe has no high-water mark and its reader is always connected, so
  // these sends cannot fail short of memory exhaustion.
  CHECK_GE(zmq_send(command_push_, header, sizeof header, ZMQ_SNDMORE), 0);
  CHECK_GE(zmq_send(command_push_, text.data(), text.size(), ZMQ_SNDMORE), 0);
  CHECK_GE(zmq_msg_send(&f.envelope, command_push_, f.has_payload ? ZMQ_SNDMORE : 0), 0);
  if (f.has_payload) CHECK_GE(zmq_msg_send(&f.payload, command_push_, 0), 0);
}

void Van::SendLaneMessages(std::vector<ShmLanes::Outgoing>* out) {
  for (ShmLanes::Outgoing& o : *out) {
    if (o.peer >= 0) {
      Send(o.peer, std::move(o.message));
    } else {
      Reply(o.identity, std::move(o.message));
    }
  }
  out->clear();
}

}  // namespace ferry
