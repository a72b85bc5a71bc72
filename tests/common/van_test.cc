// Tests of the Van (common/transport/van.h): two Vans in one process on loopback.
//
// The zero-copy tests prove that ZeroMQ is handed the caller's own memory: the Van's
// release observer sees exactly the caller's pointer, the Borrow release callback runs
// exactly once, and it does not run while ZeroMQ still has the message queued (a peer
// that is not listening yet).

#include "common/transport/van.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/util/error.h"
#include "tests/support/process_group.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;
using testing::FreePort;
constexpr auto kDeadline = std::chrono::seconds(5);

// Polls `pred` until it holds or 5 s passed; returns its last value.
bool WaitUntil(const std::function<bool()>& pred) {
  auto deadline = Clock::now() + kDeadline;
  while (!pred()) {
    if (Clock::now() > deadline) return pred();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

std::string Endpoint(int port) { return StrCat("tcp://127.0.0.1:", port); }

// A port nobody listens on (the kernel's choice, released again).
struct Received {
  Message message;
  Origin origin;
};

// Records what a Van's handler sees; `on_message` (optional) runs on the IO thread
// after recording.
class Recorder {
 public:
  Van::Handler Handler() {
    return [this](Message&& m, const Origin& o) {
      std::function<void(const Message&, const Origin&)> hook;
      {
        std::lock_guard<std::mutex> lock(mu_);
        hook = on_message_;
      }
      if (hook) hook(m, o);
      {
        std::lock_guard<std::mutex> lock(mu_);
        received_.push_back(Received{std::move(m), o});
      }
      cv_.notify_all();
    };
  }
  void SetHook(std::function<void(const Message&, const Origin&)> hook) {
    std::lock_guard<std::mutex> lock(mu_);
    on_message_ = std::move(hook);
  }
  // Waits (up to 5 s) until at least `n` messages arrived.
  bool WaitFor(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kDeadline, [&] { return received_.size() >= n; });
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu_);
    return received_.size();
  }
  // REQUIRES: WaitFor(i + 1) returned true.
  Received& at(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    return received_.at(i);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Received> received_;
  std::function<void(const Message&, const Origin&)> on_message_;
};

// Records the pointers a Van's release observer sees.
class ReleaseLog {
 public:
  std::function<void(const void*)> Observer() {
    return [this](const void* p) {
      std::lock_guard<std::mutex> lock(mu_);
      pointers_.push_back(p);
    };
  }
  std::vector<const void*> pointers() {
    std::lock_guard<std::mutex> lock(mu_);
    return pointers_;
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu_);
    return pointers_.size();
  }

 private:
  std::mutex mu_;
  std::vector<const void*> pointers_;
};

VanOptions Options(const std::string& name, ReleaseLog* log = nullptr) {
  VanOptions o = VanOptions::Named(name, 1ull << 30);
  o.linger_ms = 500;
  if (log) o.on_payload_released = log->Observer();
  return o;
}

// A caller-owned float tensor of `count` elements with a recognisable pattern.
std::vector<float> Pattern(size_t count, float scale) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>(i) * scale + 0.25f;
  return v;
}

Message PushOf(uint64_t key, Buffer payload) {
  Message m = MakeMessage(proto::PUSH, 5);
  m.envelope.set_key(key);
  m.envelope.set_dtype(proto::FLOAT32);
  m.envelope.set_round(3);
  m.envelope.set_request_id(11);
  m.envelope.set_length(payload.size());
  m.payload = std::move(payload);
  return m;
}

constexpr size_t kFloats = 262144;  // 1 MiB

Message ReplyOf(proto::MessageType type, uint64_t request, Buffer payload = Buffer()) {
  Message m = MakeMessage(type, 1);
  m.envelope.set_request_id(request);
  if (type == proto::ERROR) m.envelope.mutable_error()->set_reason("refused");
  if (!payload.empty()) {
    m.envelope.set_dtype(proto::FLOAT32);
    m.envelope.set_length(payload.size());
    m.payload = std::move(payload);
  }
  return m;
}

// Lanes (van.h): a control reply takes the requester's control connection, tensor bytes
// its data connection; while the data reads are held, the ack still arrives, and the
// sum sent before it arrives once they resume. Requests from either lane are answered by
// type, not by the lane they came on.
TEST(VanTest, ControlRepliesTakeTheControlConnectionAndOvertakeHeldSums) {
  Recorder at_server, at_worker;
  VanOptions server_options = Options("server");
  server_options.control_lane = true;
  Van server(server_options);
  int port = server.Bind("127.0.0.1", 0);
  server.Start(at_server.Handler());
  Van worker(Options("worker"));
  worker.Start(at_worker.Handler());
  worker.Connect(1, Endpoint(port), "id-w", /*control_lane=*/true);

  // A push on the data lane, a RESEND_SUM (control) on the control lane.
  std::vector<float> tensor = Pattern(1024, 1.0f);
  worker.Send(1, PushOf(MakeKey(1, 0), Buffer::Borrow(tensor.data(), 4096, [] {})));
  Message pull = MakeMessage(proto::RESEND_SUM, 5);
  pull.envelope.set_request_id(12);
  worker.Send(1, std::move(pull));
  ASSERT_TRUE(at_server.WaitFor(2));
  std::string data_id, control_id;
  for (size_t i = 0; i < 2; ++i) {
    (at_server.at(i).message.type() == proto::PUSH ? data_id : control_id) = at_server.at(i).origin.identity;
  }
  EXPECT_EQ(data_id, "id-w");
  EXPECT_EQ(control_id, ControlIdentity("id-w"));
  EXPECT_TRUE(IsControlIdentity(control_id));
  EXPECT_EQ(DataIdentity(control_id), "id-w");

  worker.HoldDataReadsForTest(true);
  // Replies addressed to the identity a request came from, whichever lane that was.
  server.Reply(control_id, ReplyOf(proto::PUSH_RESULT, 11, Buffer::Allocate(1 << 20)));
  server.Reply(data_id, ReplyOf(proto::PUSH_ACK, 11));
  ASSERT_TRUE(at_worker.WaitFor(1));
  EXPECT_EQ(at_worker.at(0).message.type(), proto::PUSH_ACK);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(at_worker.count(), 1u);  // the sum waits on the held data connection
  worker.HoldDataReadsForTest(false);
  ASSERT_TRUE(at_worker.WaitFor(2));
  EXPECT_EQ(at_worker.at(1).message.type(), proto::PUSH_RESULT);
  EXPECT_EQ(at_worker.at(1).message.payload.size(), 1u << 20);
  EXPECT_EQ(server.stats().control_fallbacks, 0u);
  worker.Stop();
  server.Stop();
}

