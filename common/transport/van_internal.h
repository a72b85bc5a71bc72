#pragma once

// The Van's own pieces shared by its source files (van.cc: the pipe and the IO loop;
// van_send.cc: frames, the order queues, transmission; van_receive.cc: parsing and
// delivery; van_connections.cc: outbound connections and ZeroMQ's side channels). Not for
// use outside common/transport/van*.cc.

#include <zmq.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/transport/van.h"
#include "common/util/status.h"
#include "common/util/strings.h"

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

struct Van::Connection {
  int id = -1;
  void* socket = nullptr;   // the data lane (every message without a control lane)
  void* control = nullptr;  // the control lane, or null
  // The data lane's connection events (tcp_notsent_lowat, link_scheduling), or null.
  void* monitor = nullptr;
  int data_fd = -1;  // the data lane's TCP descriptor, once its monitor reported it
  std::string endpoint;
};

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
  // Set with `destination` for a critical item (van.h, Links): its destination's critical
  // unreleased bytes.
  std::atomic<std::atomic<uint64_t>*> critical{nullptr};
  // Set once built. A hold travels to the IO thread through ZeroMQ's inproc pipe, whose
  // lock-free hand-off ThreadSanitizer cannot see (libzmq is not instrumented); the IO
  // thread reads this (acquire) before the other fields, which makes the order visible.
  std::atomic<bool> built{false};
};

namespace van_internal {

// The order queue's name of outbound peer `peer` (no routing id starts with 0x02).
inline std::string PeerQueueName(int peer) { return "\x02node " + std::to_string(peer); }

[[noreturn]] inline void ThrowZmq(const std::string& what) {
  throw FerryError(ErrorCode::kInternal, StrCat(what, ": ", zmq_strerror(zmq_errno())));
}

inline void SetInt(void* socket, int option, int value) {
  if (zmq_setsockopt(socket, option, &value, sizeof value) != 0) ThrowZmq("zmq_setsockopt");
}

inline bool SendBytes(void* socket, const void* data, size_t size, bool more) {
  return zmq_send(socket, data, size, (more ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) >= 0;
}

inline void CloseFrames(std::vector<zmq_msg_t>& frames) {
  for (auto& f : frames) zmq_msg_close(&f);
  frames.clear();
}

// ZeroMQ's heartbeats on `socket`, so a silent peer's connection ends after
// `link_timeout_ms` (VanOptions::link_timeout_ms; 0: off).
inline void ApplyLinkOptions(void* socket, int link_timeout_ms) {
  if (link_timeout_ms <= 0) return;
  SetInt(socket, ZMQ_HEARTBEAT_IVL, std::max(100, link_timeout_ms / 4));
  SetInt(socket, ZMQ_HEARTBEAT_TIMEOUT, link_timeout_ms);
  SetInt(socket, ZMQ_HEARTBEAT_TTL, link_timeout_ms);
}

// A PAIR socket of `context` receiving `events` of `socket` through the inproc
// `endpoint` (unique per monitor), or null if ZeroMQ cannot monitor it.
inline void* MonitorSocket(void* context, void* socket, const std::string& endpoint, int events) {
  if (zmq_socket_monitor(socket, endpoint.c_str(), events) != 0) return nullptr;
  void* pair = zmq_socket(context, ZMQ_PAIR);
  if (pair && zmq_connect(pair, endpoint.c_str()) != 0) {
    zmq_close(pair);
    pair = nullptr;
  }
  return pair;
}

}  // namespace van_internal
}  // namespace ferry
