#pragma once

// LocalLink: the control channel between the processes of one machine's local group
// (local_group.h). A ZeroMQ ROUTER (the local root, bound) or DEALER (every other local
// rank, connected) on an abstract ipc:// socket, owned by one IO thread ("ferry-local").
//
// Messages are small: a fixed header, the tensor name, and one text field (a slot's
// segment id or an error). Tensor data never travels here: it is in shared memory, memfd
// segments (common/transport/memfd_segment.h) that each local rank passes to the root over
// an fd channel (LocalFdChannelName) before the submission that names them. Callbacks run on the IO thread, without any lock of this class held,
// so they may call Send.
//
// A disconnect of the other end (a process that died, or closed its socket) is reported
// through `on_disconnect` (a ZeroMQ socket monitor).

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "common/config/config.h"
#include "common/util/mutex.h"

namespace ferry {

enum class LocalOp : uint32_t {
  kHello = 1,  // rank -> root: I am local rank `local_rank`, process `pid`
  kWelcome,    // root -> rank: global rank/size, the root's pid
  kPushPull,   // rank -> root: my input is in my slot for `name`; root -> rank (kDone)
  kBroadcast,  // rank -> root: my data is in my slot; `root` is the global source rank
  kBarrier,    // rank -> root
  kBye,        // rank -> root: I shut down; root -> rank: the job shut down (`text`: error)
  kDone,       // root -> rank: operation `seq` finished; the result is in the slot
  kFail,       // root -> rank: the group failed; `text` says why
  // rank -> root: I called push_pull of device tensor `name` (local_nccl.h);
  // root -> rank: run the REDUCE step of that round now (`text`: the NCCL unique id,
  // first step only)
  kDevicePushPull,
  // root -> rank: run the BROADCAST step of device tensor `name`'s oldest reduced round
  kDeviceBroadcast,
};
const char* LocalOpName(LocalOp op);

// The abstract name of the local root's fd listener: local ranks pass their slots' segments
// there (FdChannel: a HELLO with the local rank first, then "SLOT <id>" and the fd).
inline std::string LocalFdChannelName(const Config& config) {
  return config.LocalSocketName() + "-fd";
}

// Travels as raw bytes: both ends run on one machine with one libferry (a frame of another
// size is dropped as malformed).
struct LocalHeader {
  uint32_t op = 0;         // LocalOp
  int32_t local_rank = 0;  // the sender's
  int32_t pid = 0;         // the sender's
  int32_t dtype = 0;
  uint64_t count = 0;  // elements
  uint64_t seq = 0;    // the local rank's operation number; kDone echoes it
  int32_t average = 0;
  int32_t root = -1;        // kBroadcast: the source's global rank
  int32_t rank = -1;        // kWelcome: the receiver's global rank
  int32_t size = 0;         // kWelcome: global size
  int32_t num_servers = 0;  // kWelcome
  uint32_t reserved = 0;
  uint64_t shm_bytes = 0;  // > 0: a new slot of this size, segment id `text` (fd channel)
};

struct LocalMessage {
  std::string peer;  // the ROUTER's routing id of the other end (root side only)
  LocalHeader header;
  std::string name;  // tensor name
  std::string text;  // shared memory name, or error text
};

class LocalLink {
 public:
  using OnMessage = std::function<void(LocalMessage&&)>;
  using OnEvent = std::function<void()>;

  // bind: the root (ROUTER, binds "ipc://@<socket>"); otherwise a DEALER connecting
  // there with routing id `routing_id`. Throws FerryError (e.g. the name is taken).
  LocalLink(bool bind, const std::string& socket, const std::string& routing_id);
  ~LocalLink();  // Stop()
  LocalLink(const LocalLink&) = delete;
  LocalLink& operator=(const LocalLink&) = delete;

  // Starts the IO thread: it runs `on_message` for every message and `on_disconnect`
  // when a connection drops. It sleeps until a message comes or Send wakes it.
  void Start(OnMessage on_message, OnEvent on_disconnect);
  // Queues `m` for the IO thread. Thread-safe.
  void Send(LocalMessage m) EXCLUDES(out_mu_);
  // Sends what is queued (waiting at most 1 s for the other ends), stops the thread and
  // closes the socket. Idempotent.
  void Stop() EXCLUDES(out_mu_);
  const std::string& endpoint() const { return endpoint_; }

 private:
  void Loop() EXCLUDES(out_mu_);
  void Drain() EXCLUDES(out_mu_);  // sends the outbox (IO thread)
  bool ReceiveOne();    // one message from the socket to on_message_; false if none
  bool MonitorEvent();  // true if the event was a disconnect

  const bool bind_;
  std::string endpoint_;
  void* context_ = nullptr;
  void* socket_ = nullptr;
  void* monitor_ = nullptr;
  int wake_fd_ = -1;  // eventfd: Send wakes the IO thread
  OnMessage on_message_;
  OnEvent on_disconnect_;

  Mutex out_mu_;  // guards outbox_ and stopping_
  std::deque<LocalMessage> outbox_ GUARDED_BY(out_mu_);
  bool stopping_ GUARDED_BY(out_mu_) = false;
  std::thread thread_;
};

}  // namespace ferry