// The reply order (van.h, "Order"): sums wait per destination, most urgent first, then
// in arrival order, and go to ZeroMQ while less than the watermark is unreleased (here
// one byte: one sum at a time). Acks are not ordered: they pass at once.
TEST(VanTest, RepliesWithTensorBytesLeaveMostUrgentFirst) {
  Recorder at_server, at_worker;
  VanOptions server_options = Options("server");
  server_options.control_lane = true;
  server_options.watermark_bytes = 1;
  Van server(server_options);
  int port = server.Bind("127.0.0.1", 0);
  server.Start(at_server.Handler());
  Van worker(Options("worker"));
  worker.Start(at_worker.Handler());
  worker.Connect(1, Endpoint(port), "id-w", /*control_lane=*/true);
  worker.Send(1, MakeMessage(proto::RESEND_SUM, 5));  // both connections are up once it is in
  std::vector<float> tensor = Pattern(1024, 1.0f);
  worker.Send(1, PushOf(MakeKey(1, 0), Buffer::Borrow(tensor.data(), 4096, [] {})));
  ASSERT_TRUE(at_server.WaitFor(2));

  server.HoldDataQueuesForTest(true);
  const int32_t priorities[] = {1, 5, 1, 9, 5};  // request ids 1..5
  for (uint64_t id = 1; id <= 5; ++id) {
    Message sum = ReplyOf(proto::PUSH_RESULT, id, Buffer::Allocate(65536));
    sum.envelope.set_priority(priorities[id - 1]);
    server.Reply("id-w", std::move(sum));
  }
  server.Reply("id-w", ReplyOf(proto::PUSH_ACK, 6));  // not held: no tensor bytes
  ASSERT_TRUE(at_worker.WaitFor(1));
  EXPECT_EQ(at_worker.at(0).message.envelope.request_id(), 6u);
  server.HoldDataQueuesForTest(false);
  ASSERT_TRUE(at_worker.WaitFor(6));
  const uint64_t expected[] = {4, 2, 5, 1, 3};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(at_worker.at(i + 1).message.envelope.request_id(), expected[i]) << "position " << i;
  }
  ASSERT_TRUE(WaitUntil([&] { return server.stats().unreleased_bytes == 0; }));
  EXPECT_EQ(server.stats().data_queued, 5u);
  EXPECT_EQ(server.stats().data_reordered, 3u);  // 4, 2 and 5 overtook 1
  worker.Stop();
  server.Stop();
}

// The same order on a worker's way out: pushes to one server, most urgent first.
TEST(VanTest, PushesToOneServerLeaveMostUrgentFirst) {
  Recorder at_server, at_worker;
  Van server(Options("server"));
  int port = server.Bind("127.0.0.1", 0);
  server.Start(at_server.Handler());
  VanOptions worker_options = Options("worker");
  worker_options.watermark_bytes = 1;
  Van worker(worker_options);
  worker.Start(at_worker.Handler());
  worker.Connect(1, Endpoint(port), "id-w");
  std::vector<float> tensor = Pattern(16384, 1.0f);
  worker.HoldDataQueuesForTest(true);
  const int32_t priorities[] = {-3, 0, -3, 7, 0};  // request ids 1..5
  for (uint64_t id = 1; id <= 5; ++id) {
    Message push = PushOf(MakeKey(1, static_cast<uint32_t>(id)),
                          Buffer::Borrow(tensor.data(), 65536, [] {}));
    push.envelope.set_request_id(id);
    push.envelope.set_priority(priorities[id - 1]);
    worker.Send(1, std::move(push));
  }
  worker.Send(1, MakeMessage(proto::JOIN, 5));  // no tensor bytes: passes at once
  ASSERT_TRUE(at_server.WaitFor(1));
  EXPECT_EQ(at_server.at(0).message.type(), proto::JOIN);
  worker.HoldDataQueuesForTest(false);
  ASSERT_TRUE(at_server.WaitFor(6));
  const uint64_t expected[] = {4, 2, 5, 1, 3};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(at_server.at(i + 1).message.envelope.request_id(), expected[i]) << "position " << i;
  }
  ASSERT_TRUE(WaitUntil([&] { return worker.stats().unreleased_bytes == 0; }));
  EXPECT_EQ(worker.stats().data_queued, 5u);
  worker.Stop();
  server.Stop();
}

// The TCP connections of this process whose TCP_NOTSENT_LOWAT is `lowat`.
int ConnectionsWithLowat(int lowat) {
  int found = 0;
  for (int fd = 0; fd < 4096; ++fd) {
    int value = 0;
    socklen_t len = sizeof value;
    if (getsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &value, &len) == 0 && value == lowat) found++;
  }
  return found;
}

