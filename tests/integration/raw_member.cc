// ferry-raw-member: a worker that registers properly but speaks the data protocol by
// hand, to abuse a live server from inside the job (tests/integration/bad_input_test).
//
// It is worker rank 1 beside one ferry-test-worker --mode=loop (rank 0) and one server:
// it pushes tensor "loop" (tensor id 0, one partition) with the values the loop mode
// expects of rank 1, so rank 0's sums stay checkable, and before each honest push it
// sends the abuse of the round:
//   a push for a round far ahead, a RESEND_SUM for a round it never pushed, a push of an
//   old round, a push for a key nobody else uses, and its honest push twice. In round 0
//   also a push on a control connection (common/transport/van.h, "Lanes"), and sparse rows: a
//   ROWS_PUSH with a row id out of range (refused; the rows key fails), another push to that key
//   (refused with the same reason), a ROWS_PUSH of a round ahead, and a rows RESEND_SUM for a push
//   never made.
//   Also in round 0 a PUSH_FUSED of two pushes whose lengths do not add up to its frame.
// Also each round, three frames of the honest push cut wrong (protocol 3, message.h
// "Frames"): an offset past the key, an offset off the frame boundary, a short middle
// frame. ValidateMessage refuses them (and the fused push) on arrival, so the server's
// Van drops them, and the server answers each (we are a worker of its job) with an ERROR
// whose reason names key, round and offset (Server::OnInvalid).
// Every abuse must be answered (an ERROR with the reason, or an acknowledgement for the
// harmless ones) and the honest sum must be exact. Prints "OK abuse rounds=N errors=E
// bad_frames=F" (F of the E errors answered frames cut wrong).
// With --streaming it abuses nothing and proves streaming aggregation instead (worker 0
// runs with FERRY_FRAME_BYTES=65536, so the key is 4 frames): each round it sends its
// frame 0 only, and must receive the sum of frame 0 before it sends frames 1-3, which
// cannot happen unless the server answers a frame while the last worker's later frames of
// that partition have not arrived. Prints "OK streaming rounds=N".
// Exit codes: 0 as expected, 1 a Ferry error, 3 a wrong value or a missing answer.

#include <gflags/gflags.h>
#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

#include "common/cluster/cluster_client.h"
#include "common/cluster/role_main.h"
#include "common/transport/fused_push.h"
#include "common/transport/rows_message.h"
#include "common/util/error.h"
#include "worker/placement.h"

DEFINE_int32(rounds, 10, "honest rounds (the loop worker must run as many)");
DEFINE_bool(streaming, false, "prove streaming aggregation instead of abusing (see above)");

namespace ferry {
namespace {

constexpr int kExitWrong = 3;
constexpr uint64_t kCount = 1 << 16;  // the loop mode's tensor

class Inbox {
 public:
  void Put(Message&& m) {
    std::lock_guard<std::mutex> lock(mu_);
    messages_.push_back(std::move(m));
    cv_.notify_all();
  }
  // The next message answering `request` (others are kept); false after 20 s.
  bool Take(uint64_t request, proto::MessageType type, Message* out) {
    std::unique_lock<std::mutex> lock(mu_);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (true) {
      for (auto it = messages_.begin(); it != messages_.end(); ++it) {
        if (it->envelope.request_id() == request && it->type() == type) {
          *out = std::move(*it);
          messages_.erase(it);
          return true;
        }
      }
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) return false;
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Message> messages_;
};

class RawMember {
 public:
  explicit RawMember(const Config& config)
      : van_(VanOptionsFor("raw-member", config)), cluster_(config, &van_, 0) {}

  void Start() {
    van_.Start([this](Message&& m, const Origin& o) {
      if (!cluster_.HandleMessage(m, o)) inbox_.Put(std::move(m));
    });
    cluster_.Register();
    FERRY_ENFORCE(cluster_.my_rank() == 1 && cluster_.table().num_servers() == 1,
                  ErrorCode::kInvalidArgument, "ferry-raw-member must be worker 1 of a 1-server job");
    const auto server = cluster_.table().Servers()[0];
    van_.Connect(server.id(), StrCat("tcp://", server.host(), ":", server.port()),
                 cluster_.routing_id());
    server_ = server.id();
    // A connection that claims to be our control lane, to send on it what is not control.
    van_.Connect(kControlPeer, StrCat("tcp://", server.host(), ":", server.port()),
                 ControlIdentity(cluster_.routing_id()));
  }

  // Like Send, on the control connection whatever the message's type.
  uint64_t SendOnControl(Message m) {
    uint64_t id = next_request_++;
    m.envelope.set_request_id(id);
    van_.Send(kControlPeer, std::move(m));
    return id;
  }

