// MemfdSegment and FdChannel (common/transport): the building blocks of the shared-memory
// lane (docs/design/shm-lane.md). Real processes (fork) and real sockets: a segment
// passed to another process shows it the same bytes, leaves nothing in /dev/shm, a full
// reservation is a clear error, a forged fd is refused, and a process in another network
// namespace cannot reach the channel.

#include "common/transport/fd_channel.h"
#include "common/transport/memfd_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <string>
#include <utility>

#include "common/util/error.h"

namespace ferry {
namespace {

std::string ChannelName(const char* what) {
  return "ferry-test-" + std::to_string(getpid()) + "-" + what;
}

std::set<std::string> DevShm() {
  std::set<std::string> names;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) names.insert(e->d_name);
    closedir(d);
  }
  return names;
}

// Starts `child` in a forked process (its return value is the exit code: 0 = its checks
// passed); Reap waits for it.
template <typename F>
pid_t Spawn(F&& child) {
  const pid_t pid = fork();
  if (pid == 0) {
    int code = 1;
    try {
      code = child();
    } catch (...) {
      code = 99;
    }
    _exit(code);
  }
  return pid;
}

int Reap(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

template <typename F>
int InChild(F&& child) {
  return Reap(Spawn(std::forward<F>(child)));
}

TEST(MemfdSegmentTest, AnotherProcessMapsThePassedSegmentAndSeesTheSameBytes) {
  const std::set<std::string> before = DevShm();
  const std::string name = ChannelName("pass");  // the parent's pid, also in the child
  auto listener = FdListener::Listen(name);
  auto segment = MemfdSegment::Create("ferry-test", 10000);
  EXPECT_EQ(segment->size(), 12288u);  // whole pages
  for (size_t i = 0; i < segment->size(); ++i) segment->data()[i] = static_cast<uint8_t>(i * 7);
  const pid_t child = Spawn([&] {
    auto channel = FdChannel::Connect(name);
    if (!channel) return 2;
    FdChannel::Received r = channel->Receive(10000);
    if (r.header != "segment 1 of 12288" || r.fd < 0) return 3;
    auto mapped = MemfdSegment::Map(r.fd, 12288);
    for (size_t i = 0; i < mapped->size(); ++i) {
      if (mapped->data()[i] != static_cast<uint8_t>(i * 7)) return 4;
    }
    mapped->data()[0] = 42;  // the parent sees it: one memory
    channel->Send("done");
    return 0;
  });
  // The child connected and waits for the fd (or failed already: its code says so).
  auto channel = listener->Accept(10000);
  ASSERT_TRUE(channel);
  channel->Send("segment 1 of 12288", segment->fd());
  EXPECT_EQ(channel->Receive(10000).header, "done");
  EXPECT_EQ(Reap(child), 0);
  EXPECT_EQ(segment->data()[0], 42);
  EXPECT_EQ(DevShm(), before) << "a memfd leaves no name in /dev/shm";
}

TEST(MemfdSegmentTest, ChecksBoundsWithoutOverflow) {
  auto s = MemfdSegment::Create("ferry-test", 4096);
  EXPECT_TRUE(s->Contains(0, 4096));
  EXPECT_TRUE(s->Contains(4096, 0));
  EXPECT_FALSE(s->Contains(1, 4096));
  EXPECT_FALSE(s->Contains(4097, 0));
  EXPECT_FALSE(s->Contains(8, UINT64_MAX - 4));  // offset + length wraps
}

TEST(MemfdSegmentTest, AReservationBeyondTheMemoryIsAClearError) {
  try {
    MemfdSegment::Create("ferry-test-huge", size_t{1} << 50);  // 1 PiB
    FAIL() << "reserved a petabyte";
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    const std::string what = e.what();
    EXPECT_NE(what.find("shared memory 'ferry-test-huge': 1073741824 MiB is more than the "
                        "available memory"),
              std::string::npos)
        << what;
  }
}

TEST(MemfdSegmentTest, AnFdThatIsNotASealedSegmentOrTooSmallIsRefused) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  close(pipe_fds[1]);
  try {
    MemfdSegment::Map(pipe_fds[0], 4096);  // taken, closed on refusal
    FAIL() << "mapped a pipe";
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBadMessage);
    EXPECT_NE(std::string(e.what()).find("not a memfd"), std::string::npos) << e.what();
  }
  const int unsealed = memfd_create("ferry-test-unsealed", MFD_CLOEXEC);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(ftruncate(unsealed, 4096), 0);
  EXPECT_THROW(MemfdSegment::Map(unsealed, 4096), FerryError);
  auto s = MemfdSegment::Create("ferry-test", 4096);
  try {
    MemfdSegment::Map(dup(s->fd()), 8192);  // announced larger than it is
    FAIL() << "mapped a segment smaller than announced";
  } catch (const FerryError& e) {
    EXPECT_NE(std::string(e.what()).find("holds 4096 bytes, not the 8192 announced"),
              std::string::npos)
        << e.what();
  }
  auto again = MemfdSegment::Map(dup(s->fd()), 4096);
  s->data()[100] = 9;
  EXPECT_EQ(again->data()[100], 9);
  EXPECT_EQ(ftruncate(s->fd(), 100), -1) << "sealed against shrinking";
}

TEST(FdChannelTest, NobodyListeningIsNoChannelAndDeadlinesHold) {
  EXPECT_EQ(FdChannel::Connect(ChannelName("nobody")), nullptr);
  auto listener = FdListener::Listen(ChannelName("deadline"));
  EXPECT_THROW(FdListener::Listen(ChannelName("deadline")), FerryError);  // taken
  EXPECT_EQ(listener->Accept(50), nullptr);
  auto client = FdChannel::Connect(ChannelName("deadline"));
  ASSERT_TRUE(client);
  auto server = listener->Accept(5000);
  ASSERT_TRUE(server);
  try {
    server->Receive(50);
    FAIL() << "received nothing without a deadline error";
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  }
  client->Send("");  // an empty header is a message too
  FdChannel::Received r = server->Receive(5000);
  EXPECT_EQ(r.header, "");
  EXPECT_EQ(r.fd, -1);
  EXPECT_THROW(client->Send(std::string(FdChannel::kMaxHeader + 1, 'x')), FerryError);
  client.reset();
  try {
    server->Receive(5000);
    FAIL() << "a closed peer went unnoticed";
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kPeerFailed);
  }
}

// The emulated hosts (scripts/netns-cluster) are network namespaces: a process in another
// one cannot reach the channel, so the lane never bypasses their links. Needs root (or
// CAP_SYS_ADMIN) for the namespace; skipped otherwise.
TEST(FdChannelTest, AnotherNetworkNamespaceCannotConnect) {
  const std::string name = ChannelName("netns");  // the parent's pid, also in the children
  auto listener = FdListener::Listen(name);
  const int same = InChild([&] { return FdChannel::Connect(name) ? 0 : 1; });
  EXPECT_EQ(same, 0) << "a process of the same namespace connects";
  ASSERT_TRUE(listener->Accept(5000));
  const int other = InChild([&] {
    if (unshare(CLONE_NEWNET) != 0) return 77;  // not allowed here
    return FdChannel::Connect(name) ? 1 : 0;
  });
  if (other == 77) GTEST_SKIP() << "unshare(CLONE_NEWNET) is not permitted here";
  EXPECT_EQ(other, 0) << "a process in another network namespace reached the channel";
}

}  // namespace
}  // namespace ferry