// tcp_notsent_lowat reaches the kernel on both ends of a data connection: the accepted
// one at the ROUTER, the worker's data DEALER (not its control one).
TEST(VanTest, NotSentLowatIsSetOnAcceptedAndDataConnections) {
  constexpr int kLowat = 98304;  // a value no default has
  ASSERT_EQ(ConnectionsWithLowat(kLowat), 0);
  Recorder at_server, at_worker;
  VanOptions server_options = Options("server");
  server_options.control_lane = true;
  server_options.tcp_notsent_lowat = kLowat;
  Van server(server_options);
  int port = server.Bind("127.0.0.1", 0);
  server.Start(at_server.Handler());
  VanOptions worker_options = Options("worker");
  worker_options.tcp_notsent_lowat = kLowat;
  Van worker(worker_options);
  worker.Start(at_worker.Handler());
  worker.Connect(1, Endpoint(port), "id-w", /*control_lane=*/true);
  worker.Send(1, MakeMessage(proto::RESEND_SUM, 5));
  std::vector<float> tensor = Pattern(1024, 1.0f);
  worker.Send(1, PushOf(MakeKey(1, 0), Buffer::Borrow(tensor.data(), 4096, [] {})));
  ASSERT_TRUE(at_server.WaitFor(2));
  // Accepted: data and control (2); connected: the worker's data connection (1).
  ASSERT_TRUE(WaitUntil([&] { return server.stats().sockets_tuned == 2 && worker.stats().sockets_tuned == 1; }))
      << server.stats().sockets_tuned << " " << worker.stats().sockets_tuned;
  EXPECT_EQ(ConnectionsWithLowat(kLowat), 3);
  worker.Stop();
  server.Stop();
}

// A requester without a control connection gets its control replies on its data
// connection, counted as fallbacks.
TEST(VanTest, ControlRepliesFallBackToTheDataConnection) {
  Recorder at_server, at_worker;
  VanOptions server_options = Options("server");
  server_options.control_lane = true;
  Van server(server_options);
  int port = server.Bind("127.0.0.1", 0);
  server.Start(at_server.Handler());
  Van worker(Options("worker"));
  worker.Start(at_worker.Handler());
  worker.Connect(1, Endpoint(port), "id-w");  // no control lane
  worker.Send(1, MakeMessage(proto::RESEND_SUM, 5));
  ASSERT_TRUE(at_server.WaitFor(1));
  EXPECT_EQ(at_server.at(0).origin.identity, "id-w");
  server.Reply("id-w", ReplyOf(proto::PUSH_ACK, 3));
  server.Reply("id-w", ReplyOf(proto::ERROR, 4));
  ASSERT_TRUE(at_worker.WaitFor(2));
  EXPECT_EQ(at_worker.at(0).message.envelope.request_id(), 3u);
  EXPECT_EQ(at_worker.at(1).message.envelope.request_id(), 4u);
  EXPECT_EQ(server.stats().control_fallbacks, 2u);
  worker.Stop();
  server.Stop();
}

// (a) + (b): bytes arrive intact, with the sender's identity; ZeroMQ sent from the
// caller's pointer, and the borrowed bytes were released exactly once.
TEST(VanTest, ZeroCopySendDeliversCallerBytes) {
  std::vector<float> tensor = Pattern(kFloats, 0.5f);
  const size_t bytes = tensor.size() * sizeof(float);
  std::atomic<int> released{0};
  Recorder at_a, at_b;
  ReleaseLog log_b;

  Van a(Options("a"));
  int port = a.Bind("127.0.0.1", 0);
  ASSERT_GT(port, 0);
  a.Start(at_a.Handler());
  Van b(Options("b", &log_b));
  b.Start(at_b.Handler());
  b.Connect(1, Endpoint(port), "id-b");

  b.Send(1, PushOf(MakeKey(7, 2), Buffer::Borrow(tensor.data(), bytes, [&] { released++; })));

  ASSERT_TRUE(at_a.WaitFor(1));
  Received& r = at_a.at(0);
  EXPECT_TRUE(r.origin.inbound);
  EXPECT_EQ(r.origin.identity, "id-b");
  EXPECT_EQ(r.message.type(), proto::PUSH);
  EXPECT_EQ(r.message.sender(), 5);
  EXPECT_EQ(r.message.envelope.key(), MakeKey(7, 2));
  EXPECT_EQ(r.message.envelope.round(), 3u);
  EXPECT_EQ(r.message.envelope.request_id(), 11u);
  EXPECT_EQ(r.message.envelope.length(), bytes);
  ASSERT_EQ(r.message.payload.size(), bytes);
  EXPECT_NE(r.message.payload.data(), static_cast<void*>(tensor.data()));
  EXPECT_EQ(std::memcmp(r.message.payload.data(), tensor.data(), bytes), 0);

  // ZeroMQ released the caller's own pointer: it never made a copy.
  ASSERT_TRUE(WaitUntil([&] { return released.load() == 1; }));
  std::vector<const void*> seen = log_b.pointers();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], static_cast<const void*>(tensor.data()));

  VanStats sb = b.stats();
  EXPECT_EQ(sb.messages_sent, 1u);
  EXPECT_EQ(sb.payloads_sent_zero_copy, 1u);
  EXPECT_GT(sb.bytes_sent, bytes);
  EXPECT_EQ(sb.send_failures, 0u);
  EXPECT_EQ(a.stats().messages_received, 1u);

  b.Stop();
  a.Stop();
  EXPECT_EQ(released.load(), 1);  // exactly once, also after the Vans are gone
  EXPECT_EQ(log_b.count(), 1u);
}

