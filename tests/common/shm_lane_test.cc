// The shared-memory lane (common/transport/shm_lane.h) between two real Vans on loopback:
// a "worker" Van that connects with a routing id and a "server" Van that binds. The lane
// turns on only after the probe, payloads then travel as descriptors with exact bytes both
// ways, the sender's bytes are released when Send returns, slots come back when the
// receiver lets go (so a small budget carries many messages), a full arena falls back to TCP,
// forged descriptors and probes are refused with the reason, and a channel that reaches the
// wrong process (two servers with one port number) leaves that pair on TCP.

#include "common/transport/shm_lane.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/transport/van.h"
#include "common/util/strings.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

bool WaitUntil(const std::function<bool()>& pred) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!pred()) {
    if (Clock::now() > deadline) return pred();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Keeps every message a Van's handler sees.
class Inbox {
 public:
  Van::Handler Handler() {
    return [this](Message&& m, const Origin& o) {
      std::lock_guard<std::mutex> lock(mu_);
      messages_.push_back(std::move(m));
      origins_.push_back(o);
      cv_.notify_all();
    };
  }
  bool WaitFor(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return messages_.size() >= n; });
  }
  Message Take(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(messages_.at(i));
  }
  Origin OriginOf(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    return origins_.at(i);
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_.size();
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    messages_.clear();
    origins_.clear();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Message> messages_;
  std::vector<Origin> origins_;
};

VanOptions LaneOptions(const std::string& name, uint64_t budget = 256ull << 20,
                       bool enabled = true) {
  VanOptions o = VanOptions::Named(name, 1ull << 30);
  o.shm.enabled = enabled;
  o.shm.budget_bytes = budget;
  o.shm.job_tag = StrCat("test", getpid());
  return o;
}

// A PUSH of `bytes` bytes whose every float depends on its position and `seed`.
Message Push(uint64_t bytes, float seed) {
  Message m = MakeMessage(proto::PUSH, 1);
  m.envelope.set_key(7);
  m.envelope.set_dtype(proto::FLOAT32);
  m.envelope.set_length(bytes);
  m.payload = Buffer::Allocate(bytes);
  float* f = static_cast<float*>(m.payload.data());
  for (uint64_t i = 0; i < bytes / 4; ++i) f[i] = seed + static_cast<float>(i % 1000003);
  return m;
}

bool Exact(const Message& m, float seed) {
  const float* f = static_cast<const float*>(m.payload.data());
  for (uint64_t i = 0; i < m.payload.size() / 4; ++i) {
    if (f[i] != seed + static_cast<float>(i % 1000003)) return false;
  }
  return true;
}

struct Pair {
  Inbox worker_inbox, server_inbox;
  Van server, worker;
  int port = 0;
  Pair(VanOptions server_options, VanOptions worker_options)
      : server(std::move(server_options)), worker(std::move(worker_options)) {
    port = server.Bind("127.0.0.1", 0);
    server.Start(server_inbox.Handler());
    worker.Start(worker_inbox.Handler());
    worker.Connect(1, StrCat("tcp://127.0.0.1:", port), "worker-7");
  }
  bool LaneOn() {
    return WaitUntil([&] {
      return server.stats().shm_lanes == 1 && worker.stats().shm_lanes == 1;
    });
  }
};

TEST(ShmLaneTest, PayloadsTravelThroughSharedMemoryBothWaysWithExactBytes) {
  Pair p(LaneOptions("server"), LaneOptions("worker"));
  ASSERT_TRUE(p.LaneOn());
  bool released = false;
  Message push = Push(1 << 20, 3.0f);
  Buffer bytes = push.payload;
  push.payload = Buffer::Borrow(bytes.data(), bytes.size(), [&released] { released = true; });
  p.worker.Send(1, std::move(push));
  EXPECT_TRUE(released) << "the caller's bytes are released when Send returns (copied)";
  ASSERT_TRUE(p.server_inbox.WaitFor(1));
  Message got = p.server_inbox.Take(0);
  EXPECT_TRUE(got.payload.lent());
  EXPECT_TRUE(got.envelope.has_shm_slot());
  EXPECT_TRUE(Exact(got, 3.0f));
  // The answer takes the lane back.
  Message sum = Push(3 << 20, 5.0f);
  sum.envelope.set_type(proto::PUSH_RESULT);
  p.server.Reply(p.server_inbox.OriginOf(0).identity, std::move(sum));
  ASSERT_TRUE(p.worker_inbox.WaitFor(1));
  Message back = p.worker_inbox.Take(0);
  EXPECT_TRUE(back.payload.lent());
  EXPECT_TRUE(Exact(back, 5.0f));
  EXPECT_EQ(p.worker.stats().shm_sent, 1u);
  EXPECT_EQ(p.server.stats().shm_sent, 1u);
  EXPECT_EQ(p.server.stats().shm_received, 1u);
  EXPECT_EQ(p.worker.stats().shm_received, 1u);
  EXPECT_EQ(p.worker.stats().payloads_sent_zero_copy, 0u) << "no payload frame went to ZeroMQ";
}

