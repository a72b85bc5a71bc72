#include "common/transport/van.h"

#include <glog/logging.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <limits>
#include <map>
#include <set>

#include "common/util/clock.h"
#include "common/util/logging.h"
#include "common/util/status.h"

namespace ferry {

struct Van::OwnedFrames {
  Frames f;
  OwnedFrames() {
    zmq_msg_init(&f.envelope);
    zmq_msg_init(&f.payload);
  }
  ~OwnedFrames() {  // closing a moved-from (empty) frame is a no-op
    zmq_msg_close(&f.envelope);
    zmq_msg_close(&f.payload);
  }
};

struct Van::Destination {
  std::string name;  // inbound: the node's data routing id; outbound: a name for the peer
  int peer = -1;     // outbound: the peer's id; -1: inbound (reached through the ROUTER)
  std::atomic<uint64_t> unreleased{0};  // payload bytes handed to ZeroMQ, not yet released
  // Waiting messages, most urgent first: key (-priority, arrival).
  std::map<std::pair<int64_t, uint64_t>, std::unique_ptr<OwnedFrames>> queue;
  std::set<uint64_t> arrivals;  // the arrival numbers in `queue`: the oldest is begin()
};

struct Van::Connection {
  int id = -1;
  void* socket = nullptr;   // the data lane (every message without a control lane)
  void* control = nullptr;  // the control lane, or null
  void* monitor = nullptr;  // the data lane's connection events (tcp_notsent_lowat), or null
  std::string endpoint;
};

namespace {
constexpr char kControlSuffix = '\x01';  // Ferry's routing ids are printable (NewRoutingId)
}  // namespace

std::string ControlIdentity(const std::string& data_identity) {
  return data_identity + kControlSuffix;
}

bool IsControlIdentity(const std::string& identity) {
  return !identity.empty() && identity.back() == kControlSuffix;
}

std::string DataIdentity(const std::string& identity) {
  return IsControlIdentity(identity) ? identity.substr(0, identity.size() - 1) : identity;
}

namespace {

std::atomic<uint64_t> g_pipe_counter{0};

[[noreturn]] void ThrowZmq(const std::string& what) {
  throw FerryError(ErrorCode::kInternal, StrCat(what, ": ", zmq_strerror(zmq_errno())));
}

void SetInt(void* socket, int option, int value) {
  if (zmq_setsockopt(socket, option, &value, sizeof value) != 0) ThrowZmq("zmq_setsockopt");
}

}  // namespace

// What ZeroMQ holds for a payload it sends from the caller's memory.
struct PayloadHold {
  std::shared_ptr<void> owner;
  const std::function<void(const void*)>* observer;  // the Van's; outlives every hold
  std::atomic<uint64_t>* unreleased;                 // the Van's gauge; outlives every hold
  uint64_t bytes;
  int wake_fd;  // the Van's eventfd; outlives every hold
  // Set by the IO thread just before a queued reply goes to ZeroMQ (Order in van.h): its
  // destination's unreleased bytes.
  std::atomic<std::atomic<uint64_t>*> destination{nullptr};
  // Set once built. A hold travels to the IO thread through ZeroMQ's inproc pipe, whose
  // lock-free hand-off ThreadSanitizer cannot see (libzmq is not instrumented); the IO
  // thread reads this (acquire) before the other fields, which makes the order visible.
  std::atomic<bool> built{false};
};

namespace {

// ZeroMQ calls this (on its own IO thread) once a payload frame's bytes are no longer
// needed; dropping the owner reference may free the bytes or tell their owner.
void ReleasePayload(void* data, void* hint) {
  auto* hold = static_cast<PayloadHold*>(hint);
  hold->unreleased->fetch_sub(hold->bytes, std::memory_order_relaxed);
  if (std::atomic<uint64_t>* d = hold->destination.load(std::memory_order_acquire)) {
    d->fetch_sub(hold->bytes, std::memory_order_relaxed);
    const uint64_t one = 1;  // wakes the IO thread: the destination may take the next reply
    ssize_t written = write(hold->wake_fd, &one, sizeof one);
    (void)written;  // cannot fail: the descriptor outlives every hold, the count cannot overflow
  }
  if (*hold->observer) (*hold->observer)(data);
  delete hold;
}

void RaiseMax(std::atomic<uint64_t>& max, uint64_t value) {
  uint64_t seen = max.load(std::memory_order_relaxed);
  while (value > seen && !max.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

// A zmq_msg_t that owns a received frame; the payload Buffer's owner.
struct FrameOwner {
  zmq_msg_t msg;
  ~FrameOwner() { zmq_msg_close(&msg); }
};

// Sends one frame; `more` sets ZMQ_SNDMORE. Returns false on failure (errno set).
bool SendFrame(void* socket, zmq_msg_t* msg, bool more) {
  return zmq_msg_send(msg, socket, (more ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) >= 0;
}

bool SendBytes(void* socket, const void* data, size_t size, bool more) {
  return zmq_send(socket, data, size, (more ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) >= 0;
}

void CloseFrames(std::vector<zmq_msg_t>& frames) {
  for (auto& f : frames) zmq_msg_close(&f);
  frames.clear();
}

}  // namespace

Van::Van(VanOptions options)
    : options_(std::move(options)), drop_random_(std::random_device()()) {
  context_ = zmq_ctx_new();
  if (!context_) ThrowZmq("zmq_ctx_new");
  zmq_ctx_set(context_, ZMQ_BLOCKY, 0);
  pipe_endpoint_ = StrCat("inproc://ferry-van-", g_pipe_counter.fetch_add(1));
  command_pull_ = zmq_socket(context_, ZMQ_PULL);
  command_push_ = zmq_socket(context_, ZMQ_PUSH);
  if (!command_pull_ || !command_push_) ThrowZmq("zmq_socket(inproc pipe)");
  SetInt(command_pull_, ZMQ_RCVHWM, 0);
  SetInt(command_push_, ZMQ_SNDHWM, 0);
  if (zmq_bind(command_pull_, pipe_endpoint_.c_str()) != 0) ThrowZmq("zmq_bind(inproc pipe)");
  if (zmq_connect(command_push_, pipe_endpoint_.c_str()) != 0) ThrowZmq("zmq_connect(inproc)");
  if (!options_.secret.empty()) {
    if (!CurveAvailable()) {
      throw FerryError(ErrorCode::kInvalidConfig,
                       "FERRY_SECRET is set but this libzmq has no CURVE support");
    }
    secure_ = true;
    keys_ = DeriveCurveKeys(options_.secret);
    // ZeroMQ asks the handler bound here (RFC 27) about every CURVE client.
    zap_ = zmq_socket(context_, ZMQ_REP);
    if (!zap_ || zmq_bind(zap_, "inproc://zeromq.zap.01") != 0) ThrowZmq("ZAP handler");
  }
  if (options_.shm.enabled) lanes_ = std::make_unique<ShmLanes>(options_.shm, options_.name);
  // Last: nothing after it throws, so the descriptor cannot leak from a failed constructor.
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    throw FerryError(ErrorCode::kInternal, StrCat("eventfd: ", std::strerror(errno)));
  }
}

Van::~Van() { Stop(); }

int Van::Bind(const std::string& host, int port) {
  CHECK(!started_) << "Van::Bind after Start";
  router_ = zmq_socket(context_, ZMQ_ROUTER);
  if (!router_) ThrowZmq("zmq_socket(ROUTER)");
  SetInt(router_, ZMQ_SNDHWM, 0);
  SetInt(router_, ZMQ_RCVHWM, 0);
  SetInt(router_, ZMQ_ROUTER_MANDATORY, 1);
  // A peer that reconnects (after a link failure) takes its routing id back at once.
  SetInt(router_, ZMQ_ROUTER_HANDOVER, 1);
  // A connection that does not complete the ZMTP (and CURVE) handshake in time is
  // closed: a flood of silent connections cannot hold descriptors for long.
  SetInt(router_, ZMQ_HANDSHAKE_IVL, options_.handshake_timeout_ms);
  ApplyLinkOptions(router_);
  SetInt(router_, ZMQ_LINGER, options_.linger_ms);
  int64_t max_size = static_cast<int64_t>(options_.max_message_bytes);
  zmq_setsockopt(router_, ZMQ_MAXMSGSIZE, &max_size, sizeof max_size);
  if (secure_) {
    SetInt(router_, ZMQ_CURVE_SERVER, 1);
    zmq_setsockopt(router_, ZMQ_CURVE_SECRETKEY, keys_.server_secret.data(), 32);
    zmq_setsockopt(router_, ZMQ_ZAP_DOMAIN, "ferry", 5);
  }
  // Failed handshakes (garbage, wrong secret) are logged from the IO thread; accepted
  // connections get tcp_notsent_lowat there.
  monitor_ = Monitor(router_, ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                  ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_DISCONNECTED |
                                  (options_.tcp_notsent_lowat > 0 ? ZMQ_EVENT_ACCEPTED : 0));
  std::string endpoint = StrCat("tcp://", host, ":", port == 0 ? std::string("*") : std::to_string(port));
  if (zmq_bind(router_, endpoint.c_str()) != 0) {
    throw FerryError(ErrorCode::kInvalidConfig,
                     StrCat("cannot listen on ", host, ":", port, ": ", zmq_strerror(zmq_errno())));
  }
  char last[256] = {0};
  size_t len = sizeof last;
  zmq_getsockopt(router_, ZMQ_LAST_ENDPOINT, last, &len);
  std::string bound(last);
  const int bound_port = std::stoi(bound.substr(bound.rfind(':') + 1));
  if (lanes_) lanes_->Listen(bound_port);
  return bound_port;
}

void* Van::Monitor(void* socket, int events) {
  std::string endpoint = StrCat(pipe_endpoint_, "-monitor-", monitors_made_++);
  if (zmq_socket_monitor(socket, endpoint.c_str(), events) != 0) return nullptr;
  void* pair = zmq_socket(context_, ZMQ_PAIR);
  if (pair && zmq_connect(pair, endpoint.c_str()) != 0) {
    zmq_close(pair);
    pair = nullptr;
  }
  return pair;
}

void Van::Start(Handler handler) {
  CHECK(!started_) << "Van::Start twice";
  handler_ = std::move(handler);
  started_ = true;
  std::promise<void> ready;
  auto ready_future = ready.get_future();
  io_thread_ = std::thread([this, &ready] {
    pthread_setname_np(pthread_self(), "van-io");
    io_thread_id_ = std::this_thread::get_id();
    ready.set_value();
    IoLoop();
  });
  ready_future.wait();
}

void Van::Stop() {
  if (stopped_.exchange(true)) return;
  if (started_) {
    CHECK(std::this_thread::get_id() != io_thread_id_) << "Van::Stop from its own IO thread";
    Enqueue(Command::kStop, 0, false, "", nullptr);  // the last command the pipe carries
    io_thread_.join();  // the IO thread closes its sockets on the way out
  } else {
    {
      MutexLock lock(push_mutex_);
      pipe_closed_ = true;
    }
    zmq_close(command_pull_);
    if (router_) zmq_close(router_);
    if (zap_) zmq_close(zap_);
    if (monitor_) zmq_close(monitor_);
  }
  {
    MutexLock lock(push_mutex_);  // pipe_closed_: no thread uses the socket any more
    zmq_close(command_push_);
    command_push_ = nullptr;
  }
  // Blocks until every socket flushed (up to linger_ms) and ZeroMQ dropped every
  // message: after this, no release hook can run (so none writes to wake_fd_).
  zmq_ctx_term(context_);
  close(wake_fd_);
}

void Van::Connect(int peer, const std::string& endpoint, const std::string& routing_id,
                  bool control_lane) {
  if (lanes_) lanes_->ExpectOpen();  // DoConnect opens it (or finds it impossible)
  if (!started_ || std::this_thread::get_id() == io_thread_id_) {
    DoConnect(peer, endpoint, routing_id, control_lane);
    return;
  }
  Enqueue(Command::kConnect, peer, control_lane, endpoint, nullptr, routing_id);
}

void Van::Send(int peer, Message message) {
  if (lanes_ && !message.payload.empty()) lanes_->Encode(ShmLanes::PeerKey(peer), &message);
  if (std::this_thread::get_id() != io_thread_id_) {
    Enqueue(Command::kSend, peer, false, "", &message);
    return;
  }
  DrainCommands(std::numeric_limits<int>::max());  // what other threads sent before: first
  Frames frames = BuildFrames(message);
  TransmitToPeer(peer, &frames);
}

void Van::Reply(const std::string& identity, Message message) {
  if (lanes_ && !message.payload.empty()) {
    lanes_->Encode(options_.control_lane ? DataIdentity(identity) : identity, &message);
  }
  if (std::this_thread::get_id() != io_thread_id_) {
    Enqueue(Command::kReply, 0, false, identity, &message);
    return;
  }
  DrainCommands(std::numeric_limits<int>::max());  // as in Send
  Frames frames = BuildFrames(message);
  TransmitReply(identity, &frames);
}

void Van::HoldDataReadsForTest(bool hold) {
  Enqueue(Command::kHoldReads, 0, hold, "", nullptr);
  // Returns once the IO thread applied it (it reads nothing more from a held socket).
  const int64_t deadline = NowMs() + 10000;
  while (data_reads_held_.load() != hold) {
    CHECK_LT(NowMs(), deadline) << options_.name << ": the IO thread did not take the hold";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void Van::HoldDataQueuesForTest(bool hold) {
  Enqueue(Command::kHoldQueues, 0, hold, "", nullptr);
}

void Van::QueueData(const std::string& name, int peer, Frames* frames) {
  std::unique_ptr<Destination>& d = destinations_[name];
  if (!d) {
    d = std::make_unique<Destination>();
    d->name = name;
    d->peer = peer;
  }
  auto owned = std::make_unique<OwnedFrames>();
  zmq_msg_move(&owned->f.envelope, &frames->envelope);
  zmq_msg_move(&owned->f.payload, &frames->payload);
  owned->f.has_payload = true;
  owned->f.hold = frames->hold;
  zmq_msg_close(&frames->envelope);  // moved from: empty
  zmq_msg_close(&frames->payload);
  d->queue.emplace(std::make_pair(-static_cast<int64_t>(frames->priority), next_seq_),
                   std::move(owned));
  d->arrivals.insert(next_seq_++);
  counters_.data_queued++;
  Pump(*d);
}

void Van::Pump(Destination& d) {
  while (!hold_data_queues_ && !d.queue.empty() &&
         d.unreleased.load(std::memory_order_relaxed) < options_.watermark_bytes) {
    auto first = d.queue.begin();
    if (first->first.second != *d.arrivals.begin()) counters_.data_reordered++;
    d.arrivals.erase(first->first.second);
    Frames f;
    zmq_msg_init(&f.envelope);
    zmq_msg_init(&f.payload);
    zmq_msg_move(&f.envelope, &first->second->f.envelope);
    zmq_msg_move(&f.payload, &first->second->f.payload);
    f.has_payload = true;
    PayloadHold* hold = first->second->f.hold;
    hold->built.load(std::memory_order_acquire);  // see PayloadHold::built
    d.queue.erase(first);
    // Counted before ZeroMQ can release it; the hook subtracts it and wakes us.
    d.unreleased.fetch_add(hold->bytes, std::memory_order_relaxed);
    hold->destination.store(&d.unreleased, std::memory_order_release);
    if (d.peer >= 0) {
      Connection* p = FindConnection(d.peer);
      Transmit(p ? p->socket : nullptr, nullptr, &f, StrCat("node ", d.peer));
    } else {
      Transmit(router_, &d.name, &f, "an inbound peer");
    }
  }
}

void Van::PumpAll() {
  for (auto& [name, d] : destinations_) Pump(*d);
}

void Van::TransmitToPeer(int peer, Frames* frames) {
  if (!frames->control && frames->has_payload && options_.watermark_bytes > 0) {
    QueueData(StrCat("\x02node ", peer), peer, frames);  // no routing id starts with 0x02
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
  if (!frames->control && frames->has_payload && options_.watermark_bytes > 0) {
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
// [extra or envelope] [payload?]. The flag is Frames::control for kSend/kReply, the control
// lane for kConnect; priority and hold are the Frames' (the pipe is in-process).
void Van::Enqueue(Command command, int peer, bool flag, const std::string& text,
                  const Message* message, const std::string& extra) {
  char header[kPipeHeaderBytes];
  header[0] = static_cast<char>(command);
  std::memcpy(header + 1, &peer, 4);
  header[5] = flag ? 1 : 0;
  Frames f;
  if (message) {
    f = BuildFrames(*message);
    header[5] = f.control ? 1 : 0;
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

void Van::DrainCommands(int max) {
  // A bounded batch, so inbound traffic is not starved; nothing after a stop.
  for (int i = 0; i < max && !stop_; ++i) {
    zmq_msg_t header;
    zmq_msg_init(&header);
    if (zmq_msg_recv(&header, command_pull_, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&header);
      break;
    }
    const char* head = static_cast<char*>(zmq_msg_data(&header));
    Command command = static_cast<Command>(head[0]);
    int peer;
    std::memcpy(&peer, head + 1, 4);
    const bool flag = head[5] != 0;
    int32_t priority;
    std::memcpy(&priority, head + 6, 4);
    PayloadHold* hold;
    std::memcpy(&hold, head + 10, sizeof hold);
    zmq_msg_close(&header);
    std::vector<zmq_msg_t> frames;
    frames.reserve(3);  // text, envelope, payload: never reallocated
    int more = 1;
    while (more) {
      CHECK_LT(frames.size(), 3u) << "malformed command in the van's own pipe";
      zmq_msg_t* f = &frames.emplace_back();
      zmq_msg_init(f);
      CHECK_GE(zmq_msg_recv(f, command_pull_, 0), 0);
      more = zmq_msg_more(f);
    }
    std::string text(static_cast<char*>(zmq_msg_data(&frames[0])), zmq_msg_size(&frames[0]));
    switch (command) {
      case Command::kStop:
        stop_ = true;
        break;
      case Command::kHoldReads:
        hold_data_reads_ = flag;
        reads_changed_ = true;
        data_reads_held_.store(flag);
        break;
      case Command::kHoldQueues:
        hold_data_queues_ = flag;
        if (!flag) PumpAll();
        break;
      case Command::kConnect:
        DoConnect(peer, text,
                  std::string(static_cast<char*>(zmq_msg_data(&frames[1])), zmq_msg_size(&frames[1])),
                  flag);
        break;
      case Command::kSend:
      case Command::kReply: {
        Frames f;
        f.control = flag;
        f.priority = priority;
        f.hold = hold;
        zmq_msg_init(&f.envelope);
        zmq_msg_move(&f.envelope, &frames[1]);
        f.has_payload = frames.size() > 2;
        if (f.has_payload) {
          zmq_msg_init(&f.payload);
          zmq_msg_move(&f.payload, &frames[2]);
        }
        if (command == Command::kSend) {
          TransmitToPeer(peer, &f);
        } else {
          TransmitReply(text, &f);
        }
        break;
      }
    }
    CloseFrames(frames);
  }
}

void Van::IoLoop() {
  std::vector<zmq_pollitem_t> items;
  std::vector<std::pair<void*, int>> polled;  // outbound sockets polled, and their peers
  std::vector<void*> monitors;                // their monitors, polled after them
  while (!stop_) {  // a kStop read by a handler's Send (DrainCommands) ends the loop too
    for (auto& p : retired_) CloseConnection(*p);  // no receive loop runs on them now
    retired_.clear();
    reads_changed_ = false;
    items.clear();
    items.push_back({command_pull_, 0, ZMQ_POLLIN, 0});
    items.push_back({nullptr, wake_fd_, ZMQ_POLLIN, 0});
    items.push_back({zap_, 0, static_cast<short>(zap_ ? ZMQ_POLLIN : 0), 0});
    items.push_back({monitor_, 0, static_cast<short>(monitor_ ? ZMQ_POLLIN : 0), 0});
    if (router_) items.push_back({router_, 0, ZMQ_POLLIN, 0});
    // Peers may be added by handlers while we iterate; only visit the polled ones.
    polled.clear();
    for (auto& p : connections_) {
      if (!(hold_data_reads_ && p->control)) polled.emplace_back(p->socket, p->id);
      if (p->control) polled.emplace_back(p->control, p->id);
    }
    for (auto& [socket, peer] : polled) items.push_back({socket, 0, ZMQ_POLLIN, 0});
    monitors.clear();
    for (auto& p : connections_) {
      if (p->monitor) monitors.push_back(p->monitor);
    }
    for (void* m : monitors) items.push_back({m, 0, ZMQ_POLLIN, 0});
    const std::vector<int> lane_fds = lanes_ ? lanes_->PollFds() : std::vector<int>();
    for (int fd : lane_fds) items.push_back({nullptr, fd, ZMQ_POLLIN, 0});
    int rc = zmq_poll(items.data(), static_cast<int>(items.size()), PollTimeoutMs());
    if (rc < 0) {
      if (zmq_errno() == EINTR) continue;
      LOG(ERROR) << options_.name << ": zmq_poll failed: " << zmq_strerror(zmq_errno());
      continue;
    }
    size_t index = 0;
    if (items[index++].revents & ZMQ_POLLIN) {
      DrainCommands(256);
      if (stop_) break;
      // The sockets polled this round were chosen before the change: poll again.
      if (reads_changed_) continue;
    }
    if (items[index++].revents & ZMQ_POLLIN) {  // releases: the reply order may go on
      uint64_t count;
      ssize_t got = read(wake_fd_, &count, sizeof count);
      (void)got;  // nonblocking; nothing to do on EAGAIN
      PumpAll();
    }
    if (items[index++].revents & ZMQ_POLLIN) HandleZapRequest();
    if (items[index++].revents & ZMQ_POLLIN) HandleMonitorEvent(monitor_);
    if (router_ && (items[index++].revents & ZMQ_POLLIN)) ReceiveFrom(router_, true, -1);
    for (size_t i = 0; i < polled.size() && !reads_changed_; ++i) {  // a handler's Send may hold
      if (items[index + i].revents & ZMQ_POLLIN) ReceiveFrom(polled[i].first, false, polled[i].second);
    }
    index += polled.size();
    for (size_t i = 0; i < monitors.size() && !reads_changed_; ++i) {  // as above
      if (items[index + i].revents & ZMQ_POLLIN) HandleMonitorEvent(monitors[i]);
    }
    index += monitors.size();
    std::vector<ShmLanes::Outgoing> lane_messages;
    for (size_t i = 0; i < lane_fds.size(); ++i) {
      if (items[index + i].revents & (ZMQ_POLLIN | ZMQ_POLLERR)) {
        lanes_->OnReadable(lane_fds[i], &lane_messages);
      }
    }
    SendLaneMessages(&lane_messages);
    DeliverDelayed();
  }
  // Shutdown: messages still in the order queues are dropped (their payloads released);
  // sockets flush for up to linger_ms, then close.
  for (auto& [identity, d] : destinations_) {
    d->queue.clear();
    d->arrivals.clear();
  }
  for (auto& p : retired_) CloseConnection(*p);
  retired_.clear();
  for (auto& p : connections_) {
    for (void* socket : {p->socket, p->control}) {
      if (!socket) continue;
      SetInt(socket, ZMQ_LINGER, options_.linger_ms);
      zmq_close(socket);
    }
    if (p->monitor) zmq_close(p->monitor);
  }
  connections_.clear();
  if (router_) zmq_close(router_);
  router_ = nullptr;
  if (monitor_) zmq_close(monitor_);
  monitor_ = nullptr;
  if (zap_) zmq_close(zap_);
  zap_ = nullptr;
  zmq_close(command_pull_);
}

// Receives one multipart message into `frames` (at most kMaxFrames kept; the rest
// are received and discarded, counted in `extra`). Returns false if none was waiting.
// zmq_msg_t must not be copied, so the vector never grows past its reserved size.
bool Van::ReceiveMultipart(void* socket, std::vector<zmq_msg_t>* frames, size_t* extra) {
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
    Deliver(std::move(message), origin);
  }
}

std::string Van::LaneKey(const Origin& origin) const {
  return origin.inbound ? DataIdentity(origin.identity) : ShmLanes::PeerKey(origin.peer);
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

void Van::Deliver(Message&& message, const Origin& origin) {
  if (options_.drop_percent > 0) {
    proto::MessageType t = message.type();
    bool data = t == proto::PUSH || t == proto::PUSH_ACK || t == proto::PUSH_RESULT ||
                t == proto::RESEND_SUM || t == proto::PUSH_FUSED;
    if (data && std::uniform_real_distribution<double>(0, 100)(drop_random_) <
                    options_.drop_percent) {
      counters_.injected_drops++;
      VLOG(1) << options_.name << ": fault injection dropped " << Describe(message);
      return;
    }
  }
  if (options_.delay_ms > 0) {
    delayed_.push_back(Delayed{NowMs() + options_.delay_ms, std::move(message), origin});
    return;
  }
  handler_(std::move(message), origin);
}

void Van::DeliverDelayed() {
  int64_t now = NowMs();
  while (!delayed_.empty() && delayed_.front().due_ms <= now) {
    Delayed d = std::move(delayed_.front());
    delayed_.pop_front();
    handler_(std::move(d.message), d.origin);
  }
}

int Van::PollTimeoutMs() const {
  if (delayed_.empty()) return -1;
  return static_cast<int>(std::max<int64_t>(0, delayed_.front().due_ms - NowMs()));
}

void Van::ApplyLinkOptions(void* socket) {
  if (options_.link_timeout_ms <= 0) return;
  SetInt(socket, ZMQ_HEARTBEAT_IVL, std::max(100, options_.link_timeout_ms / 4));
  SetInt(socket, ZMQ_HEARTBEAT_TIMEOUT, options_.link_timeout_ms);
  SetInt(socket, ZMQ_HEARTBEAT_TTL, options_.link_timeout_ms);
}

void Van::DoConnect(int peer, const std::string& endpoint, const std::string& routing_id,
                    bool control_lane) {
  bool connected = false;
  // Connect counted a lane to open: Open settles it whatever happens here (with no
  // endpoint: at once).
  struct LaneOpen {
    ShmLanes* lanes;
    int peer;
    const std::string& endpoint;
    const std::string& routing_id;
    const bool& connected;
    ~LaneOpen() {
      if (lanes) lanes->Open(peer, connected ? endpoint : std::string(), routing_id);
    }
  } lane_open{lanes_.get(), peer, endpoint, routing_id, connected};
  if (Connection* old = FindConnection(peer)) {
    if (old->endpoint == endpoint) return;
    // Elastic training: a spare server took the slot (and id) of a dead one.
    LOG(INFO) << options_.name << ": node " << peer << " moved from " << old->endpoint << " to "
              << endpoint << "; reconnecting (what was queued for the old one is dropped)";
    // Closed at the top of the next poll round, not here: a handler may be running inside
    // a receive loop on its socket (a Send from a handler drains this command).
    reads_changed_ = true;  // and the round reads nothing more from what it polled
    auto it = std::find_if(connections_.begin(), connections_.end(),
                           [old](const auto& c) { return c.get() == old; });
    retired_.push_back(std::move(*it));
    connections_.erase(it);
  }
  auto p = std::make_unique<Connection>();
  p->id = peer;
  p->endpoint = endpoint;
  try {
    p->socket = NewDealer(routing_id);
    // Before connecting: ZeroMQ does not replay the first connection's event to a
    // monitor attached later.
    if (options_.tcp_notsent_lowat > 0) p->monitor = Monitor(p->socket, ZMQ_EVENT_CONNECTED);
    if (control_lane && !routing_id.empty()) p->control = NewDealer(ControlIdentity(routing_id));
    connected = zmq_connect(p->socket, endpoint.c_str()) == 0 &&
                (!p->control || zmq_connect(p->control, endpoint.c_str()) == 0);
  } catch (const FerryError&) {
    CloseConnection(*p);
    throw;
  }
  if (!connected) {
    LOG(ERROR) << options_.name << ": cannot connect to node " << peer << " at " << endpoint
               << ": " << zmq_strerror(zmq_errno());
    CloseConnection(*p);
    return;
  }
  VLOG(1) << options_.name << ": connected to node " << peer << " at " << endpoint
          << (p->control ? " (data and control connections)" : "");
  connections_.push_back(std::move(p));
}

void Van::CloseConnection(Connection& p) {
  for (void* socket : {p.socket, p.control, p.monitor}) {
    if (socket) zmq_close(socket);
  }
  p.socket = p.control = p.monitor = nullptr;
}

// A DEALER configured to connect as `routing_id` (not connected yet).
void* Van::NewDealer(const std::string& routing_id) {
  void* socket = zmq_socket(context_, ZMQ_DEALER);
  if (!socket) ThrowZmq("zmq_socket(DEALER)");
  SetInt(socket, ZMQ_SNDHWM, 0);
  SetInt(socket, ZMQ_RCVHWM, 0);
  SetInt(socket, ZMQ_LINGER, options_.linger_ms);
  ApplyLinkOptions(socket);
  int64_t max_size = static_cast<int64_t>(options_.max_message_bytes);
  zmq_setsockopt(socket, ZMQ_MAXMSGSIZE, &max_size, sizeof max_size);
  if (!routing_id.empty()) {
    zmq_setsockopt(socket, ZMQ_ROUTING_ID, routing_id.data(), routing_id.size());
  }
  if (secure_) {
    zmq_setsockopt(socket, ZMQ_CURVE_SERVERKEY, keys_.server_public.data(), 32);
    zmq_setsockopt(socket, ZMQ_CURVE_PUBLICKEY, keys_.client_public.data(), 32);
    zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, keys_.client_secret.data(), 32);
  }
  return socket;
}

Van::Connection* Van::FindConnection(int peer) {
  for (auto& p : connections_) {
    if (p->id == peer) return p.get();
  }
  return nullptr;
}

VanStats Van::stats() const {
  VanStats s;
#define FERRY_VAN_COPY(name) s.name = counters_.name.load(std::memory_order_relaxed);
  FERRY_VAN_OWN_COUNTERS(FERRY_VAN_COPY)
#undef FERRY_VAN_COPY
  if (lanes_) {
#define FERRY_VAN_COPY_SHM(name) s.name = lanes_->counters().name.load(std::memory_order_relaxed);
    FERRY_SHM_COUNTERS(FERRY_VAN_COPY_SHM)
#undef FERRY_VAN_COPY_SHM
  }
  return s;
}

}  // namespace ferry