// Slices of one borrowed tensor travel as separate zero-copy frames; the tensor is
// released once, after the last of them.
TEST(VanTest, SlicesOfOneBorrowAreReleasedOnce) {
  std::vector<float> tensor = Pattern(kFloats, 2.0f);
  const size_t bytes = tensor.size() * sizeof(float);
  std::atomic<int> released{0};
  Recorder at_a, at_b;
  ReleaseLog log_b;

  Van a(Options("a"));
  int port = a.Bind("127.0.0.1", 0);
  a.Start(at_a.Handler());
  Van b(Options("b", &log_b));
  b.Start(at_b.Handler());
  b.Connect(1, Endpoint(port), "id-b");

  {
    Buffer whole = Buffer::Borrow(tensor.data(), bytes, [&] { released++; });
    b.Send(1, PushOf(MakeKey(1, 0), whole.Slice(0, bytes / 2)));
    b.Send(1, PushOf(MakeKey(1, 1), whole.Slice(bytes / 2, bytes / 2)));
  }
  ASSERT_TRUE(at_a.WaitFor(2));
  // Messages to one peer keep their order.
  EXPECT_EQ(at_a.at(0).message.envelope.key(), MakeKey(1, 0));
  EXPECT_EQ(at_a.at(1).message.envelope.key(), MakeKey(1, 1));
  EXPECT_EQ(std::memcmp(at_a.at(0).message.payload.data(), tensor.data(), bytes / 2), 0);
  EXPECT_EQ(std::memcmp(at_a.at(1).message.payload.data(),
                        reinterpret_cast<const char*>(tensor.data()) + bytes / 2, bytes / 2),
            0);

  ASSERT_TRUE(WaitUntil([&] { return released.load() == 1; }));
  std::vector<const void*> seen = log_b.pointers();
  ASSERT_EQ(seen.size(), 2u);
  const void* first_half = tensor.data();
  const void* second_half = reinterpret_cast<const char*>(tensor.data()) + bytes / 2;
  EXPECT_TRUE((seen[0] == first_half && seen[1] == second_half) ||
              (seen[0] == second_half && seen[1] == first_half));
  b.Stop();
  a.Stop();
  EXPECT_EQ(released.load(), 1);
}

// (c) While the peer is not listening, ZeroMQ keeps the message queued and holds the
// caller's bytes; they are released only once the message went out.
TEST(VanTest, BufferHeldUntilZeroMqIsDone) {
  std::vector<float> tensor = Pattern(kFloats, -1.0f);
  const size_t bytes = tensor.size() * sizeof(float);
  std::atomic<int> released{0};
  std::atomic<bool> a_listening{false};
  std::atomic<bool> released_while_a_listening{false};
  Recorder at_a, at_b;
  ReleaseLog log_b;

  const int port = FreePort();
  Van b(Options("b", &log_b));
  b.Start(at_b.Handler());
  b.Connect(1, Endpoint(port), "id-b");
  b.Send(1, PushOf(MakeKey(4, 0), Buffer::Borrow(tensor.data(), bytes, [&] {
                     released_while_a_listening = a_listening.load();
                     released++;
                   })));

  // The message was handed to the socket...
  ASSERT_TRUE(WaitUntil([&] { return b.stats().messages_sent == 1; }));
  // ... but nobody listens, so ZeroMQ must still hold the bytes.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(released.load(), 0);
  EXPECT_EQ(log_b.count(), 0u);

  Van a(Options("a"));
  a_listening = true;
  ASSERT_EQ(a.Bind("127.0.0.1", port), port);
  a.Start(at_a.Handler());

  ASSERT_TRUE(at_a.WaitFor(1));
  EXPECT_EQ(at_a.at(0).origin.identity, "id-b");
  ASSERT_EQ(at_a.at(0).message.payload.size(), bytes);
  EXPECT_EQ(std::memcmp(at_a.at(0).message.payload.data(), tensor.data(), bytes), 0);
  ASSERT_TRUE(WaitUntil([&] { return released.load() == 1; }));
  EXPECT_TRUE(released_while_a_listening.load());
  std::vector<const void*> seen = log_b.pointers();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], static_cast<const void*>(tensor.data()));
  b.Stop();
  a.Stop();
  EXPECT_EQ(released.load(), 1);
}

// (d) The receiver answers on the inbound connection: once from its handler (the IO
// thread) and once from another thread; the sender sees both, in order, from peer 1.
TEST(VanTest, ReplyReachesTheSender) {
  Recorder at_a, at_b;
  ReleaseLog log_a;
  Van a(Options("a", &log_a));
  int port = a.Bind("127.0.0.1", 0);
  at_a.SetHook([&a](const Message& m, const Origin& o) {
    if (m.type() != proto::PUSH) return;
    Message ack = MakeMessage(proto::PUSH_ACK, 0);
    ack.envelope.set_request_id(m.envelope.request_id());
    a.Reply(o.identity, std::move(ack));  // on the IO thread: sent directly
  });
  a.Start(at_a.Handler());
  Van b(Options("b"));
  b.Start(at_b.Handler());
  b.Connect(1, Endpoint(port), "id-b");

  std::vector<float> grad = Pattern(1024, 1.0f);
  b.Send(1, PushOf(MakeKey(2, 0), Buffer::CopyOf(grad.data(), grad.size() * sizeof(float))));
  ASSERT_TRUE(at_a.WaitFor(1));
  const std::string identity = at_a.at(0).origin.identity;
  ASSERT_EQ(identity, "id-b");

  std::vector<float> sum = Pattern(1024, 3.0f);
  const size_t bytes = sum.size() * sizeof(float);
  std::atomic<int> released{0};
  Message result = MakeMessage(proto::PUSH_RESULT, 0);
  result.envelope.set_key(MakeKey(2, 0));
  result.envelope.set_request_id(11);
  result.envelope.set_dtype(proto::FLOAT32);
  result.envelope.set_length(bytes);
  result.payload = Buffer::Borrow(sum.data(), bytes, [&] { released++; });
  a.Reply(identity, std::move(result));

  ASSERT_TRUE(at_b.WaitFor(2));
  Received& ack = at_b.at(0);
  EXPECT_EQ(ack.message.type(), proto::PUSH_ACK);
  EXPECT_EQ(ack.message.envelope.request_id(), 11u);
  EXPECT_FALSE(ack.origin.inbound);
  EXPECT_EQ(ack.origin.peer, 1);
  Received& got = at_b.at(1);
  EXPECT_EQ(got.message.type(), proto::PUSH_RESULT);
  EXPECT_FALSE(got.origin.inbound);
  EXPECT_EQ(got.origin.peer, 1);
  EXPECT_TRUE(got.origin.identity.empty());
  ASSERT_EQ(got.message.payload.size(), bytes);
  EXPECT_EQ(std::memcmp(got.message.payload.data(), sum.data(), bytes), 0);

  ASSERT_TRUE(WaitUntil([&] { return released.load() == 1; }));
  ASSERT_EQ(log_a.count(), 1u);
  EXPECT_EQ(log_a.pointers()[0], static_cast<const void*>(sum.data()));
  // ZeroMQ may release the payload before the IO thread counts the send.
  EXPECT_TRUE(WaitUntil([&] {
    return a.stats().messages_sent == 2 && a.stats().payloads_sent_zero_copy == 1;
  })) << a.stats().messages_sent << " sent, " << a.stats().payloads_sent_zero_copy << " zero-copy";
  EXPECT_EQ(b.stats().messages_received, 2u);
  b.Stop();
  a.Stop();
}