  // Sends `m` with a fresh request id; returns the id.
  uint64_t Send(Message m) {
    uint64_t id = next_request_++;
    SendAs(id, std::move(m));
    return id;
  }
  // Sends `m` as request `id` (a later frame of a push).
  void SendAs(uint64_t id, Message m) {
    m.envelope.set_request_id(id);
    van_.Send(server_, std::move(m));
  }

  Message Push(uint64_t key, uint32_t round, const std::vector<float>& values) {
    Message m = MakeMessage(proto::PUSH, cluster_.my_id());
    m.envelope.set_key(key);
    m.envelope.set_round(round);
    m.envelope.set_dtype(proto::FLOAT32);
    m.envelope.set_length(values.size() * sizeof(float));
    m.envelope.set_tensor_hash(
        key == MakeKey(0, 0) ? TensorHash("loop", DataType::kFloat32, {kCount}) : 12345);
    if (!values.empty()) {  // an empty vector's data() may be null, even for 0 bytes
      m.payload = Buffer::Allocate(values.size() * sizeof(float));
      std::memcpy(m.payload.data(), values.data(), m.payload.size());
    }
    return m;
  }

  // A ROWS_PUSH of rows `ids` (one float each) of a 100-row tensor.
  Message RowsPush(uint64_t key, uint32_t round, const std::vector<int64_t>& ids) {
    Message m = MakeMessage(proto::ROWS_PUSH, cluster_.my_id());
    m.envelope.set_key(key);
    m.envelope.set_round(round);
    m.envelope.set_dtype(proto::FLOAT32);
    m.envelope.set_tensor_hash(54321);
    m.envelope.mutable_rows()->set_num_rows(ids.size());
    m.envelope.mutable_rows()->set_row_elements(1);
    m.envelope.mutable_rows()->set_total_rows(100);
    m.payload = Buffer::Allocate(ids.size() * (sizeof(int64_t) + sizeof(float)));
    std::memcpy(m.payload.data(), ids.data(), ids.size() * sizeof(int64_t));
    std::vector<float> ones(ids.size(), 1.0f);
    std::memcpy(m.payload.bytes() + ids.size() * sizeof(int64_t), ones.data(),
                ones.size() * sizeof(float));
    m.envelope.set_length(m.payload.size());
    return m;
  }

  // The `length` bytes at `offset` of `values` as a frame of a key of `key_length` bytes
  // cut in `frame_bytes` (bytes past `values` are zeros), whether or not the cut allows it.
  Message Frame(uint64_t key, uint32_t round, const std::vector<float>& values, uint64_t key_length,
                uint64_t frame_bytes, uint64_t offset, uint64_t length) {
    Message m = Push(key, round, {});
    SetFrame(&m.envelope, offset, key_length, frame_bytes);
    m.envelope.set_length(length);
    m.payload = Buffer::Allocate(length);
    std::memset(m.payload.data(), 0, length);
    const uint64_t have = values.size() * sizeof(float);
    if (offset < have) {
      std::memcpy(m.payload.data(), reinterpret_cast<const char*>(values.data()) + offset,
                  std::min(length, have - offset));
    }
    return m;
  }

  Message Pull(uint64_t key, uint32_t round) {
    Message m = MakeMessage(proto::RESEND_SUM, cluster_.my_id());
    m.envelope.set_key(key);
    m.envelope.set_round(round);
    return m;
  }

  // Expects an ERROR containing `words` for `request`.
  bool ExpectError(uint64_t request, const std::string& words) {
    Message m;
    if (!inbox_.Take(request, proto::ERROR, &m)) {
      std::fprintf(stderr, "no ERROR for request %llu (expected '%s')\n",
                   static_cast<unsigned long long>(request), words.c_str());
      return false;
    }
    const std::string& reason = m.envelope.error().reason();
    std::printf("refused as expected: %s\n", reason.c_str());
    if (reason.find(words) == std::string::npos) {
      std::fprintf(stderr, "ERROR '%s' does not say '%s'\n", reason.c_str(), words.c_str());
      return false;
    }
    errors_++;
    return true;
  }

  bool Take(uint64_t request, proto::MessageType type, Message* out) {
    return inbox_.Take(request, type, out);
  }
  // Sends a frame cut wrong and expects an ERROR whose reason is `words` (ValidateMessage's).
  bool ExpectFrameRefused(Message frame, const std::string& words) {
    bad_frames_++;
    return ExpectError(Send(std::move(frame)), words);
  }
  int errors() const { return errors_; }
  int bad_frames() const { return bad_frames_; }
  void Finish() { cluster_.Finalize(); }
  ~RawMember() { van_.Stop(); }

