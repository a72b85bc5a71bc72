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

#include "common/transport/van_internal.h"
#include "common/util/clock.h"
#include "common/util/logging.h"
#include "common/util/status.h"

namespace ferry {

using van_internal::ApplyLinkOptions;
using van_internal::MonitorSocket;
using van_internal::CloseFrames;
using van_internal::SetInt;
using van_internal::ThrowZmq;

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

}  // namespace

Van::Van(VanOptions options)
    : options_(std::move(options)),
      order_(options_.watermark_bytes),
      faults_(options_.drop_percent, options_.delay_ms) {
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
  ApplyLinkOptions(router_, options_.link_timeout_ms);
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
  monitor_ = MonitorSocket(context_, router_, StrCat(pipe_endpoint_, "-monitor-", monitors_made_++),
                           ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
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
    const bool flag = (head[5] & 1) != 0;
    const bool critical = (head[5] & 2) != 0;
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
        order_.Hold(flag);
        if (!flag) Pump();
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
        f.critical = critical;
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
  std::vector<std::pair<void*, int>> monitors;  // their monitors and peers, polled after them
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
      if (p->monitor) monitors.emplace_back(p->monitor, p->id);
    }
    for (auto& [m, peer] : monitors) items.push_back({m, 0, ZMQ_POLLIN, 0});
    const std::vector<int> lane_fds = lanes_ ? lanes_->PollFds() : std::vector<int>();
    for (int fd : lane_fds) items.push_back({nullptr, fd, ZMQ_POLLIN, 0});
    // While a flow is open (Links), its end is measured every millisecond.
    const int faults_ms = faults_.PollTimeoutMs();
    const int timeout_ms = order_.open_flows() == 0 ? faults_ms
                           : faults_ms < 0           ? 1
                                                     : std::min(faults_ms, 1);
    int rc = zmq_poll(items.data(), static_cast<int>(items.size()), timeout_ms);
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
      Pump();
    }
    if (items[index++].revents & ZMQ_POLLIN) HandleZapRequest();
    if (items[index++].revents & ZMQ_POLLIN) HandleMonitorEvent(monitor_);
    if (router_ && (items[index++].revents & ZMQ_POLLIN)) ReceiveFrom(router_, true, -1);
    for (size_t i = 0; i < polled.size() && !reads_changed_; ++i) {  // a handler's Send may hold
      if (items[index + i].revents & ZMQ_POLLIN) ReceiveFrom(polled[i].first, false, polled[i].second);
    }
    index += polled.size();
    for (size_t i = 0; i < monitors.size() && !reads_changed_; ++i) {  // as above
      if (items[index + i].revents & ZMQ_POLLIN) {
        Connection* c = FindConnection(monitors[i].second);
        HandleMonitorEvent(monitors[i].first, c && c->monitor == monitors[i].first ? c : nullptr);
      }
    }
    index += monitors.size();
    std::vector<ShmLanes::Outgoing> lane_messages;
    for (size_t i = 0; i < lane_fds.size(); ++i) {
      if (items[index + i].revents & (ZMQ_POLLIN | ZMQ_POLLERR)) {
        lanes_->OnReadable(lane_fds[i], &lane_messages);
      }
    }
    SendLaneMessages(&lane_messages);
    faults_.DeliverDue(handler_);
    if (order_.open_flows() > 0) Pump();  // measures the flows' ends
  }
  // Shutdown: messages still in the order queues are dropped (their payloads released);
  // sockets flush for up to linger_ms, then close.
  order_.Clear();
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