// Two Vans, B connected to A as peer 1, for tests of what B's handler does on its IO
// thread. ExchangeHeartbeat: B sends a HEARTBEAT, A answers with a HEARTBEAT_ACK, and
// `on_ack` runs in B's handler (on B's IO thread) when the ack arrives. The Vans are
// destroyed (stopped) before the recorders their handlers write to.
class VanPairTest : public ::testing::Test {
 protected:
  void ExchangeHeartbeat(std::function<void(const Origin&)> on_ack) {
    const int port = a.Bind("127.0.0.1", 0);
    a.Start(at_a.Handler());
    at_b.SetHook([on_ack](const Message& m, const Origin& o) {
      if (m.type() == proto::HEARTBEAT_ACK) on_ack(o);
    });
    b.Start(at_b.Handler());
    b.Connect(1, Endpoint(port), "id-b");
    b.Send(1, MakeMessage(proto::HEARTBEAT, 5));
    ASSERT_TRUE(at_a.WaitFor(1));
    ASSERT_EQ(at_a.at(0).message.type(), proto::HEARTBEAT);
    a.Reply(at_a.at(0).origin.identity, MakeMessage(proto::HEARTBEAT_ACK, 0));
  }

  Recorder at_a, at_b;
  Van a{Options("a")};
  Van b{Options("b")};
};

// A handler may send on an outbound connection from the IO thread.
TEST_F(VanPairTest, HandlerCanSendFromIoThread) {
  ASSERT_NO_FATAL_FAILURE(ExchangeHeartbeat(
      [this](const Origin& o) { b.Send(o.peer, MakeMessage(proto::FINALIZE, 5)); }));
  ASSERT_TRUE(at_a.WaitFor(2));
  EXPECT_EQ(at_a.at(1).message.type(), proto::FINALIZE);
  EXPECT_EQ(at_a.at(1).origin.identity, "id-b");
}

// Order across threads (van.h): a message another thread sent before a handler's own Send
// leaves first, though the handler's is transmitted at once and the other waits in the pipe.
// B's handler, on A's HEARTBEAT_ACK, waits until this thread has sent request 1 (it sits in
// the pipe: the IO thread is in the handler), then sends request 2 itself: A must see 1, 2.
TEST_F(VanPairTest, AHandlersSendDoesNotOvertakeAnotherThreadsEarlierSend) {
  std::promise<void> sent_1;
  std::shared_future<void> sent_1_done = sent_1.get_future().share();
  ASSERT_NO_FATAL_FAILURE(ExchangeHeartbeat([this, sent_1_done](const Origin& o) {
    ASSERT_EQ(sent_1_done.wait_for(kDeadline), std::future_status::ready);
    Message second = MakeMessage(proto::FINALIZE, 5);
    second.envelope.set_request_id(2);
    b.Send(o.peer, std::move(second));  // on the IO thread: transmitted at once
  }));
  ASSERT_TRUE(WaitUntil([&] { return b.stats().messages_received >= 1; }));
  Message first = MakeMessage(proto::FINALIZE, 5);
  first.envelope.set_request_id(1);
  b.Send(1, std::move(first));  // from this thread: through the pipe
  sent_1.set_value();
  ASSERT_TRUE(at_a.WaitFor(3));
  EXPECT_EQ(at_a.at(1).message.envelope.request_id(), 1u) << "the handler's send overtook";
  EXPECT_EQ(at_a.at(2).message.envelope.request_id(), 2u);
  b.Stop();
  a.Stop();
}

