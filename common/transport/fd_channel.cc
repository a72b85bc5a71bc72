#include "common/transport/fd_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/util/error.h"
#include "common/util/strings.h"

namespace ferry {

namespace {

// The abstract address of `name`: sun_path starts with a NUL; its length counts exactly.
socklen_t AbstractAddress(const std::string& name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  FERRY_ENFORCE(!name.empty() && name.size() < sizeof(addr->sun_path) - 1,
                ErrorCode::kInvalidArgument, "abstract socket name '", name,
                "' must have 1..", sizeof(addr->sun_path) - 2, " characters");
  std::memcpy(addr->sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

bool SameUser(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == geteuid();
}

using Deadline = std::chrono::steady_clock::time_point;

Deadline DeadlineIn(int timeout_ms) {
  return std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
}

// `call()` again while it fails with EINTR; its last result.
template <typename Call>
auto RetryOnSignal(Call&& call) {
  auto n = call();
  while (n < 0 && errno == EINTR) n = call();
  return n;
}

// Waits for `events` on `fd` until `deadline`; false once it passed.
bool WaitFor(int fd, short events, Deadline deadline) {
  pollfd p{fd, events, 0};
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    const int n = poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) {
      throw FerryError(ErrorCode::kInternal, StrCat("poll failed: ", strerror(errno)));
    }
  }
}

}  // namespace

std::unique_ptr<FdChannel> FdChannel::Connect(const std::string& name) {
  sockaddr_un addr;
  const socklen_t len = AbstractAddress(name, &addr);
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  FERRY_ENFORCE(fd >= 0, ErrorCode::kInternal, "socket(AF_UNIX) failed: ", strerror(errno));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    close(fd);  // nobody listens here: another namespace, another host, or not started
    return nullptr;
  }
  if (!SameUser(fd)) {
    close(fd);
    throw FerryError(ErrorCode::kPeerFailed,
                     StrCat("the process at abstract socket '", name,
                            "' runs under another user: no shared memory with it"));
  }
  return std::unique_ptr<FdChannel>(new FdChannel(fd));
}

FdChannel::~FdChannel() { close(fd_); }

void FdChannel::Send(const std::string& header, int fd) {
  FERRY_ENFORCE(header.size() <= kMaxHeader, ErrorCode::kInvalidArgument, "an fd message's header of ",
                header.size(), " bytes exceeds ", kMaxHeader);
  // One tag byte first: a message is never empty (an empty SEQPACKET message could not be
  // told from the peer closing, and it must carry at least a byte to carry an fd).
  const std::string payload = "F" + header;
  iovec iov{const_cast<char*>(payload.data()), payload.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (fd >= 0) {
    std::memset(control, 0, sizeof control);
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  const ssize_t n = RetryOnSignal([&] { return sendmsg(fd_, &msg, MSG_NOSIGNAL); });
  FERRY_ENFORCE(n >= 0, ErrorCode::kPeerFailed, "sending over an fd channel failed: ",
                strerror(errno));
}

FdChannel::Received FdChannel::Receive(int timeout_ms) {
  FERRY_ENFORCE(WaitFor(fd_, POLLIN, DeadlineIn(timeout_ms)), ErrorCode::kTimeout,
                "no message on the fd channel within ", timeout_ms, " ms");
  char data[kMaxHeader + 2];
  iovec iov{data, sizeof data};
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = RetryOnSignal([&] { return recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC); });
  FERRY_ENFORCE(n >= 0, ErrorCode::kPeerFailed, "receiving on an fd channel failed: ",
                strerror(errno));
  Received r;
  int fds = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int received;
      std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (fds++ == 0) {
        r.fd = received;
      } else {
        close(received);  // more than one: refused below, none kept
      }
    }
  }
  auto refuse = [&r](const std::string& why) {
    if (r.fd >= 0) close(r.fd);
    throw FerryError(ErrorCode::kBadMessage, StrCat("an fd channel message was refused: ", why));
  };
  if (n == 0 && fds == 0) {
    throw FerryError(ErrorCode::kPeerFailed, "the peer closed the fd channel");
  }
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) refuse("it was truncated");
  if (n < 1 || data[0] != 'F') refuse("it does not start with the tag byte");
  if (static_cast<size_t>(n) > kMaxHeader + 1) refuse("its header is too long");
  if (fds > 1) refuse(StrCat("it carried ", fds, " file descriptors, not one"));
  r.header.assign(data + 1, static_cast<size_t>(n) - 1);
  return r;
}

std::unique_ptr<FdListener> FdListener::Listen(const std::string& name) {
  sockaddr_un addr;
  const socklen_t len = AbstractAddress(name, &addr);
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  FERRY_ENFORCE(fd >= 0, ErrorCode::kInternal, "socket(AF_UNIX) failed: ", strerror(errno));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 64) != 0) {
    const int err = errno;
    close(fd);
    throw FerryError(ErrorCode::kInternal, StrCat("cannot listen at abstract socket '", name,
                                                  "': ", strerror(err)));
  }
  return std::unique_ptr<FdListener>(new FdListener(fd));
}

FdListener::~FdListener() { close(fd_); }

std::unique_ptr<FdChannel> FdListener::Accept(int timeout_ms) {
  const Deadline deadline = DeadlineIn(timeout_ms);
  while (true) {
    if (!WaitFor(fd_, POLLIN, deadline)) return nullptr;
    const int fd = RetryOnSignal([&] { return accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC); });
    if (fd < 0) {
      if (errno == ECONNABORTED || errno == EAGAIN) continue;
      throw FerryError(ErrorCode::kInternal, StrCat("accept failed: ", strerror(errno)));
    }
    if (SameUser(fd)) return std::unique_ptr<FdChannel>(new FdChannel(fd));
    close(fd);  // another user's process: no shared memory with it
  }
}

}  // namespace ferry