TEST(ShmLaneTest, ASumInTheSharedArenaIsLentToEveryWorkerWithoutACopy) {
  Inbox server_inbox, inbox1, inbox2;
  Van server(LaneOptions("server"));
  const int port = server.Bind("127.0.0.1", 0);
  server.Start(server_inbox.Handler());
  Van w1(LaneOptions("w1")), w2(LaneOptions("w2"));
  w1.Start(inbox1.Handler());
  w2.Start(inbox2.Handler());
  w1.Connect(1, StrCat("tcp://127.0.0.1:", port), "worker-1");
  w2.Connect(1, StrCat("tcp://127.0.0.1:", port), "worker-2");
  ASSERT_TRUE(w1.WaitForLanes(10000) && w2.WaitForLanes(10000));
  ASSERT_TRUE(WaitUntil([&] { return server.stats().shm_lanes == 2; }));
  auto sum_of = [&](float seed) {
    Message sum = Push(1 << 20, seed);
    sum.envelope.set_type(proto::PUSH_RESULT);
    Buffer shared = server.AllocateShared(sum.payload.size());
    EXPECT_FALSE(shared.empty());
    std::memcpy(shared.data(), sum.payload.data(), sum.payload.size());
    sum.payload = shared;
    return sum;
  };
  Message a = sum_of(1.0f);
  const void* a_bytes = a.payload.data();
  server.Reply("worker-1", a);
  server.Reply("worker-2", std::move(a));  // the server lets go; the workers still read it
  ASSERT_TRUE(inbox1.WaitFor(1) && inbox2.WaitFor(1));
  Message got1 = inbox1.Take(0), got2 = inbox2.Take(0);
  EXPECT_TRUE(Exact(got1, 1.0f) && Exact(got2, 1.0f));
  EXPECT_EQ(server.stats().shm_lent, 2u);
  // Held by the workers: a new sum goes elsewhere.
  Message b = sum_of(2.0f);
  EXPECT_NE(b.payload.data(), a_bytes);
  // Both workers let go (b too): the first slot is free again (first fit).
  got1 = Message();
  got2 = Message();
  b = Message();
  Message c = sum_of(3.0f);
  EXPECT_EQ(c.payload.data(), a_bytes);
}

TEST(ShmLaneTest, SlotsComeBackWhenTheReceiverLetsGoAndAFullArenaFallsBackToTcp) {
  // A budget of one segment (64 MiB): 200 messages of 1 MiB fit only if slots are reused.
  Pair p(LaneOptions("server"), LaneOptions("worker", 64ull << 20));
  ASSERT_TRUE(p.LaneOn());
  for (int i = 0; i < 200; ++i) {
    p.worker.Send(1, Push(1 << 20, static_cast<float>(i)));
    ASSERT_TRUE(p.server_inbox.WaitFor(1));
    Message m = p.server_inbox.Take(0);
    ASSERT_TRUE(Exact(m, static_cast<float>(i))) << i;
    p.server_inbox.Clear();  // m goes out of scope below: the slot is free again
  }
  EXPECT_EQ(p.worker.stats().shm_sent, 200u);
  EXPECT_EQ(p.worker.stats().shm_fallbacks, 0u);
  // Now the server keeps what it receives: the arena fills and the rest goes over TCP.
  std::vector<Message> kept;
  for (int i = 0; i < 100; ++i) {
    p.worker.Send(1, Push(1 << 20, static_cast<float>(i)));
    ASSERT_TRUE(p.server_inbox.WaitFor(1));
    kept.push_back(p.server_inbox.Take(0));
    p.server_inbox.Clear();
    ASSERT_TRUE(Exact(kept.back(), static_cast<float>(i))) << i;
  }
  const VanStats s = p.worker.stats();
  EXPECT_GT(s.shm_fallbacks, 30u);
  EXPECT_EQ(s.shm_sent + s.shm_fallbacks, 300u);
  EXPECT_FALSE(kept.back().payload.lent()) << "the last ones came over TCP";
}