// A Stop whose command a handler's own Send reads from the pipe (Send drains it first)
// still ends the IO thread: B's handler waits until Stop() was called on another thread,
// then sends; Stop() must return.
TEST_F(VanPairTest, AStopReadByAHandlersSendStillEndsTheIoThread) {
  std::promise<void> stopping;
  std::shared_future<void> stopping_done = stopping.get_future().share();
  ASSERT_NO_FATAL_FAILURE(ExchangeHeartbeat([this, stopping_done](const Origin& o) {
    ASSERT_EQ(stopping_done.wait_for(kDeadline), std::future_status::ready);
    b.Send(o.peer, MakeMessage(proto::FINALIZE, 5));  // reads the kStop queued before it
  }));
  ASSERT_TRUE(WaitUntil([&] { return b.stats().messages_received >= 1; }));
  auto stopped = std::async(std::launch::async, [this] { b.Stop(); });
  // Stop() queues its command at once; give it the time to (a later handler drain that
  // misses it only leaves this run without the case, never fails it).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  stopping.set_value();
  ASSERT_EQ(stopped.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "Stop() did not return: the IO thread missed the stop its handler read";
  a.Stop();
}

// (e) After Stop(), Send and Reply are harmless no-ops that still release the payload.
TEST(VanTest, SendAfterStopIsANoOp) {
  Recorder at_a, at_b;
  ReleaseLog log_b;
  Van a(Options("a"));
  int port = a.Bind("127.0.0.1", 0);
  a.Start(at_a.Handler());
  Van b(Options("b", &log_b));
  b.Start(at_b.Handler());
  b.Connect(1, Endpoint(port), "id-b");
  b.Send(1, MakeMessage(proto::HEARTBEAT, 5));
  ASSERT_TRUE(at_a.WaitFor(1));

  b.Stop();
  b.Stop();  // idempotent
  VanStats before = b.stats();
  std::vector<float> tensor = Pattern(4096, 1.0f);
  std::atomic<int> released{0};
  b.Send(1, PushOf(MakeKey(9, 9), Buffer::Borrow(tensor.data(), tensor.size() * sizeof(float),
                                                  [&] { released++; })));
  b.Send(1, MakeMessage(proto::HEARTBEAT, 5));
  b.Connect(2, Endpoint(port), "late");
  // The dropped payload is released at once, never sent.
  EXPECT_EQ(released.load(), 1);
  VanStats after = b.stats();
  EXPECT_EQ(after.messages_sent, before.messages_sent);
  EXPECT_EQ(after.payloads_sent_zero_copy, before.payloads_sent_zero_copy);
  EXPECT_EQ(after.send_failures, before.send_failures);

  a.Stop();
  a.Reply("id-b", MakeMessage(proto::HEARTBEAT_ACK, 0));
  EXPECT_EQ(at_a.count(), 1u);
  EXPECT_EQ(at_b.count(), 0u);
}

// A Van stopped before it ever started. Disabled: Van::Stop() closes the command pipe
// without setting pipe_closed_ when the IO thread was never started, so a later
// Send() writes to the closed ZeroMQ socket and Enqueue's CHECK aborts the process.
TEST(VanTest, SendAfterStopWithoutStartIsANoOp) {
  Van v(Options("never-started"));
  v.Stop();
  std::atomic<int> released{0};
  std::vector<float> tensor = Pattern(16, 1.0f);
  v.Send(1, PushOf(MakeKey(0, 0), Buffer::Borrow(tensor.data(), tensor.size() * sizeof(float),
                                                  [&] { released++; })));
  v.Reply("nobody", MakeMessage(proto::HEARTBEAT_ACK, 0));
  EXPECT_EQ(released.load(), 1);
  EXPECT_EQ(v.stats().messages_sent, 0u);
}

// A message queued before Start() is sent once the IO thread runs.
TEST(VanTest, SendBeforeStartIsQueued) {
  Recorder at_a, at_b;
  Van a(Options("a"));
  int port = a.Bind("127.0.0.1", 0);
  a.Start(at_a.Handler());
  Van b(Options("b"));
  b.Connect(1, Endpoint(port), "id-b");
  b.Send(1, MakeMessage(proto::HEARTBEAT, 5));
  b.Start(at_b.Handler());
  ASSERT_TRUE(at_a.WaitFor(1));
  EXPECT_EQ(at_a.at(0).message.type(), proto::HEARTBEAT);
}

// (f) Counters: sent messages and zero-copy payloads, failed sends, and bad inbound
// messages (from a raw ZeroMQ socket), which never reach the handler.
TEST(VanTest, StatsCountSendsFailuresAndBadMessages) {
  Recorder at_a, at_b;
  ReleaseLog log_b;
  Van a(Options("a"));
  int port = a.Bind("127.0.0.1", 0);
  a.Start(at_a.Handler());
  Van b(Options("b", &log_b));
  b.Start(at_b.Handler());
  b.Connect(1, Endpoint(port), "id-b");

  std::vector<float> tensor = Pattern(1024, 1.0f);
  const size_t bytes = tensor.size() * sizeof(float);
  for (int i = 0; i < 3; ++i) {
    b.Send(1, PushOf(MakeKey(0, i), Buffer::Borrow(tensor.data(), bytes, nullptr)));
  }
  b.Send(1, MakeMessage(proto::HEARTBEAT, 5));
  ASSERT_TRUE(at_a.WaitFor(4));
  // The sender counts a message once ZeroMQ took it, which may be after it arrived.
  for (int i = 0; i < 5000 && b.stats().messages_sent < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  VanStats sb = b.stats();
  EXPECT_EQ(sb.messages_sent, 4u);
  EXPECT_EQ(sb.payloads_sent_zero_copy, 3u);
  EXPECT_GE(sb.bytes_sent, 3 * bytes);
  EXPECT_EQ(sb.send_failures, 0u);
  EXPECT_EQ(sb.bad_messages_dropped, 0u);
  VanStats sa = a.stats();
  EXPECT_EQ(sa.messages_received, 4u);
  EXPECT_GE(sa.bytes_received, 3 * bytes);
  EXPECT_EQ(sa.bad_messages_dropped, 0u);

  // Failed sends: an unknown peer id, and a reply to an identity the ROUTER never saw
  // (ROUTER_MANDATORY). The payload of a failed send is still released.
  std::atomic<int> released{0};
  b.Send(42, PushOf(MakeKey(5, 0), Buffer::Borrow(tensor.data(), bytes, [&] { released++; })));
  a.Reply("nobody", MakeMessage(proto::HEARTBEAT_ACK, 0));
  ASSERT_TRUE(WaitUntil([&] { return b.stats().send_failures == 1; }));
  ASSERT_TRUE(WaitUntil([&] { return a.stats().send_failures == 1; }));
  ASSERT_TRUE(WaitUntil([&] { return released.load() == 1; }));
  EXPECT_EQ(b.stats().messages_sent, 4u);
  EXPECT_EQ(b.stats().payloads_sent_zero_copy, 3u);

  // Bad messages from a raw DEALER.
  void* ctx = zmq_ctx_new();
  ASSERT_NE(ctx, nullptr);
  void* raw = zmq_socket(ctx, ZMQ_DEALER);
  ASSERT_NE(raw, nullptr);
  int linger = 0;
  zmq_setsockopt(raw, ZMQ_LINGER, &linger, sizeof linger);
  ASSERT_EQ(zmq_connect(raw, Endpoint(port).c_str()), 0);

  // 1. bytes that are no protobuf
  ASSERT_EQ(zmq_send(raw, "garbage", 7, 0), 7);
  // 2. three frames
  std::string hb = MakeMessage(proto::HEARTBEAT, 3).envelope.SerializeAsString();
  ASSERT_GE(zmq_send(raw, hb.data(), hb.size(), ZMQ_SNDMORE), 0);
  ASSERT_GE(zmq_send(raw, "ab", 2, ZMQ_SNDMORE), 0);
  ASSERT_GE(zmq_send(raw, "cd", 2, 0), 0);
  // 3. a well-formed envelope of another protocol version (1: the first release's)
  Message v1 = MakeMessage(proto::HEARTBEAT, 3);
  v1.envelope.set_version(1);
  std::string v1_wire = v1.envelope.SerializeAsString();
  ASSERT_GE(zmq_send(raw, v1_wire.data(), v1_wire.size(), 0), 0);
  // 4. a PUSH whose length field disagrees with its payload frame
  Message lying = MakeMessage(proto::PUSH, 3);
  lying.envelope.set_dtype(proto::FLOAT32);
  lying.envelope.set_length(8);
  std::string lying_wire = lying.envelope.SerializeAsString();
  ASSERT_GE(zmq_send(raw, lying_wire.data(), lying_wire.size(), ZMQ_SNDMORE), 0);
  ASSERT_GE(zmq_send(raw, "abcd", 4, 0), 0);
  // 5. a control message with a payload frame
  ASSERT_GE(zmq_send(raw, hb.data(), hb.size(), ZMQ_SNDMORE), 0);
  ASSERT_GE(zmq_send(raw, "abcd", 4, 0), 0);
  // Then a good one: the connection keeps order, so once it arrived every bad one
  // above was looked at.
  Message sentinel = MakeMessage(proto::FINALIZE, 3);
  std::string sentinel_wire = sentinel.envelope.SerializeAsString();
  ASSERT_GE(zmq_send(raw, sentinel_wire.data(), sentinel_wire.size(), 0), 0);

  ASSERT_TRUE(at_a.WaitFor(5));
  EXPECT_EQ(at_a.at(4).message.type(), proto::FINALIZE);
  EXPECT_EQ(at_a.at(4).message.sender(), 3);
  EXPECT_TRUE(at_a.at(4).origin.inbound);
  EXPECT_FALSE(at_a.at(4).origin.identity.empty());
  EXPECT_NE(at_a.at(4).origin.identity, "id-b");
  sa = a.stats();
  EXPECT_EQ(sa.bad_messages_dropped, 5u);
  EXPECT_EQ(sa.messages_received, 5u);
  EXPECT_EQ(at_a.count(), 5u);

  zmq_close(raw);
  zmq_ctx_term(ctx);
  b.Stop();
  a.Stop();
}

// on_version_mismatch sees a REGISTER of another protocol version that arrived on the
// ROUTER, with the connection to answer on; other types of other versions, and a REGISTER
// of another version from an outbound peer, are only dropped.
TEST(VanTest, RegisterOfAnotherVersionGoesToTheMismatchCallback) {
  std::mutex mu;
  std::vector<Received> mismatched;  // guarded by mu
  auto record = [&](const Message& m, const Origin& o) {
    std::lock_guard<std::mutex> lock(mu);
    mismatched.push_back(Received{m, o});
  };
  auto seen = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return mismatched.size();
  };
  Recorder at_a, at_b;
  VanOptions options_a = Options("a");
  options_a.on_version_mismatch = record;
  Van a(options_a);
  int port = a.Bind("127.0.0.1", 0);
  a.Start(at_a.Handler());
  VanOptions options_b = Options("b");
  options_b.on_version_mismatch = record;
  Van b(options_b);
  b.Start(at_b.Handler());
  b.Connect(1, Endpoint(port), "id-b");

  auto versioned = [](proto::MessageType type, uint32_t version) {
    Message m = MakeMessage(type, -1);
    m.envelope.set_version(version);
    if (type == proto::REGISTER) m.envelope.mutable_register_request()->set_role(proto::WORKER);
    return m;
  };
  b.Send(1, versioned(proto::REGISTER, 2));                 // to the callback
  b.Send(1, versioned(proto::HEARTBEAT, 2));                // dropped
  b.Send(1, versioned(proto::REGISTER, kProtocolVersion + 1));  // to the callback: newer is no better
  b.Send(1, versioned(proto::REGISTER, kProtocolVersion));  // delivered: the connection's order
  ASSERT_TRUE(at_a.WaitFor(1));
  EXPECT_EQ(at_a.at(0).message.type(), proto::REGISTER);
  ASSERT_EQ(seen(), 2u);
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(mismatched[0].message.envelope.version(), 2u);
    EXPECT_EQ(mismatched[0].message.envelope.register_request().role(), proto::WORKER);
    EXPECT_TRUE(mismatched[0].origin.inbound);
    EXPECT_EQ(mismatched[0].origin.identity, "id-b");
    EXPECT_EQ(mismatched[1].message.envelope.version(), kProtocolVersion + 1);
  }
  EXPECT_EQ(a.stats().bad_messages_dropped, 3u);
  EXPECT_EQ(a.stats().messages_received, 1u);

  // From the ROUTER to an outbound connection: dropped, the callback is not called.
  a.Reply("id-b", versioned(proto::REGISTER, 2));
  a.Reply("id-b", MakeMessage(proto::HEARTBEAT_ACK, 1));
  ASSERT_TRUE(at_b.WaitFor(1));
  EXPECT_EQ(at_b.at(0).message.type(), proto::HEARTBEAT_ACK);
  EXPECT_EQ(b.stats().bad_messages_dropped, 1u);
  EXPECT_EQ(seen(), 2u);
  b.Stop();
  a.Stop();
}