 private:
  Van van_;
  ClusterClient cluster_;
  Inbox inbox_;
  static constexpr int kControlPeer = 1 << 20;  // a peer id no node has
  int server_ = -1;
  uint64_t next_request_ = 1;
  int errors_ = 0;
  int bad_frames_ = 0;  // sent by ExpectFrameRefused
};

// The loop mode's values of rank `rank` in `round`, and their sum over `n` ranks.
std::vector<float> LoopValues(int rank, int round) {
  std::vector<float> v(kCount);
  for (uint64_t i = 0; i < kCount; ++i) v[i] = static_cast<float>((i + round) % 5 + rank);
  return v;
}

bool ExactSum(const Message& result, int round) {
  std::vector<float> a = LoopValues(0, round), b = LoopValues(1, round);
  const float* got = reinterpret_cast<const float*>(result.payload.data());
  if (result.payload.size() != kCount * sizeof(float)) return false;
  for (uint64_t i = 0; i < kCount; ++i) {
    if (got[i] != a[i] + b[i]) {
      std::fprintf(stderr, "WRONG round %d element %llu: %g\n", round,
                   static_cast<unsigned long long>(i), got[i]);
      return false;
    }
  }
  return true;
}

// Three frames of the honest push cut wrong (the key, kCount floats, in 64 KiB frames),
// each refused with the reason naming key, round and offset.
bool RefusedFrames(RawMember& m, int round, const std::vector<float>& values) {
  const uint64_t key = MakeKey(0, 0), key_bytes = kCount * sizeof(float), frame = 65536;
  const std::string at = StrCat("PUSH of tensor 0 partition 0 round ", round, " at offset ");
  bool ok = m.ExpectFrameRefused(m.Frame(key, round, values, key_bytes, frame, key_bytes, frame),
                                 at + "262144: the offset is past the key's 262144 bytes");
  ok &= m.ExpectFrameRefused(m.Frame(key, round, values, key_bytes, frame, 1024, frame),
                             at + "1024: the offset is not a multiple of the frame size 65536");
  ok &= m.ExpectFrameRefused(m.Frame(key, round, values, key_bytes, frame, frame, frame / 2),
                             at + "65536: 32768 bytes where the frame has 65536");
  return ok;
}

// A PUSH_FUSED of two pushes on keys nobody uses whose lengths add up to less than its
// frame: each push is refused under its own request id.
bool RefusedFusedPush(RawMember& m) {
  Message a = m.Push(MakeKey(80, 0), 0, {1.0f}), b = m.Push(MakeKey(81, 0), 0, {2.0f});
  a.envelope.set_request_id(9001);
  b.envelope.set_request_id(9002);
  Message fused = MakeFusedPush(a.sender(), {&a, &b});
  fused.envelope.mutable_fused_push()->mutable_pushes(1)->set_length(0);
  m.Send(std::move(fused));  // its own request id is replaced, its pushes' are kept
  const char* why = "fused pushes add up to 4 bytes but the payload frame has 8";
  return m.ExpectError(9001, why) && m.ExpectError(9002, why);
}

int AbuseRound(RawMember& m, int round) {
  const uint64_t key = MakeKey(0, 0);
  std::vector<float> values = LoopValues(1, round);
  bool ok = m.ExpectError(m.Send(m.Push(key, round + 1000, values)), "for round");
  ok &= m.ExpectError(m.Send(m.Pull(key, round + 5)), "no record of its push");
  if (round >= 3) {
    ok &= m.ExpectError(m.Send(m.Push(key, round - 3, values)),
                        "only the previous round's sum is kept");
  }
  Message reply;
  if (round == 0) {  // a key nobody else pushes: accepted (keys are defined by use), waits
    uint64_t stray = m.Send(m.Push(MakeKey(77, 0), 0, {1.0f, 2.0f}));
    ok &= m.Take(stray, proto::PUSH_ACK, &reply);
    // Tensor bytes on the control connection: refused, and nothing is added.
    ok &= m.ExpectError(m.SendOnControl(m.Push(key, round, values)),
                        "belongs on the data connection");
    // Sparse rows on keys nobody else uses.
    ok &= m.ExpectError(m.Send(m.RowsPush(RowsKey(77, 0), 0, {3, 100})),
                        "row id 100 (position 1 of 2) is outside the tensor's rows 0..99");
    ok &= m.ExpectError(m.Send(m.RowsPush(RowsKey(77, 0), 0, {3})), "row id 100");
    uint64_t first = m.Send(m.RowsPush(RowsKey(78, 0), 0, {5, 5}));
    ok &= m.Take(first, proto::PUSH_ACK, &reply);  // waits for rank 0, which never comes
    ok &= m.ExpectError(m.Send(m.RowsPush(RowsKey(78, 0), 4, {5})), "for round 4");
    Message rows_pull = m.Pull(RowsKey(79, 0), 0);
    rows_pull.envelope.mutable_rows()->set_row_elements(1);
    ok &= m.ExpectError(m.Send(std::move(rows_pull)), "no record of its push");
    ok &= RefusedFusedPush(m);
  }
  ok &= RefusedFrames(m, round, values);
  // The honest push, sent twice with one request id: added once.
  Message push = m.Push(key, round, values);
  Message twice = push;
  uint64_t id = m.Send(std::move(push));
  twice.envelope.set_request_id(id);
  m.Send(std::move(twice));
  if (!m.Take(id, proto::PUSH_RESULT, &reply)) {
    std::fprintf(stderr, "no sum for round %d\n", round);
    return kExitWrong;
  }
  if (!ok || !ExactSum(reply, round)) return kExitWrong;
  std::printf("round %d exact\n", round);
  std::fflush(stdout);
  return 0;
}

// The frame size worker 0 cuts the loop tensor in (FERRY_FRAME_BYTES of the test).
constexpr uint64_t kStreamFrame = 65536;

// Whether `sum` is the exact sum of the frame at its offset (PUSH_RESULT of a frame).
bool ExactFrame(const Message& sum, int round) {
  const std::vector<float> a = LoopValues(0, round), b = LoopValues(1, round);
  const proto::Envelope& e = sum.envelope;
  const uint64_t first = e.offset() / sizeof(float), count = sum.payload.size() / sizeof(float);
  if (e.frame_bytes() != kStreamFrame || e.key_length() != kCount * sizeof(float) ||
      first + count > kCount) {
    std::fprintf(stderr, "round %d: not a frame of the key's cut: %s\n", round,
                 Describe(sum).c_str());
    return false;
  }
  const float* got = reinterpret_cast<const float*>(sum.payload.data());
  for (uint64_t i = 0; i < count; ++i) {
    if (got[i] != a[first + i] + b[first + i]) {
      std::fprintf(stderr, "WRONG round %d element %llu: %g\n", round,
                   static_cast<unsigned long long>(first + i), got[i]);
      return false;
    }
  }
  return true;
}

// One round of --streaming: frame 0, its sum, then the other frames and their sums.
int StreamingRound(RawMember& m, int round) {
  const uint64_t key = MakeKey(0, 0), key_bytes = kCount * sizeof(float);
  const std::vector<float> values = LoopValues(1, round);
  const uint64_t id = m.Send(m.Frame(key, round, values, key_bytes, kStreamFrame, 0, kStreamFrame));
  Message sum;
  if (!m.Take(id, proto::PUSH_RESULT, &sum)) {
    std::fprintf(stderr, "round %d: no sum of frame 0 while frames 1-3 were held back\n", round);
    return kExitWrong;
  }
  if (sum.envelope.offset() != 0 || !ExactFrame(sum, round)) return kExitWrong;
  for (uint64_t offset = kStreamFrame; offset < key_bytes; offset += kStreamFrame) {
    // Every frame of a push carries its request id.
    m.SendAs(id, m.Frame(key, round, values, key_bytes, kStreamFrame, offset, kStreamFrame));
  }
  for (int i = 1; i < static_cast<int>(key_bytes / kStreamFrame); ++i) {
    if (!m.Take(id, proto::PUSH_RESULT, &sum) || !ExactFrame(sum, round)) {
      std::fprintf(stderr, "round %d: sum %d of the frames missing or wrong\n", round, i);
      return kExitWrong;
    }
  }
  std::printf("round %d streamed\n", round);
  std::fflush(stdout);
  return 0;
}

int Run(const Config& config) {
  RawMember m(config);
  m.Start();
  if (FLAGS_streaming) {
    for (int round = 0; round < FLAGS_rounds; ++round) {
      if (int code = StreamingRound(m, round)) return code;
    }
    m.Finish();
    std::printf("OK streaming rounds=%d\n", FLAGS_rounds);
    return 0;
  }
  for (int round = 0; round < FLAGS_rounds; ++round) {
    if (int code = AbuseRound(m, round)) return code;
  }
  m.Finish();
  std::printf("OK abuse rounds=%d errors=%d bad_frames=%d\n", FLAGS_rounds, m.errors(),
              m.bad_frames());
  return 0;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  const ferry::NodeRole role = ferry::NodeRole::kWorker;
  return ferry::RunRoleMain(argc, argv, &role, ferry::Run);
}
