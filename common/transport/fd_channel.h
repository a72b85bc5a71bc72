#pragma once

// FdChannel: file descriptors (shared-memory segments, memfd_segment.h) with a short header
// between two processes, over a Unix SOCK_SEQPACKET socket in the *abstract* namespace
// ("\0" + name: no file, gone with the listening process). Abstract addresses are scoped to
// the network namespace, so a channel connects only processes in one namespace of one
// kernel: the emulated hosts of scripts/netns-cluster and scripts/compose-local (one
// namespace each) can never reach each other's, and the shared-memory lane cannot bypass
// their shaped links (docs/design/shm-lane.md). Each end also checks that the
// other runs under the same user (SO_PEERCRED): shared memory is private to the job's user.
//
// One message is one sendmsg: at most one fd (SCM_RIGHTS) and a header of at most
// kMaxHeader bytes. Every wait has a deadline. Not thread-safe: one thread per end.

#include <memory>
#include <string>

namespace ferry {

class FdChannel {
 public:
  static constexpr size_t kMaxHeader = 512;

  // A message received: its fd (owned by the caller; -1 if none came) and its header.
  struct Received {
    int fd = -1;
    std::string header;
  };

  // Connects to the listener at abstract `name`. Null when nobody listens there (no such
  // process, or another network namespace or host): no lane, which is no error. Throws
  // FerryError (kPeerFailed) when the listener runs under another user.
  static std::unique_ptr<FdChannel> Connect(const std::string& name);
  ~FdChannel();
  FdChannel(const FdChannel&) = delete;
  FdChannel& operator=(const FdChannel&) = delete;

  // Sends `header` and, when `fd` >= 0, a duplicate of `fd` (the caller keeps its own).
  // Throws FerryError (kPeerFailed) when the peer is gone, kInvalidArgument for a header
  // over kMaxHeader.
  void Send(const std::string& header, int fd = -1);
  // Waits at most `timeout_ms` for one message. Throws FerryError: kTimeout, kPeerFailed
  // (the peer closed), kBadMessage (a truncated header, more than one fd).
  Received Receive(int timeout_ms);

  int fd() const { return fd_; }  // the socket, for polling

 private:
  friend class FdListener;
  explicit FdChannel(int fd) : fd_(fd) {}
  int fd_;
};

class FdListener {
 public:
  // Listens at abstract `name`. Throws FerryError (kInternal) if it is taken (another
  // process of the same name: names carry the job and node ids) or the socket fails.
  static std::unique_ptr<FdListener> Listen(const std::string& name);
  ~FdListener();
  FdListener(const FdListener&) = delete;
  FdListener& operator=(const FdListener&) = delete;

  // Waits at most `timeout_ms` for a connection; null on timeout. A connection from
  // another user is closed and not returned (waiting on for the rest of the time).
  std::unique_ptr<FdChannel> Accept(int timeout_ms);
  int fd() const { return fd_; }

 private:
  explicit FdListener(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace ferry