// on_invalid sees each message that arrived on the ROUTER, parsed and failed
// ValidateMessage, with the reason and the connection to answer on; it is counted and not
// handed to the handler. What does not parse, and what an outbound connection receives,
// never reaches it.
TEST(VanTest, InvalidMessagesOnTheRouterGoToTheInvalidCallback) {
  std::mutex mu;
  std::vector<std::pair<Received, std::string>> invalid;  // guarded by mu
  auto record = [&](const Message& m, const Status& why, const Origin& o) {
    std::lock_guard<std::mutex> lock(mu);
    invalid.emplace_back(Received{m, o}, why.message());
  };
  auto seen = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return invalid.size();
  };
  Recorder at_a, at_b;
  VanOptions options_a = Options("a"), options_b = Options("b");
  options_a.on_invalid = record;
  options_b.on_invalid = record;
  Van a(options_a);
  int port = a.Bind("127.0.0.1", 0);
  a.Start(at_a.Handler());
  Van b(options_b);
  b.Start(at_b.Handler());
  b.Connect(1, Endpoint(port), "id-b");

  Message frame = MakeMessage(proto::PUSH, 7);  // off its frame boundary
  frame.envelope.set_request_id(42);
  frame.envelope.set_dtype(proto::FLOAT32);
  SetFrame(&frame.envelope, /*offset=*/1024, /*key_length=*/16384, /*frame_bytes=*/4096);
  frame.envelope.set_length(4096);
  frame.payload = Buffer::Allocate(4096);
  b.Send(1, frame);
  b.Send(1, MakeMessage(proto::HEARTBEAT, 7));  // delivered: the connection's order
  ASSERT_TRUE(at_a.WaitFor(1));
  EXPECT_EQ(at_a.at(0).message.type(), proto::HEARTBEAT);
  ASSERT_EQ(seen(), 1u);
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(invalid[0].first.message.envelope.request_id(), 42u);
    EXPECT_TRUE(invalid[0].first.origin.inbound);
    EXPECT_EQ(invalid[0].first.origin.identity, "id-b");
    EXPECT_EQ(invalid[0].second,
              "PUSH of tensor 0 partition 0 round 0 at offset 1024: the offset is not a "
              "multiple of the frame size 4096");
  }
  EXPECT_EQ(a.stats().bad_messages_dropped, 1u);

  // From the ROUTER to an outbound connection: dropped, the callback is not called.
  a.Reply("id-b", frame);
  a.Reply("id-b", MakeMessage(proto::HEARTBEAT_ACK, 1));
  ASSERT_TRUE(at_b.WaitFor(1));
  EXPECT_EQ(at_b.at(0).message.type(), proto::HEARTBEAT_ACK);
  EXPECT_EQ(b.stats().bad_messages_dropped, 1u);
  EXPECT_EQ(seen(), 1u);
  b.Stop();
  a.Stop();
}

