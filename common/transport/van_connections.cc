// The Van's connections: outbound DEALERs (data and control lanes, CURVE, link timeouts,
// reconnection of a moved peer), and ZeroMQ's side channels the IO thread handles: ZAP
// requests (CURVE authentication of every client, RFC 27) and socket-monitor events
// (refused handshakes, closed connections, TCP_NOTSENT_LOWAT on new ones); and the Van's
// statistics as named counters.

#include <glog/logging.h>
#include <zmq.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/transport/van.h"
#include "common/transport/van_internal.h"
#include "common/util/logging.h"

namespace ferry {

using van_internal::ApplyLinkOptions;
using van_internal::MonitorSocket;
using van_internal::SetInt;
using van_internal::ThrowZmq;

namespace {

std::string FrameString(zmq_msg_t* m) {
  return std::string(static_cast<char*>(zmq_msg_data(m)), zmq_msg_size(m));
}


}  // namespace

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
    if (options_.tcp_notsent_lowat > 0 || options_.link_scheduling) {
      p->monitor = MonitorSocket(context_, p->socket,
                                 StrCat(pipe_endpoint_, "-monitor-", monitors_made_++),
                                 ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED);
    }
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
  ApplyLinkOptions(socket, options_.link_timeout_ms);
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

void Van::HandleZapRequest() {
  // Request (RFC 27): version, request id, domain, address, identity, mechanism,
  // credentials... Reply: version, request id, status code, status text, user, metadata.
  std::vector<std::string> frames;
  int more = 1;
  while (more && frames.size() < 16) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, zap_, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&m);
      return;
    }
    frames.push_back(FrameString(&m));
    more = zmq_msg_more(&m);
    zmq_msg_close(&m);
  }
  bool ok = frames.size() >= 7 && frames[5] == "CURVE" && frames[6].size() == 32 &&
            std::memcmp(frames[6].data(), keys_.client_public.data(), 32) == 0;
  std::string request_id = frames.size() > 1 ? frames[1] : "";
  if (!ok) {
    uint64_t n = ++counters_.connections_refused;
    if (n <= 20 || n % 1000 == 0) {
      LOG(WARNING) << options_.name << ": refused a connection from "
                   << (frames.size() > 3 ? frames[3] : "?")
                   << ": it does not hold the cluster secret (FERRY_SECRET); " << n
                   << " refused so far";
    }
  }
  const std::string reply[] = {"1.0", request_id, ok ? "200" : "400",
                               ok ? "OK" : "not a member of this cluster", "", ""};
  for (int i = 0; i < 6; ++i) {
    zmq_send(zap_, reply[i].data(), reply[i].size(), i < 5 ? ZMQ_SNDMORE : 0);
  }
}

void Van::TuneConnection(int fd) {
  const int lowat = options_.tcp_notsent_lowat;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof lowat) == 0) {
    counters_.sockets_tuned++;
  } else {
    FERRY_LOG_EVERY_T(WARNING, 60) << options_.name << ": cannot set TCP_NOTSENT_LOWAT="
                                   << lowat << " on a connection: " << std::strerror(errno);
  }
}

namespace {

// A monitor event's two frames, closed when it goes.
struct MonitorEvent {
  zmq_msg_t event, address;
  MonitorEvent() {
    zmq_msg_init(&event);
    zmq_msg_init(&address);
  }
  ~MonitorEvent() {
    zmq_msg_close(&event);
    zmq_msg_close(&address);
  }
  MonitorEvent(const MonitorEvent&) = delete;
  MonitorEvent& operator=(const MonitorEvent&) = delete;
  // Reads the next event of `monitor`: false if none waits.
  bool Receive(void* monitor) {
    if (zmq_msg_recv(&event, monitor, ZMQ_DONTWAIT) < 0) return false;
    if (zmq_msg_more(&event)) zmq_msg_recv(&address, monitor, 0);
    return true;
  }
  uint16_t id() {
    uint16_t id = 0;
    if (zmq_msg_size(&event) >= 2) std::memcpy(&id, zmq_msg_data(&event), 2);
    return id;
  }
  // The event's value: for ACCEPTED and CONNECTED, the new connection's descriptor.
  int32_t value() {
    int32_t value = -1;
    if (zmq_msg_size(&event) >= 6) std::memcpy(&value, static_cast<char*>(zmq_msg_data(&event)) + 2, 4);
    return value;
  }
};

}  // namespace

void Van::HandleMonitorEvent(void* monitor, Connection* connection) {
  // Monitor messages: [event id (2 bytes) + value (4 bytes)] [endpoint].
  MonitorEvent e;
  if (!e.Receive(monitor)) return;
  const uint16_t id = e.id();
  if (id == ZMQ_EVENT_ACCEPTED || id == ZMQ_EVENT_CONNECTED) {
    const int32_t fd = e.value();
    if (fd >= 0 && options_.tcp_notsent_lowat > 0) TuneConnection(fd);
    if (fd >= 0 && connection) {
      connection->data_fd = fd;
      if (options_.link_scheduling) {
        order_.SetLinks(order_.At(van_internal::PeerQueueName(connection->id), connection->id),
                        link_paths_.Of(fd));
      }
    }
    return;
  }
  if (id == ZMQ_EVENT_MONITOR_STOPPED) return;
  if (id == ZMQ_EVENT_DISCONNECTED && connection) {  // an outbound data lane's
    connection->data_fd = -1;
    return;
  }
  if (id == ZMQ_EVENT_DISCONNECTED) {
    // ZeroMQ gives no reason: a peer that left looks like one it cut off for a frame
    // over the limit or a protocol error.
    uint64_t closed = ++counters_.connections_closed;
    if (closed <= 20 || closed % 1000 == 0) {
      LOG(INFO) << options_.name << ": an inbound connection closed (a peer that left, or one "
                << "ZeroMQ cut off for a frame over the " << options_.max_message_bytes
                << "-byte limit, FERRY_MAX_MESSAGE_BYTES, or a protocol error); " << closed
                << " so far";
    }
    return;
  }
  uint64_t n = ++counters_.connections_refused;
  if (n <= 20 || n % 1000 == 0) {
    LOG(WARNING) << options_.name << ": a connection to " << FrameString(&e.address)
                 << " failed the handshake ("
                 << (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ? "authentication refused"
                     : secure_ ? "not CURVE with this cluster's keys: wrong or missing FERRY_SECRET?"
                               : "not a ZeroMQ peer speaking Ferry's protocol")
                 << "); " << n << " refused so far";
  }
}

CounterValues VanCounterValues(const VanStats& s) {
  CounterValues values;
#define FERRY_VAN_NAMED(name) values.emplace_back("van." #name, s.name);
  FERRY_VAN_COUNTERS(FERRY_VAN_NAMED)
#undef FERRY_VAN_NAMED
  return values;
}

}  // namespace ferry
