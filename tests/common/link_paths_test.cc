// LinkPaths (common/transport/link_paths.h) on real TCP connections over loopback: a peer on
// this host crosses no link, and a connection is drained only once its peer's kernel took
// every byte. (Paths between hosts: tests/deploy/test_link_scheduling.py, on emulated hosts.)

#include "common/transport/link_paths.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

namespace ferry {
namespace {

// A connected pair of TCP sockets on 127.0.0.1: {client, accepted}.
std::pair<int, int> Connected() {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(listen(listener, 1), 0);
  socklen_t len = sizeof a;
  getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
  int client = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  int server = accept(listener, nullptr, nullptr);
  close(listener);
  return {client, server};
}

TEST(LinkPathsTest, APeerOnThisHostCrossesNoLink) {
  LinkPaths paths;
  auto [client, server] = Connected();
  EXPECT_TRUE(paths.Of(client).empty());
  EXPECT_TRUE(paths.Of(-1).empty());  // unreadable addresses: no link either
  close(client);
  close(server);
}

TEST(LinkPathsTest, DrainedOnlyOnceThePeersKernelTookEveryByte) {
  auto [client, server] = Connected();
  EXPECT_TRUE(LinkPaths::Drained(client));
  EXPECT_TRUE(LinkPaths::Drained(-1));
  // Fill the peer's receive buffer: what is left stays in ours, unsent.
  int small = 16384;
  setsockopt(client, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  fcntl(client, F_SETFL, O_NONBLOCK);
  std::vector<char> bytes(1 << 16, 1);
  while (write(client, bytes.data(), bytes.size()) > 0) {
  }
  EXPECT_FALSE(LinkPaths::Drained(client));
  // The peer reads everything: the kernel drains, with a deadline.
  fcntl(server, F_SETFL, O_NONBLOCK);
  bool drained = false;
  for (int i = 0; i < 5000 && !drained; ++i) {
    while (read(server, bytes.data(), bytes.size()) > 0) {
    }
    drained = LinkPaths::Drained(client);
    if (!drained) usleep(1000);
  }
  EXPECT_TRUE(drained) << "the connection never drained in 5 s";
  close(client);
  close(server);
}

}  // namespace
}  // namespace ferry
