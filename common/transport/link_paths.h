#pragma once

// LinkPaths: what the Van's link scheduling measures of its connections (van.h, "Links"):
// which network links a TCP connection's path crosses, from the socket's own addresses,
// and whether the kernel still holds bytes of it. No state beyond the numbering of the peer
// hosts' downlinks; owned by the Van's IO thread.
//
// Links are numbers: 0 is this host's uplink; each peer host's downlink gets the next
// number the first time a connection to it is placed.

#include <map>
#include <string>
#include <vector>

namespace ferry {

class LinkPaths {
 public:
  static constexpr int kUplink = 0;

  // The links the TCP connection `fd` crosses: none for a peer on this host (the same
  // address, or loopback) or when the addresses cannot be read; else the uplink and the
  // peer host's downlink.
  std::vector<int> Of(int fd);

  // True when the kernel holds no byte of connection `fd` unsent or unacknowledged by the
  // peer (SIOCOUTQ), or cannot tell (fd < 0, a closed descriptor).
  static bool Drained(int fd);

 private:
  std::map<std::string, int> downlinks_;  // a peer host's address -> its downlink's number
};

}  // namespace ferry