// Bind refuses a port that is taken, with a FerryError.
TEST(VanTest, BindFailsOnBusyPort) {
  Van a(Options("a"));
  int port = a.Bind("127.0.0.1", 0);
  Van b(Options("b"));
  try {
    b.Bind("127.0.0.1", port);
    ADD_FAILURE() << "second Bind on port " << port << " succeeded";
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    EXPECT_NE(std::string(e.what()).find(std::to_string(port)), std::string::npos) << e.what();
  }
}

// Fault injection drops only data messages, at the configured rate, and counts them.
TEST(VanTest, FaultInjectionDropsDataMessagesOnly) {
  Recorder at_a, at_b;
  VanOptions lossy = Options("a");
  lossy.drop_percent = 100;
  Van a(lossy);
  int port = a.Bind("127.0.0.1", 0);
  a.Start(at_a.Handler());
  Van b(Options("b"));
  b.Start(at_b.Handler());
  b.Connect(1, Endpoint(port), "id-b");
  std::vector<float> tensor = Pattern(1024, 1.0f);
  for (int i = 0; i < 20; ++i) {
    b.Send(1, PushOf(MakeKey(1, i), Buffer::Borrow(tensor.data(), 4096, [] {})));
    Message pull = MakeMessage(proto::RESEND_SUM, 5);
    pull.envelope.set_key(MakeKey(1, i));
    b.Send(1, std::move(pull));
    b.Send(1, MakeMessage(proto::HEARTBEAT, 5));
  }
  ASSERT_TRUE(at_a.WaitFor(20));
  ASSERT_TRUE(WaitUntil([&] { return a.stats().injected_drops == 40; }));
  EXPECT_EQ(at_a.count(), 20u);
  for (size_t i = 0; i < 20; ++i) EXPECT_EQ(at_a.at(i).message.type(), proto::HEARTBEAT);
  EXPECT_EQ(b.stats().injected_drops, 0u);
  b.Stop();
  a.Stop();
}

// A fixed delay holds every message at least that long and keeps their order.
TEST(VanTest, FaultInjectionDelayKeepsOrder) {
  Recorder at_a, at_b;
  VanOptions slow = Options("a");
  slow.delay_ms = 80;
  Van a(slow);
  int port = a.Bind("127.0.0.1", 0);
  a.Start(at_a.Handler());
  Van b(Options("b"));
  b.Start(at_b.Handler());
  b.Connect(1, Endpoint(port), "id-b");
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 50; ++i) {
    Message m = MakeMessage(proto::HEARTBEAT, 5);
    m.envelope.set_request_id(i);
    b.Send(1, std::move(m));
  }
  ASSERT_TRUE(at_a.WaitFor(50));
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_GE(elapsed, std::chrono::milliseconds(80));
  for (size_t i = 0; i < 50; ++i) EXPECT_EQ(at_a.at(i).message.envelope.request_id(), i);
  b.Stop();
  a.Stop();
}

}  // namespace
}  // namespace ferry
