#include "common/transport/link_paths.h"

#include <arpa/inet.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "common/util/strings.h"

namespace ferry {

namespace {

// The host part of a socket address, or "" if it is not IPv4/IPv6.
std::string HostOf(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, text, sizeof text);
  } else if (a.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, text, sizeof text);
  }
  return text;
}

}  // namespace

std::vector<int> LinkPaths::Of(int fd) {
  sockaddr_storage mine{}, theirs{};
  socklen_t mine_len = sizeof mine, theirs_len = sizeof theirs;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &mine_len) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&theirs), &theirs_len) != 0) {
    return {};
  }
  const std::string me = HostOf(mine), peer = HostOf(theirs);
  if (peer.empty() || peer == me || StartsWith(peer, "127.") || peer == "::1") return {};
  auto [it, added] = downlinks_.emplace(peer, static_cast<int>(downlinks_.size()) + 1);
  return {kUplink, it->second};
}

bool LinkPaths::Drained(int fd) {
  if (fd < 0) return true;
  int queued = 0;  // SIOCOUTQ: unsent bytes and those sent but not yet acknowledged
  if (ioctl(fd, SIOCOUTQ, &queued) != 0) return true;
  return queued == 0;
}

}  // namespace ferry
