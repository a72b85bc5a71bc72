#include "worker/local/local_link.h"

#include <glog/logging.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstring>

#include "common/util/status.h"

namespace ferry {
namespace {

void CheckZmq(int rc, const std::string& what) {
  FERRY_ENFORCE(rc == 0, ErrorCode::kInternal, "local group socket: ", what, ": ",
                zmq_strerror(zmq_errno()));
}

// Receives one frame (ZMQ_DONTWAIT unless `wait`); false when none is there.
bool RecvFrame(void* socket, std::string* out, bool wait) {
  zmq_msg_t msg;
  zmq_msg_init(&msg);
  if (zmq_msg_recv(&msg, socket, wait ? 0 : ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&msg);
    return false;
  }
  out->assign(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
  zmq_msg_close(&msg);
  return true;
}

bool More(void* socket) {
  int more = 0;
  size_t len = sizeof more;
  zmq_getsockopt(socket, ZMQ_RCVMORE, &more, &len);
  return more != 0;
}

}  // namespace

const char* LocalOpName(LocalOp op) {
  switch (op) {
    case LocalOp::kHello:
      return "HELLO";
    case LocalOp::kWelcome:
      return "WELCOME";
    case LocalOp::kPushPull:
      return "PUSH_PULL";
    case LocalOp::kBroadcast:
      return "BROADCAST";
    case LocalOp::kBarrier:
      return "BARRIER";
    case LocalOp::kBye:
      return "BYE";
    case LocalOp::kDone:
      return "DONE";
    case LocalOp::kFail:
      return "FAIL";
    case LocalOp::kDevicePushPull:
      return "DEVICE_PUSH_PULL";
    case LocalOp::kDeviceBroadcast:
      return "DEVICE_BROADCAST";
  }
  return "?";
}

LocalLink::LocalLink(bool bind, const std::string& socket, const std::string& routing_id)
    : bind_(bind), endpoint_("ipc://@" + socket) {
  context_ = zmq_ctx_new();
  socket_ = zmq_socket(context_, bind ? ZMQ_ROUTER : ZMQ_DEALER);
  const int linger = 1000;
  CheckZmq(zmq_setsockopt(socket_, ZMQ_LINGER, &linger, sizeof linger), "ZMQ_LINGER");
  if (bind) {
    const int mandatory = 1;  // a message to a vanished peer fails instead of vanishing
    CheckZmq(zmq_setsockopt(socket_, ZMQ_ROUTER_MANDATORY, &mandatory, sizeof mandatory),
             "ZMQ_ROUTER_MANDATORY");
  } else {
    CheckZmq(zmq_setsockopt(socket_, ZMQ_ROUTING_ID, routing_id.data(), routing_id.size()),
             "ZMQ_ROUTING_ID");
  }
  const std::string monitor = StrCat("inproc://ferry-local-monitor-", this);
  CheckZmq(zmq_socket_monitor(socket_, monitor.c_str(), ZMQ_EVENT_DISCONNECTED),
           "zmq_socket_monitor");
  monitor_ = zmq_socket(context_, ZMQ_PAIR);
  CheckZmq(zmq_connect(monitor_, monitor.c_str()), "monitor connect");
  const int rc =
      bind ? zmq_bind(socket_, endpoint_.c_str()) : zmq_connect(socket_, endpoint_.c_str());
  if (rc != 0) {
    const std::string error = zmq_strerror(zmq_errno());
    Stop();
    throw FerryError(ErrorCode::kInvalidConfig,
                     StrCat("local group socket ", endpoint_, ": cannot ",
                            bind ? "bind" : "connect", ": ", error,
                            bind ? " (another local root with the same scheduler address and "
                                   "DMLC_WORKER_ID on this host? Set FERRY_LOCAL_SOCKET)"
                                 : ""));
  }
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  FERRY_ENFORCE(wake_fd_ >= 0, ErrorCode::kInternal, "eventfd: ", std::strerror(errno));
}

LocalLink::~LocalLink() { Stop(); }

void LocalLink::Start(OnMessage on_message, OnEvent on_disconnect) {
  on_message_ = std::move(on_message);
  on_disconnect_ = std::move(on_disconnect);
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "ferry-local");
    Loop();
  });
}