TEST(ShmLaneTest, ForgedDescriptorsAreRefusedWithTheReason) {
  Pair p(LaneOptions("server"), LaneOptions("worker"));
  ASSERT_TRUE(p.LaneOn());
  p.worker.Send(1, Push(4096, 1.0f));  // announces segment 1
  ASSERT_TRUE(p.server_inbox.WaitFor(1));
  const uint64_t bad_before = p.server.stats().bad_messages_dropped;
  struct Forged {
    uint32_t segment;
    uint64_t header, offset;
  };
  for (const Forged f : std::vector<Forged>{{1, 0, 64ull << 20},  // past the end
                                            {1, 0, 8},            // no room for its header
                                            {1, 100, 200},        // a header off the grid
                                            {9, 0, 64}}) {        // never announced
    Message forged = MakeMessage(proto::PUSH, 1);
    forged.envelope.set_dtype(proto::FLOAT32);
    forged.envelope.set_length(4096);
    forged.envelope.mutable_shm_slot()->set_segment(f.segment);
    forged.envelope.mutable_shm_slot()->set_header(f.header);
    forged.envelope.mutable_shm_slot()->set_offset(f.offset);
    forged.envelope.mutable_shm_slot()->set_bytes(4096);
    p.worker.Send(1, std::move(forged));
  }
  EXPECT_TRUE(WaitUntil([&] { return p.server.stats().bad_messages_dropped == bad_before + 4; }));
  EXPECT_EQ(p.server.stats().shm_refused, 4u);
  // The node keeps serving the peer.
  p.worker.Send(1, Push(8192, 2.0f));
  ASSERT_TRUE(p.server_inbox.WaitFor(2));
  EXPECT_TRUE(Exact(p.server_inbox.Take(1), 2.0f));
}

TEST(ShmLaneTest, AnEchoWithWrongNoncesOrFromAnotherConnectionIsRefused) {
  Inbox inbox;
  Van server(LaneOptions("server"));
  const int port = server.Bind("127.0.0.1", 0);
  server.Start(inbox.Handler());
  Van forger(VanOptions::Named("forger", 1 << 20));  // no lane of its own
  forger.Start(inbox.Handler());
  forger.Connect(1, StrCat("tcp://127.0.0.1:", port), "forger-1");
  Message ready = MakeMessage(proto::SHM_READY, -1);
  ready.envelope.mutable_shm_probe()->set_hello_nonce(12345);
  ready.envelope.mutable_shm_probe()->set_probe_nonce(678);
  forger.Send(1, std::move(ready));
  // The server refuses and answers (the forger's Van takes the answer; no handler sees it).
  ASSERT_TRUE(WaitUntil([&] { return forger.stats().messages_received == 1; }));
  EXPECT_EQ(server.stats().shm_refused, 1u);
  EXPECT_EQ(inbox.size(), 0u) << "SHM_READY never reaches a handler";
  EXPECT_EQ(server.stats().shm_lanes, 0u);
  // A descriptor from a peer without a lane: refused.
  Message forged = MakeMessage(proto::PUSH, 1);
  forged.envelope.set_dtype(proto::FLOAT32);
  forged.envelope.set_length(64);
  forged.envelope.mutable_shm_slot()->set_segment(1);
  forged.envelope.mutable_shm_slot()->set_offset(64);
  forged.envelope.mutable_shm_slot()->set_bytes(64);
  forger.Send(1, std::move(forged));
  EXPECT_TRUE(WaitUntil([&] { return server.stats().shm_refused == 2; }));
}

TEST(ShmLaneTest, AChannelThatReachesAnotherProcessLeavesThePairOnTcp) {
  // Two servers with one port number on two addresses (as two emulated hosts can have): the
  // listener's name is the first one's, so the worker's channel for the second reaches the
  // first. The second never saw the HELLO: it refuses the echo, and the pair stays on TCP.
  Inbox first_inbox, second_inbox, worker_inbox;
  Van first(LaneOptions("first"));
  const int port = first.Bind("127.0.0.1", 0);
  first.Start(first_inbox.Handler());
  Van second(LaneOptions("second"));  // its listener's name is taken: it warns, no lanes
  ASSERT_EQ(second.Bind("127.0.0.2", port), port);
  second.Start(second_inbox.Handler());
  Van worker(LaneOptions("worker"));
  worker.Start(worker_inbox.Handler());
  worker.Connect(2, StrCat("tcp://127.0.0.2:", port), "worker-9");
  ASSERT_TRUE(WaitUntil([&] { return second.stats().shm_refused == 1; }));
  worker.Send(2, Push(1 << 20, 4.0f));
  ASSERT_TRUE(second_inbox.WaitFor(1));
  Message got = second_inbox.Take(0);
  EXPECT_FALSE(got.payload.lent());
  EXPECT_TRUE(Exact(got, 4.0f));
  EXPECT_EQ(worker.stats().shm_lanes, 0u);
  EXPECT_EQ(first.stats().shm_lanes, 0u);
}

TEST(ShmLaneTest, OffOnEitherSideMeansTcp) {
  for (bool server_on : {false, true}) {
    Pair p(LaneOptions("server", 256ull << 20, server_on),
           LaneOptions("worker", 256ull << 20, !server_on));
    p.worker.Send(1, Push(1 << 20, 6.0f));
    ASSERT_TRUE(p.server_inbox.WaitFor(1));
    Message got = p.server_inbox.Take(0);
    EXPECT_FALSE(got.payload.lent());
    EXPECT_TRUE(Exact(got, 6.0f));
    EXPECT_EQ(p.worker.stats().shm_lanes + p.server.stats().shm_lanes, 0u);
  }
}

}  // namespace
}  // namespace ferry