void LocalLink::Send(LocalMessage m) {
  {
    MutexLock lock(out_mu_);
    if (stopping_) return;
    outbox_.push_back(std::move(m));
  }
  const uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof one);
  (void)ignored;
}

void LocalLink::Loop() {
  for (;;) {
    zmq_pollitem_t items[3] = {{socket_, 0, ZMQ_POLLIN, 0},
                               {monitor_, 0, ZMQ_POLLIN, 0},
                               {nullptr, wake_fd_, ZMQ_POLLIN, 0}};
    // Sends wake the thread (eventfd), messages and disconnects come on the sockets; the
    // timeout only guards against a missed wake-up.
    zmq_poll(items, 3, 1000);
    if (items[2].revents & ZMQ_POLLIN) {
      uint64_t n;
      ssize_t ignored = read(wake_fd_, &n, sizeof n);
      (void)ignored;
    }
    bool stopping;
    {
      MutexLock lock(out_mu_);
      stopping = stopping_;  // read first: what was queued before Stop() is drained next
    }
    Drain();
    if (stopping) return;
    while (ReceiveOne()) {
    }
    if ((items[1].revents & ZMQ_POLLIN) && MonitorEvent()) on_disconnect_();
  }
}

void LocalLink::Drain() {
  std::deque<LocalMessage> out;
  {
    MutexLock lock(out_mu_);
    out.swap(outbox_);
  }
  for (const LocalMessage& m : out) {
    if (bind_ && zmq_send(socket_, m.peer.data(), m.peer.size(), ZMQ_SNDMORE) < 0) {
      LOG(WARNING) << "local group: " << LocalOpName(static_cast<LocalOp>(m.header.op)) << " to "
                   << m.peer << " not sent: " << zmq_strerror(zmq_errno());
      continue;
    }
    zmq_send(socket_, &m.header, sizeof m.header, ZMQ_SNDMORE);
    zmq_send(socket_, m.name.data(), m.name.size(), ZMQ_SNDMORE);
    zmq_send(socket_, m.text.data(), m.text.size(), 0);
  }
}

bool LocalLink::ReceiveOne() {
  std::string frames[4];
  if (!RecvFrame(socket_, &frames[0], false)) return false;
  int n = 1;
  while (More(socket_)) {
    std::string extra;
    RecvFrame(socket_, n < 4 ? &frames[n] : &extra, true);
    ++n;
  }
  const int first = bind_ ? 1 : 0;  // a ROUTER's first frame is the sender's routing id
  if (n != first + 3 || frames[first].size() != sizeof(LocalHeader)) {
    LOG(WARNING) << "local group: dropped a malformed message of " << n << " frames";
    return true;
  }
  LocalMessage m;
  if (bind_) m.peer = frames[0];
  std::memcpy(&m.header, frames[first].data(), sizeof m.header);
  m.name = std::move(frames[first + 1]);
  m.text = std::move(frames[first + 2]);
  on_message_(std::move(m));
  return true;
}

bool LocalLink::MonitorEvent() {
  bool disconnect = false;
  std::string frame;
  while (RecvFrame(monitor_, &frame, false)) {
    uint16_t event = 0;
    if (frame.size() >= sizeof event) std::memcpy(&event, frame.data(), sizeof event);
    if (event == ZMQ_EVENT_DISCONNECTED) disconnect = true;
    while (More(monitor_)) RecvFrame(monitor_, &frame, true);  // the endpoint
  }
  return disconnect;
}

void LocalLink::Stop() {
  {
    MutexLock lock(out_mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) {
    const uint64_t one = 1;
    ssize_t ignored = write(wake_fd_, &one, sizeof one);
    (void)ignored;
    thread_.join();
  }
  if (socket_) zmq_socket_monitor(socket_, nullptr, 0);
  if (monitor_) zmq_close(monitor_);
  if (socket_) zmq_close(socket_);
  if (context_) zmq_ctx_term(context_);  // waits up to ZMQ_LINGER for queued messages
  monitor_ = socket_ = context_ = nullptr;
  if (wake_fd_ >= 0) close(wake_fd_);
  wake_fd_ = -1;
}

}  // namespace ferry
