// Tests of the server's per-key protocols (server/key_protocol.h), driven directly with
// messages: RoundProtocol (synchronous and deterministic rounds), ParamProtocol
// (asynchronous parameters, on the CPU and with sums that come later as on a GPU),
// RowsProtocol (sparse rows), and the one reply builder (ToMessage). Each test asserts the
// exact replies, in order, and the sums they carry.

#include "server/key_protocol.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/compress/codec.h"
#include "server/param_protocol.h"
#include "server/round_protocol.h"
#include "server/rows_protocol.h"
#include "server/stragglers.h"
#include "common/types/process_set.h"
#include "server/sum_pool.h"
#include "server/summation.h"
#include "server/tensor_retirements.h"
#include "tests/server/fake_gpu_summer.h"

namespace ferry {
namespace {

constexpr uint64_t kKey = (7ull << 32) | 3;
constexpr uint64_t kHash = 0xfeedfacecafebeefull;

Buffer Floats(const std::vector<float>& v) { return Buffer::CopyOf(v.data(), v.size() * 4); }

std::vector<float> FloatsOf(const Buffer& b) {
  std::vector<float> v(b.size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), b.data(), b.size());
  return v;
}

std::string Identity(int rank) { return "worker-" + std::to_string(rank); }
uint64_t RequestId(int rank, uint32_t round) { return 1000u * (rank + 1) + round; }

Request DenseRequest(proto::MessageType type, int rank, uint32_t round,
                     const std::vector<float>& values, bool async_mode, uint64_t length) {
  Request r;
  r.message = MakeMessage(type, 100 + rank);
  proto::Envelope& e = r.message.envelope;
  e.set_request_id(RequestId(rank, round));
  e.set_key(kKey);
  e.set_round(round);
  e.set_dtype(proto::FLOAT32);
  e.set_length(length);
  e.set_tensor_hash(kHash);
  e.set_async_mode(async_mode);
  if (type == proto::PUSH) r.message.payload = Floats(values);
  r.identity = Identity(rank);
  r.rank = rank;
  return r;
}

Request Push(int rank, uint32_t round, const std::vector<float>& values, bool async = false) {
  return DenseRequest(proto::PUSH, rank, round, values, async, values.size() * 4);
}

Request Pull(int rank, uint32_t round) {
  return DenseRequest(proto::RESEND_SUM, rank, round, {}, false, 0);
}

// A protocol's world: the engine's joined vector, counters, a Summation, and the replies.
struct Harness {
  explicit Harness(int workers) : joined(workers, false), pool(0, int64_t{1} << 40) {
    summation = MakeCpuSummation(&pool);
  }
  // Sums come later, as on a GPU: a CPU stand-in for the GpuSummer, due at once.
  void UseDeferredSums(KeyProtocol** protocol) {
    GpuSummerOptions options;
    testing::FakeGpuFaults faults;
    faults.max_delay_us = 0;
    summation = MakeGpuSummation(std::make_unique<testing::FakeGpuSummer>(options, faults),
                                 [protocol](uint64_t key, uint64_t generation, Buffer sum) {
                                   (*protocol)->OnSumReady(key, generation, std::move(sum));
                                 });
  }
  ProtocolContext Context() {
    ProtocolContext c;
    num_workers = static_cast<int>(joined.size());
    c.num_workers = &num_workers;
    c.joined = &joined;
    c.summation = summation.get();
    c.counters = &counters;
    c.reply = [this](const Reply& r) { replies.push_back(r); };
    return c;
  }
  std::vector<Reply> Take() { return std::exchange(replies, {}); }
  // Runs completions until `protocol` has no sum in flight.
  void WaitForSums(const KeyProtocol& protocol) {
    for (int i = 0; i < 2000 && protocol.sums_in_flight() > 0; ++i) {
      summation->RunCompletions();
      if (protocol.sums_in_flight() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(protocol.sums_in_flight(), 0);
  }

  ServerCounters counters;
  std::vector<bool> joined;
  int num_workers = 0;  // the protocols' (ProtocolContext::num_workers)
  SumPool pool;
  std::unique_ptr<Summation> summation;
  std::vector<Reply> replies;
};

void ExpectAck(const Reply& r, int rank, uint32_t round) {
  EXPECT_EQ(r.kind, Reply::Kind::kAck);
  EXPECT_EQ(r.identity, Identity(rank));
  EXPECT_EQ(r.request_id, RequestId(rank, round));
  EXPECT_EQ(r.key, kKey);
}

void ExpectSum(const Reply& r, int rank, uint32_t request_round, uint32_t round,
               const std::vector<float>& sum, uint32_t contributors) {
  EXPECT_EQ(r.kind, Reply::Kind::kSum);
  EXPECT_EQ(r.identity, Identity(rank));
  EXPECT_EQ(r.request_id, RequestId(rank, request_round));
  EXPECT_EQ(r.key, kKey);
  EXPECT_EQ(r.sum.round, round);
  EXPECT_EQ(r.sum.length, sum.size() * 4);
  EXPECT_EQ(r.sum.tensor_hash, kHash);
  EXPECT_EQ(r.sum.contributors, contributors);
  EXPECT_EQ(FloatsOf(r.payload), sum);
}

void ExpectError(const Reply& r, int rank, uint32_t round, ErrorCode code,
                 const std::string& reason_part) {
  EXPECT_EQ(r.kind, Reply::Kind::kError);
  EXPECT_EQ(r.identity, Identity(rank));
  EXPECT_EQ(r.request_id, RequestId(rank, round));
  EXPECT_EQ(r.code, code);
  EXPECT_NE(r.reason.find(reason_part), std::string::npos) << r.reason;
}

// --- RoundProtocol ------------------------------------------------------------------

TEST(RoundProtocolTest, AcknowledgesEveryPushThenAnswersEveryPusherWithTheSum) {
  Harness h(3);
  RoundProtocol p(h.Context(), /*deterministic=*/false);
  Request a = Push(0, 0, {1, 2}), b = Push(1, 0, {10, 20}), c = Push(2, 0, {100, 200});
  p.Push(a);
  p.Push(b);
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 2u);
  ExpectAck(r[0], 0, 0);
  ExpectAck(r[1], 1, 0);
  p.Push(c);
  r = h.Take();
  ASSERT_EQ(r.size(), 4u) << "the completing push is acknowledged before the sum goes out";
  ExpectAck(r[0], 2, 0);
  for (int rank = 0; rank < 3; ++rank) ExpectSum(r[1 + rank], rank, 0, 0, {111, 222}, 3);
  EXPECT_EQ(r[1].payload.data(), r[3].payload.data()) << "every pusher gets the same bytes";
  EXPECT_EQ(h.counters.rounds, 1u);
  EXPECT_EQ(h.counters.bytes_summed, 24u);
  EXPECT_EQ(p.Find(kKey)->round, 1u);
}

TEST(RoundProtocolTest, ResendsAndPullsAreAnsweredFromTheRoundTheyBelongTo) {
  Harness h(2);
  RoundProtocol p(h.Context(), false);
  Request a = Push(0, 0, {1}), b = Push(1, 0, {2});
  p.Push(a);
  p.Push(b);
  h.Take();
  Request a1 = Push(0, 1, {4});
  p.Push(a1);
  Request again = Push(0, 1, {4});  // a resend of the open round: acknowledged, not added
  p.Push(again);
  Request late = Push(1, 0, {2});  // a resend of the previous round: its sum again
  p.Push(late);
  p.Pull(Pull(0, 1));  // the open round holds the push: acknowledged again
  p.Pull(Pull(1, 0));  // the previous round: its sum
  p.Pull(Pull(1, 5));
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 6u);
  ExpectAck(r[0], 0, 1);
  ExpectAck(r[1], 0, 1);
  ExpectSum(r[2], 1, 0, 0, {3}, 2);
  ExpectAck(r[3], 0, 1);
  ExpectSum(r[4], 1, 0, 0, {3}, 2);
  ExpectError(r[5], 1, 5, ErrorCode::kBadMessage,
              "worker 1 asked for the sum of " + KeyName(kKey) +
                  " round 5 but this server has no record of its push (the key is at round 1)");
  EXPECT_EQ(h.counters.duplicates, 2u);
  EXPECT_EQ(h.counters.results_resent, 2u);
  EXPECT_EQ(h.counters.rejected, 1u);
  Request ahead = Push(1, 3, {1});
  p.Push(ahead);
  r = h.Take();
  ASSERT_EQ(r.size(), 1u);
  ExpectError(r[0], 1, 3, ErrorCode::kBadMessage,
              "push of " + KeyName(kKey) +
                  " for round 3 but the key is at round 1 (a worker may push a round only after "
                  "receiving the previous one)");
}

// 1 + 1e8 - 1e8 is 0 in float32, -1e8 + 1e8 + 1 is 1: the order decides the bits.
TEST(RoundProtocolTest, DeterministicRoundsSumInRankOrderWhateverTheArrivalOrder) {
  for (bool deterministic : {false, true}) {
    Harness h(3);
    RoundProtocol p(h.Context(), deterministic);
    Request c = Push(2, 0, {-1e8f}), b = Push(1, 0, {1e8f}), a = Push(0, 0, {1.0f});
    p.Push(c);
    p.Push(b);
    p.Push(a);
    std::vector<Reply> r = h.Take();
    ASSERT_EQ(r.size(), 6u);
    ExpectSum(r[3], 2, 0, 0, {deterministic ? 0.0f : 1.0f}, 3);
    EXPECT_EQ(h.counters.pushes_held, deterministic ? 2u : 0u);
  }
}

TEST(RoundProtocolTest, AMismatchFailsTheKeyForEveryPusher) {
  Harness h(3);
  RoundProtocol p(h.Context(), false);
  Request a = Push(0, 0, {1, 2}), b = Push(1, 0, {1, 2, 3});
  p.Push(a);
  p.Push(b);
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 3u);
  ExpectAck(r[0], 0, 0);
  const std::string reason =
      "workers disagree on " + KeyName(kKey) + ": worker 1 pushed 12 bytes of float32";
  ExpectError(r[1], 1, 0, ErrorCode::kMismatch, reason);
  ExpectError(r[2], 0, 0, ErrorCode::kMismatch, reason);
  Request c = Push(2, 0, {1, 2});
  p.Push(c);
  r = h.Take();
  ASSERT_EQ(r.size(), 1u);
  ExpectError(r[0], 2, 0, ErrorCode::kMismatch, reason);
  EXPECT_EQ(h.counters.rejected, 2u);
}

// A push of `values` compressed with `spec` (as a worker's PushCompression sends it).
Request CompressedPush(int rank, uint32_t round, const std::vector<float>& values,
                       const std::string& spec_text) {
  CompressionSpec spec;
  CompressionSpec::Parse(spec_text, &spec).ThrowIfError();
  std::vector<uint8_t> wire(CompressedBytes(spec, values.size()));
  CompressFloats(spec, values.data(), values.size(), PushSeed(spec, kKey, round, rank),
                 wire.data());
  Request r = DenseRequest(proto::PUSH, rank, round, {}, false, wire.size());
  r.message.payload = Buffer::CopyOf(wire.data(), wire.size());
  r.message.envelope.set_compression(spec.ToString());
  r.message.envelope.set_raw_length(values.size() * 4);
  return r;
}

TEST(RoundProtocolTest, CompressedPushesAreSummedAndTheSumCompressedOnceForEveryPusher) {
  Harness h(2);
  RoundProtocol p(h.Context(), false);
  Request a = CompressedPush(0, 0, {1, -2, 3, -4, 5, -6, 7, -8, 9}, "onebit");
  Request b = CompressedPush(1, 0, {1, 2, 3, 4, 5, 6, 7, 8, 9}, "onebit");
  p.Push(a);
  p.Push(b);
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 4u);
  // Decoded: worker 0 +-5 by sign, worker 1 +5: sums 10 or 0; the sum's onebit: scale 50/9.
  const CompressionSpec spec = [] {
    CompressionSpec s;
    CompressionSpec::Parse("onebit", &s).ThrowIfError();
    return s;
  }();
  for (int i = 2; i < 4; ++i) {
    EXPECT_EQ(r[i].kind, Reply::Kind::kSum);
    EXPECT_EQ(r[i].compression, "onebit");
    EXPECT_EQ(r[i].raw_length, 36u);
    EXPECT_EQ(r[i].payload.size(), CompressedBytes(spec, 9));
    std::vector<float> sum(9);
    ASSERT_TRUE(Decompress(spec, DataType::kFloat32, r[i].payload.bytes(), r[i].payload.size(),
                           9, CompressionSeed(kKey, 0), sum.data())
                    .ok());
    const float scale = 50.0f / 9;
    EXPECT_EQ(sum, std::vector<float>(9, scale));  // every sum is >= 0: positive signs
  }
  EXPECT_EQ(r[2].payload.data(), r[3].payload.data()) << "one compressed sum for every pusher";
  EXPECT_EQ(ToMessage(r[2], 1).envelope.compression(), "onebit");
}

TEST(RoundProtocolTest, ACorruptCompressedPushFailsTheKeyForEveryPusherSayingWhy) {
  Harness h(2);
  RoundProtocol p(h.Context(), false);
  Request a = CompressedPush(0, 0, std::vector<float>(64, 1.0f), "topk:0.25");
  p.Push(a);
  Request b = CompressedPush(1, 0, std::vector<float>(64, 1.0f), "topk:0.25");
  const uint32_t out_of_range = 999;
  std::memcpy(b.message.payload.bytes(), &out_of_range, 4);
  p.Push(b);
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 3u);
  ExpectAck(r[0], 0, 0);
  ExpectError(r[1], 0, 0, ErrorCode::kMismatch, "top-k index 999 at position 0 is out of range");
  ExpectError(r[2], 1, 0, ErrorCode::kBadMessage, "worker 1's compressed push");
  for (const char* spec : {"zip", "none"}) {  // refused, and the server goes on
    Request c = CompressedPush(1, 0, std::vector<float>(64, 1.0f), "onebit");
    c.message.envelope.set_compression(spec);
    p.Push(c);
    r = h.Take();
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].kind, Reply::Kind::kError);
  }
}

TEST(RoundProtocolTest, ANewMembershipEpochForgetsTheSumsResiduals) {
  // onebit+ef: the server keeps what the sum's compression lost, so the same round pushed
  // again carries it over; after a new epoch the same pushes give the first round's bytes.
  auto round = [](RoundProtocol& p, Harness& h) {
    Request a = CompressedPush(0, 0, {1, -2, 3, 0.5}, "onebit+ef");
    Request b = CompressedPush(1, 0, {2, 1, -3, 0.25}, "onebit+ef");
    p.Push(a);
    p.Push(b);
    std::vector<Reply> r = h.Take();
    EXPECT_EQ(r.size(), 4u);
    const Buffer& sum = r.back().payload;
    return std::vector<uint8_t>(sum.bytes(), sum.bytes() + sum.size());
  };
  Harness h(2);
  RoundProtocol p(h.Context(), false);
  const std::vector<uint8_t> first = round(p, h);
  p.Restart(KeyProtocol::RestartCause::kAllJoined);  // rounds start over, residuals stay
  EXPECT_NE(round(p, h), first);
  p.Restart(KeyProtocol::RestartCause::kNewEpoch);  // a new membership: residuals go
  EXPECT_EQ(round(p, h), first);
}

TEST(RoundProtocolTest, WorkersThatCompressARoundDifferentlyFailItNamingBoth) {
  Harness h(2);
  RoundProtocol p(h.Context(), false);
  Request a = CompressedPush(0, 0, std::vector<float>(64, 1.0f), "onebit+ef");
  Request b = Push(1, 0, std::vector<float>(64, 1.0f));  // raw
  p.Push(a);
  p.Push(b);
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 3u);
  const std::string reason = "worker 1 compresses it with none, an earlier push of the round "
                             "with onebit+ef";
  ExpectError(r[1], 0, 0, ErrorCode::kMismatch, reason);
  ExpectError(r[2], 1, 0, ErrorCode::kMismatch, reason);
}

TEST(RoundProtocolTest, AJoinCompletesTheRoundWithoutTheWorkerThenEveryoneRestarts) {
  Harness h(2);
  RoundProtocol p(h.Context(), true);
  Request a = Push(0, 0, {5});
  p.Push(a);
  h.Take();
  h.joined[1] = true;
  p.Join();
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 1u);
  ExpectSum(r[0], 0, 0, 0, {5}, 1);
  Request after = Push(1, 1, {1});
  p.Push(after);
  r = h.Take();
  ASSERT_EQ(r.size(), 1u);
  ExpectError(r[0], 1, 1, ErrorCode::kBadMessage, "after joining");
  h.joined.assign(2, false);
  p.Restart(KeyProtocol::RestartCause::kAllJoined);
  EXPECT_EQ(p.Find(kKey)->round, 0u);
  EXPECT_FALSE(p.Find(kKey)->has_last);
  EXPECT_TRUE(h.Take().empty());
}

// Retirement (a name declared anew, server/tensor_retirements.h): the keys stay until
// every worker retired the tensor, so a late RESEND_SUM of its last round is answered;
// then they are gone, and other tensors' keys stay.
TEST(RoundProtocolTest, ARetiredTensorsKeysAreDroppedAndOtherTensorsKeysStay) {
  Harness h(2);
  RoundProtocol p(h.Context(), false);
  Request a = Push(0, 0, {1}), b = Push(1, 0, {2});
  p.Push(a);
  p.Push(b);
  Request other = Push(0, 0, {9});
  other.message.envelope.set_key(MakeKey(8, 0));  // tensor 8: not retired
  p.Push(other);
  h.Take();
  TensorRetirements retired(2);
  EXPECT_TRUE(retired.Note(7, 0));
  EXPECT_TRUE(retired.TakeComplete(h.joined).empty());  // worker 1 still may ask again
  p.Pull(Pull(1, 0));
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 1u);
  ExpectSum(r[0], 1, 0, 0, {3}, 2);
  EXPECT_FALSE(retired.Note(7, 1));
  EXPECT_EQ(retired.TakeComplete(h.joined), std::vector<uint32_t>{7});
  EXPECT_TRUE(retired.empty());
  p.Retire(7, "retired");
  EXPECT_TRUE(h.Take().empty());
  EXPECT_EQ(p.Find(kKey), nullptr);
  EXPECT_NE(p.Find(MakeKey(8, 0)), nullptr);
  EXPECT_EQ(h.counters.keys_retired, 1u);
}

// A worker that retired a tensor while another still pushes it: the round waiting for
// the retired worker is refused, with the reason, and so is every later push of it.
TEST(RoundProtocolTest, PushesOfATensorAnotherWorkerRetiredAreRefusedWithTheReason) {
  Harness h(2);
  RoundProtocol p(h.Context(), false);
  Request a = Push(0, 0, {1}), b = Push(1, 0, {2});
  p.Push(a);
  p.Push(b);
  Request b1 = Push(1, 1, {2});  // worker 1 goes on with the old declaration
  p.Push(b1);
  h.Take();
  TensorRetirements retired(2);
  ASSERT_TRUE(retired.Note(7, 0));
  const std::string why = retired.Refusal(7, -1);
  EXPECT_EQ(why,
            "worker(s) 0 declared the name of tensor 7 anew (another dtype or size) and "
            "retired it, but other workers still use the old declaration: every worker must "
            "declare a name anew at the same point");
  p.RefuseOpenRounds(7, why);
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 1u);
  ExpectError(r[0], 1, 1, ErrorCode::kMismatch, KeyName(kKey) + ": " + why);
  EXPECT_EQ(retired.Refusal(7, 1),
            "worker(s) 0 declared the name of tensor 7 anew (another dtype or size) and "
            "retired it, but worker 1 still uses the old declaration: every worker must "
            "declare a name anew at the same point");
  EXPECT_EQ(retired.Refusal(7, 0), "worker 0 used tensor 7 after it retired it");
  EXPECT_TRUE(retired.RetiredBy(7, 0));
  EXPECT_FALSE(retired.RetiredBy(7, 1));
  EXPECT_EQ(retired.Refusal(8, 1), "");
  // A joined worker pushes nothing: the retirement is complete without it.
  h.joined[1] = true;
  EXPECT_EQ(retired.TakeComplete(h.joined), std::vector<uint32_t>{7});
}

TEST(RoundProtocolTest, SumsThatComeLaterAnswerThePushersWhenTheyArrive) {
  Harness h(2);
  KeyProtocol* protocol = nullptr;
  h.UseDeferredSums(&protocol);
  RoundProtocol p(h.Context(), false);
  protocol = &p;
  Request a = Push(0, 0, {1, 2}), b = Push(1, 0, {3, 4});
  p.Push(a);
  p.Push(b);
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 2u) << "the acks only: the sum is on its way";
  EXPECT_EQ(p.sums_in_flight(), 1);
  EXPECT_TRUE(p.Find(kKey)->frames[0].summing);
  h.WaitForSums(p);
  r = h.Take();
  ASSERT_EQ(r.size(), 2u);
  ExpectSum(r[0], 0, 0, 0, {4, 6}, 2);
  ExpectSum(r[1], 1, 0, 0, {4, 6}, 2);
  EXPECT_EQ(h.counters.device_sums, 1u);
  EXPECT_EQ(h.counters.rounds, 1u);
}

// A tensor retired while a sum of it is on its way (the device's): the pushers are told,
// the device forgets the key, and the sum that arrives later answers nobody.
TEST(RoundProtocolTest, ARetiredKeysSumOnItsWayIsDropped) {
  Harness h(2);
  KeyProtocol* protocol = nullptr;
  h.UseDeferredSums(&protocol);
  RoundProtocol p(h.Context(), false);
  protocol = &p;
  Request a = Push(0, 0, {1, 2}), b = Push(1, 0, {3, 4});
  p.Push(a);
  p.Push(b);
  h.Take();
  ASSERT_EQ(p.sums_in_flight(), 1);
  p.Retire(7, "retired");
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 2u);
  ExpectError(r[0], 0, 0, ErrorCode::kMismatch, KeyName(kKey) + ": retired");
  EXPECT_EQ(p.Find(kKey), nullptr);
  h.WaitForSums(p);
  EXPECT_TRUE(h.Take().empty());
  EXPECT_EQ(h.counters.device_sums_dropped, 1u);
  // The key may come back with another length (a new definition, on the device too).
  Request c = Push(0, 0, {5}), d = Push(1, 0, {6});
  p.Push(c);
  p.Push(d);
  h.WaitForSums(p);
  r = h.Take();
  ASSERT_EQ(r.size(), 4u);
  ExpectSum(r[2], 0, 0, 0, {11}, 2);
}

// --- ParamProtocol ------------------------------------------------------------------

PushVerdict AsyncPush(ParamState& k, int rank, uint32_t round, uint64_t length = 4096) {
  return k.Classify(rank, round, length, DataType::kFloat32, kHash, 3);
}

// Moved from key_state_test.cc (KeyStateTest.AsyncRoundsPerWorkerDedupeResends).
// --- Frames: streaming aggregation ---------------------------------------------------

// Frame `f` of a push of `values`, cut in frames of `frame_floats` floats (wire protocol 3).
Request FramePush(int rank, uint32_t round, const std::vector<float>& values, size_t frame_floats,
                  size_t f) {
  const size_t begin = f * frame_floats;
  const size_t end = std::min(values.size(), begin + frame_floats);
  Request r = Push(rank, round, std::vector<float>(values.begin() + begin, values.begin() + end));
  SetFrame(&r.message.envelope, begin * 4, values.size() * 4, frame_floats * 4);
  EXPECT_TRUE(ValidateMessage(r.message, 1 << 20).ok()) << ValidateMessage(r.message, 1 << 20).message();
  return r;
}

// A frame of a sum: the PUSH_RESULT for `rank` at `offset` of round `round`.
void ExpectFrameSum(const Reply& r, int rank, uint32_t round, uint64_t offset,
                    const std::vector<float>& sum, uint32_t contributors) {
  ExpectSum(r, rank, round, round, sum, contributors);
  EXPECT_EQ(r.offset, offset);
  EXPECT_EQ(r.sum.key_length, 40u);
  EXPECT_EQ(r.sum.frame_bytes, 12u);
  // What goes on the wire is a valid frame of the key.
  EXPECT_TRUE(ValidateMessage(ToMessage(r, 1), 1 << 20).ok())
      << ValidateMessage(ToMessage(r, 1), 1 << 20).message();
}

// A key of 10 floats in frames of 3: 3, 3, 3, 1.
const std::vector<float> kRank0 = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
const std::vector<float> kRank1 = {10, 20, 30, 40, 50, 60, 70, 80, 90, 100};

TEST(RoundProtocolTest, AFrameSumLeavesAsSoonAsEveryWorkersFrameIsIn) {
  Harness h(2);
  RoundProtocol p(h.Context(), false);
  for (size_t f = 0; f < 4; ++f) {
    Request push = FramePush(0, 0, kRank0, 3, f);
    p.Push(push);
  }
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 4u) << "an ack per frame, no sum yet";
  for (size_t f = 0; f < 4; ++f) {
    ExpectAck(r[f], 0, 0);
    EXPECT_EQ(r[f].offset, f * 12);
  }
  // Rank 1's frame 0 completes frame 0: its sum goes to both pushers before rank 1's
  // frames 1-3 arrive.
  Request first = FramePush(1, 0, kRank1, 3, 0);
  p.Push(first);
  r = h.Take();
  ASSERT_EQ(r.size(), 3u);
  ExpectAck(r[0], 1, 0);
  ExpectFrameSum(r[1], 0, 0, 0, {11, 22, 33}, 2);
  ExpectFrameSum(r[2], 1, 0, 0, {11, 22, 33}, 2);
  EXPECT_EQ(h.counters.rounds, 0u) << "the round is open until its last frame is summed";
  // A resent frame is a duplicate per (rank, frame): acknowledged again, not added.
  Request again = FramePush(0, 0, kRank0, 3, 2);
  p.Push(again);
  r = h.Take();
  ASSERT_EQ(r.size(), 1u);
  ExpectAck(r[0], 0, 0);
  EXPECT_EQ(r[0].offset, 24u);
  EXPECT_EQ(h.counters.duplicates, 1u);
  // A RESEND_SUM meanwhile: acknowledged again, with the frames already summed.
  p.Pull(Pull(0, 0));
  r = h.Take();
  ASSERT_EQ(r.size(), 2u);
  ExpectAck(r[0], 0, 0);
  ExpectFrameSum(r[1], 0, 0, 0, {11, 22, 33}, 2);
  // The rest arrives in any order; the last frame ends the round.
  for (size_t f : {3u, 1u, 2u}) {
    Request push = FramePush(1, 0, kRank1, 3, f);
    p.Push(push);
  }
  r = h.Take();
  ASSERT_EQ(r.size(), 9u);
  ExpectFrameSum(r[1], 0, 0, 36, {110}, 2);
  ExpectFrameSum(r[4], 0, 0, 12, {44, 55, 66}, 2);
  ExpectFrameSum(r[8], 1, 0, 24, {77, 88, 99}, 2);
  EXPECT_EQ(h.counters.rounds, 1u);
  EXPECT_EQ(p.Find(kKey)->round, 1u);
  // A resent frame of the finished round gets that frame's sum again, and only it.
  Request late = FramePush(1, 0, kRank1, 3, 1);
  p.Push(late);
  r = h.Take();
  ASSERT_EQ(r.size(), 1u);
  ExpectFrameSum(r[0], 1, 0, 12, {44, 55, 66}, 2);
  // A RESEND_SUM of it: every frame.
  p.Pull(Pull(1, 0));
  r = h.Take();
  ASSERT_EQ(r.size(), 4u);
  ExpectFrameSum(r[3], 1, 0, 36, {110}, 2);
}

TEST(RoundProtocolTest, AFrameOfACutThatDoesNotNestFailsTheKeyForEveryPusher) {
  Harness h(2);
  RoundProtocol p(h.Context(), false);
  Request a = FramePush(0, 0, kRank0, 3, 0);
  p.Push(a);
  Request other = FramePush(1, 0, kRank1, 4, 0);  // 16-byte frames where the round has 12
  p.Push(other);
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 3u);  // a's ack, then the refusal to both: the round can never be whole
  const std::string why =
      "worker 1 cuts round 0 of tensor 7 partition 3 in 16-byte frames, but the round is cut in "
      "12-byte frames (offset 0); cuts must nest";
  ExpectError(r[1], 0, 0, ErrorCode::kMismatch, why);
  ExpectError(r[2], 1, 0, ErrorCode::kMismatch, why);
  EXPECT_FALSE(p.Find(kKey)->failure.empty());
}

// The sums among `r`, in order.
std::vector<Reply> SumsOf(const std::vector<Reply>& r) {
  std::vector<Reply> sums;
  for (const Reply& x : r) {
    if (x.kind == Reply::Kind::kSum) sums.push_back(x);
  }
  return sums;
}

TEST(RoundProtocolTest, PiecesOfNestingCutsAreSplitOrGatheredIntoTheRoundsGrid) {
  Harness h(2);
  RoundProtocol p(h.Context(), false);
  // Round 0: rank 0's 12-byte frame comes first (the grid); rank 1's 24-byte pieces are
  // split into it (its second piece, 16 bytes, into grid frames 2 and 3).
  Request a0 = FramePush(0, 0, kRank0, 3, 0);
  p.Push(a0);
  Request b0 = FramePush(1, 0, kRank1, 6, 0);
  p.Push(b0);
  std::vector<Reply> r = h.Take();
  std::vector<Reply> sums = SumsOf(r);
  ASSERT_EQ(sums.size(), 2u);  // grid frame 0 is whole; frame 1 waits for rank 0
  ExpectFrameSum(sums[0], 0, 0, 0, {11, 22, 33}, 2);
  ExpectFrameSum(sums[1], 1, 0, 0, {11, 22, 33}, 2);
  for (size_t f = 1; f < 4; ++f) {
    Request a = FramePush(0, 0, kRank0, 3, f);
    p.Push(a);
  }
  Request b1 = FramePush(1, 0, kRank1, 6, 1);
  p.Push(b1);
  sums = SumsOf(h.Take());
  ASSERT_EQ(sums.size(), 6u);
  ExpectFrameSum(sums[0], 0, 0, 12, {44, 55, 66}, 2);
  ExpectFrameSum(sums[2], 0, 0, 24, {77, 88, 99}, 2);
  ExpectFrameSum(sums[5], 1, 0, 36, {110}, 2);
  EXPECT_EQ(p.Find(kKey)->round, 1u);
  // Round 1: rank 1's 24-byte piece comes first (the grid); rank 0's 12-byte frames are
  // gathered until each 24-byte grid frame is whole, then summed once.
  Request c0 = FramePush(1, 1, kRank1, 6, 0);
  p.Push(c0);
  Request c1 = FramePush(1, 1, kRank1, 6, 1);
  p.Push(c1);
  for (size_t f = 0; f < 4; ++f) {
    Request a = FramePush(0, 1, kRank0, 3, f);
    p.Push(a);
    if (f == 0) {
      Request again = FramePush(0, 1, kRank0, 3, 0);  // a resent piece: not gathered twice
      p.Push(again);
    }
  }
  sums = SumsOf(h.Take());
  ASSERT_EQ(sums.size(), 4u);  // two grid frames, to both pushers
  for (const Reply& s : {sums[0], sums[1]}) {
    EXPECT_EQ(FloatsOf(s.payload), (std::vector<float>{11, 22, 33, 44, 55, 66}));
    EXPECT_EQ(s.offset, 0u);
    EXPECT_EQ(s.sum.frame_bytes, 24u);
  }
  EXPECT_EQ(FloatsOf(sums[2].payload), (std::vector<float>{77, 88, 99, 110}));
  EXPECT_EQ(sums[2].offset, 24u);
  EXPECT_EQ(h.counters.frames_recut, 2u + 4u);  // rank 1's two pieces, rank 0's four
  EXPECT_EQ(h.counters.duplicates, 1u);
  EXPECT_EQ(p.Find(kKey)->round, 2u);
}

// Deterministic sums of frames have the bits of whole-key sums, whatever the arrival
// order of ranks and frames.
TEST(RoundProtocolTest, DeterministicFramesHaveTheBitsOfAWholeKeySum) {
  const std::vector<std::vector<float>> values = {
      {1e8f, 1.0f, 3.3f, -7.1f, 0.1f}, {1.0f, 1e8f, 1e-3f, 7.1f, 0.2f}, {-1e8f, -1e8f, 5.5f, 1e7f, 0.3f}};
  Harness whole(3);
  RoundProtocol w(whole.Context(), true);
  for (int rank : {2, 0, 1}) {
    Request push = Push(rank, 0, values[rank]);
    w.Push(push);
  }
  const std::vector<Reply> wr = whole.Take();
  const std::vector<float> expected = FloatsOf(wr.back().payload);
  for (const std::vector<int>& order : {std::vector<int>{0, 1, 2}, {2, 1, 0}, {1, 2, 0}}) {
    Harness h(3);
    RoundProtocol p(h.Context(), true);
    for (size_t f : {1u, 0u}) {  // frames of 2 floats: 2, 2, 1 (frame 2 last, below)
      for (int rank : order) {
        Request push = FramePush(rank, 0, values[rank], 2, f);
        p.Push(push);
      }
    }
    for (int rank : order) {
      Request push = FramePush(rank, 0, values[rank], 2, 2);
      p.Push(push);
    }
    std::vector<float> got(5);
    for (const Reply& r : h.Take()) {
      if (r.kind == Reply::Kind::kSum && r.identity == Identity(0)) {
        std::memcpy(got.data() + r.offset / 4, r.payload.data(), r.payload.size());
      }
    }
    EXPECT_EQ(0, std::memcmp(got.data(), expected.data(), 20)) << "order " << order[0] << order[1];
  }
}

TEST(RoundProtocolTest, FrameSumsThatComeLaterStreamToo) {
  Harness h(2);
  KeyProtocol* protocol = nullptr;
  h.UseDeferredSums(&protocol);
  RoundProtocol p(h.Context(), false);
  protocol = &p;
  for (size_t f = 0; f < 4; ++f) {
    Request push = FramePush(0, 0, kRank0, 3, f);
    p.Push(push);
  }
  Request first = FramePush(1, 0, kRank1, 3, 0);
  p.Push(first);
  EXPECT_EQ(p.sums_in_flight(), 1);
  h.WaitForSums(p);
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 7u);  // 5 acks, frame 0's sum to both
  ExpectFrameSum(r[5], 0, 0, 0, {11, 22, 33}, 2);
  for (size_t f = 1; f < 4; ++f) {
    Request push = FramePush(1, 0, kRank1, 3, f);
    p.Push(push);
  }
  h.WaitForSums(p);
  r = h.Take();
  ASSERT_EQ(r.size(), 9u);
  std::vector<float> got(10);
  for (const Reply& reply : r) {
    if (reply.kind == Reply::Kind::kSum && reply.identity == Identity(1)) {
      std::memcpy(got.data() + reply.offset / 4, reply.payload.data(), reply.payload.size());
    }
  }
  EXPECT_EQ(got, (std::vector<float>{0, 0, 0, 44, 55, 66, 77, 88, 99, 110}));
  EXPECT_EQ(h.counters.rounds, 1u);
  EXPECT_EQ(h.counters.device_sums, 4u);
}

// Backup workers (server/stragglers.h): b = 1 of 4 workers.
struct BackupHarness : Harness {
  BackupHarness() : Harness(4), stragglers(4, &counters) {}
  ProtocolContext Context() {
    ProtocolContext c = Harness::Context();
    c.backup_workers = 1;
    c.stragglers = &stragglers;
    return c;
  }
  Stragglers stragglers;
};

Request Averaged(int rank, uint32_t round, const std::vector<float>& values) {
  Request r = Push(rank, round, values);
  r.message.envelope.set_average(true);
  return r;
}

// Every sum reply of `r` from index `from` on: to `ranks` in order, round `round`,
// holding `sum` of `contributors` pushes and leaving out `left_out`.
void ExpectSums(const std::vector<Reply>& r, size_t from, const std::vector<int>& ranks,
                uint32_t round, const std::vector<float>& sum, uint32_t contributors,
                const std::vector<int>& left_out) {
  ASSERT_EQ(r.size(), from + ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    ExpectSum(r[from + i], ranks[i], round, round, sum, contributors);
    EXPECT_EQ(r[from + i].left_out, ProcessSetMask(left_out));
  }
}

// A round closes with the first three pushes; the fourth, late, is not added, is counted,
// and is answered at once with the closed round's sum. Meanwhile the next round waits for
// the late worker's push (the lag invariant), then closes without it again.
TEST(BackupWorkersTest, ARoundClosesWithoutTheLastWorkerWhoseLatePushGetsTheSum) {
  BackupHarness h;
  RoundProtocol p(h.Context(), false);
  for (int rank = 0; rank < 3; ++rank) {
    Request push = Averaged(rank, 0, {1.0f + rank, 10});
    p.Push(push);
  }
  std::vector<Reply> r = h.Take();
  ExpectAck(r[0], 0, 0);
  ExpectAck(r[1], 1, 0);
  ExpectAck(r[2], 2, 0);
  ExpectSums(r, 3, {0, 1, 2}, 0, {6, 30}, 3, {3});
  // Round 1 of the three fast workers: held while worker 3 has not pushed round 0.
  for (int rank = 0; rank < 3; ++rank) {
    Request push = Averaged(rank, 1, {2, 2});
    p.Push(push);
  }
  EXPECT_EQ(h.Take().size(), 3u) << "acks only: worker 3 is a round behind";
  Request late = Averaged(3, 0, {100, 100});
  p.Push(late);
  r = h.Take();
  ASSERT_GE(r.size(), 1u);
  ExpectSum(r[0], 3, 0, 0, {6, 30}, 3);  // round 0's sum, without its push
  EXPECT_EQ(r[0].left_out, ProcessSetMask({3}));
  ExpectSums(r, 1, {0, 1, 2}, 1, {6, 6}, 3, {3});  // round 1 closes now
  EXPECT_EQ(h.counters.late_pushes, 1u);
  EXPECT_EQ(h.stragglers.late_pushes(3), 1u);
  EXPECT_EQ(h.stragglers.streak(3), 1u);
  // Worker 3's push of round 1 is late too; then every worker pushes round 2 in time.
  Request late1 = Averaged(3, 1, {100, 100});
  p.Push(late1);
  r = h.Take();
  ASSERT_EQ(r.size(), 1u);
  ExpectSum(r[0], 3, 1, 1, {6, 6}, 3);
  for (int rank : {3, 0, 1}) {
    Request push = Averaged(rank, 2, {1, 1});
    p.Push(push);
  }
  r = h.Take();
  ExpectSums(r, 3, {3, 0, 1}, 2, {3, 3}, 3, {2});
  EXPECT_EQ(h.stragglers.streak(3), 0u) << "its push is in a sum again";
  EXPECT_EQ(h.counters.duplicates, 0u) << "late pushes are not duplicates";
}

// A late worker's push of a closed round is answerable whatever happened to the tensor
// since (the server lets it through a retirement by the others: their end of training).
TEST(BackupWorkersTest, APushOfAClosedRoundIsKnownAsSuch) {
  BackupHarness h;
  RoundProtocol p(h.Context(), false);
  for (int rank = 0; rank < 3; ++rank) {
    Request push = Averaged(rank, 0, {1});
    p.Push(push);
  }
  EXPECT_TRUE(p.ForClosedRound(Averaged(3, 0, {1})));
  EXPECT_FALSE(p.ForClosedRound(Averaged(0, 1, {1}))) << "round 1 is open";
  EXPECT_FALSE(p.ForClosedRound(Averaged(3, 2, {1}))) << "a round ahead";
}

// Elastic training: b is clamped to the epoch's live workers - 1 (here b = 3 of 4, then an
// epoch of 2 workers: a round closes with one push).
TEST(BackupWorkersTest, BackupWorkersAreClampedToTheEpochsWorkers) {
  BackupHarness h;
  ProtocolContext c = h.Context();
  c.backup_workers = 3;
  RoundProtocol p(c, false);
  h.num_workers = 2;
  h.joined.assign(2, false);
  p.Restart(KeyProtocol::RestartCause::kNewEpoch);
  Request push = Averaged(1, 0, {4});
  p.Push(push);
  ExpectSums(h.Take(), 1, {1}, 0, {4}, 1, {0});
}

// A push that comes while the closed round's sum is still on its way (a GPU's) is late
// inside the round: acknowledged, not added, and answered with the sum when it arrives.
TEST(BackupWorkersTest, APushLateForARoundWhoseSumIsOnItsWayGetsItWithTheOthers) {
  BackupHarness h;
  KeyProtocol* protocol = nullptr;
  h.UseDeferredSums(&protocol);
  RoundProtocol p(h.Context(), false);
  protocol = &p;
  for (int rank = 0; rank < 3; ++rank) {
    Request push = Averaged(rank, 0, {1, 2});
    p.Push(push);
  }
  EXPECT_EQ(h.Take().size(), 3u);
  Request late = Averaged(3, 0, {50, 50});
  p.Push(late);
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 1u);
  ExpectAck(r[0], 3, 0);
  h.WaitForSums(p);
  ExpectSums(h.Take(), 0, {0, 1, 2, 3}, 0, {3, 6}, 3, {3});
  EXPECT_EQ(h.counters.late_pushes, 1u);
}

// Sums (average off) wait for every worker, as do averaged integer pushes.
TEST(BackupWorkersTest, RoundsOtherThanAveragedFloatsWaitForEveryWorker) {
  BackupHarness h;
  RoundProtocol p(h.Context(), false);
  for (int rank = 0; rank < 3; ++rank) {
    Request push = Push(rank, 0, {1, 1});  // not averaged
    p.Push(push);
  }
  EXPECT_EQ(h.Take().size(), 3u) << "acks only";
  Request last = Push(3, 0, {1, 1});
  p.Push(last);
  ExpectSums(h.Take(), 1, {0, 1, 2, 3}, 0, {4, 4}, 4, {});
  EXPECT_EQ(h.counters.late_pushes, 0u);
}

// A worker that joined is not waited for and not left out: with 3 live workers and b = 1
// a round closes with two pushes.
TEST(BackupWorkersTest, JoinedWorkersCountNeitherAsLiveNorAsLeftOut) {
  BackupHarness h;
  RoundProtocol p(h.Context(), false);
  h.joined[0] = true;
  p.Join();
  for (int rank : {1, 2}) {
    Request push = Averaged(rank, 0, {1, 1});
    p.Push(push);
  }
  ExpectSums(h.Take(), 2, {1, 2}, 0, {2, 2}, 2, {3});
}

Request SitOut(int rank, uint32_t round) {
  Request r = DenseRequest(proto::PUSH, rank, round, {}, false, 0);
  r.message.envelope.set_sit_out(true);
  return r;
}

// A late worker catches up by sitting the next round out: its header-only push is
// acknowledged, the round closes with the others' pushes, and the sum reaches it too.
TEST(BackupWorkersTest, AWorkerThatSitsARoundOutGetsItsSumAndIsNotWaitedFor) {
  BackupHarness h;
  RoundProtocol p(h.Context(), false);
  for (int rank = 0; rank < 3; ++rank) {
    Request push = Averaged(rank, 0, {1, 1});
    p.Push(push);
  }
  h.Take();
  Request late = Averaged(3, 0, {9, 9});
  p.Push(late);
  ExpectSum(h.Take().at(0), 3, 0, 0, {3, 3}, 3);
  Request sit = SitOut(3, 1);
  p.Push(sit);
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 1u);
  ExpectAck(r[0], 3, 1);
  for (int rank = 0; rank < 3; ++rank) {
    Request push = Averaged(rank, 1, {2, 4});
    p.Push(push);
  }
  r = h.Take();
  ExpectSums(r, 3, {3, 0, 1, 2}, 1, {6, 12}, 3, {3});
  EXPECT_EQ(h.counters.sat_out, 1u);
  EXPECT_EQ(h.counters.late_pushes, 1u);
  EXPECT_EQ(h.stragglers.streak(3), 1u) << "sitting out is not a late push";
  // In step again: its push of round 2 is in the sum.
  for (int rank : {3, 0, 1}) {
    Request push = Averaged(rank, 2, {1, 1});
    p.Push(push);
  }
  ExpectSums(h.Take(), 3, {3, 0, 1}, 2, {3, 3}, 3, {2});
}

// A key's first round may be sat out (a new layout's keys): the first push defines the key.
TEST(BackupWorkersTest, TheFirstRoundOfAKeyMayBeSatOut) {
  BackupHarness h;
  RoundProtocol p(h.Context(), false);
  Request sit = SitOut(2, 0);
  p.Push(sit);
  Request pull = Pull(2, 0);  // its resend timer asks again: acknowledged again
  p.Pull(pull);
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 2u);
  ExpectAck(r[0], 2, 0);
  ExpectAck(r[1], 2, 0);
  for (int rank : {0, 1, 3}) {
    Request push = Averaged(rank, 0, {1, 2});
    p.Push(push);
  }
  ExpectSums(h.Take(), 3, {2, 0, 1, 3}, 0, {3, 6}, 3, {2});
}

// A round every worker sits out has nothing to average: the key fails, saying so, for every
// worker waiting (none hangs).
TEST(BackupWorkersTest, ARoundEveryWorkerSitsOutFailsSayingWhy) {
  BackupHarness h;
  RoundProtocol p(h.Context(), false);
  for (int rank = 0; rank < 4; ++rank) {
    Request push = Averaged(rank, 0, {1});
    p.Push(push);
  }
  h.Take();
  for (int rank = 0; rank < 4; ++rank) {
    Request sit = SitOut(rank, 1);
    p.Push(sit);
  }
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 8u);  // four acks, then an error to each
  for (int rank = 0; rank < 4; ++rank) {
    ExpectError(r[4 + rank], rank, 1, ErrorCode::kMismatch, "every worker sat it out");
  }
}

// Two workers sitting out with b = 1: the round closes once the two others pushed.
TEST(BackupWorkersTest, ARoundClosesOnceEveryWorkerNotSittingOutPushed) {
  BackupHarness h;
  RoundProtocol p(h.Context(), false);
  Request first = Averaged(0, 0, {1});
  for (int rank = 1; rank < 4; ++rank) {
    Request push = Averaged(rank, 0, {1});
    p.Push(push);
  }
  p.Push(first);  // late: the round closed with ranks 1..3
  h.Take();
  Request sit0 = SitOut(0, 1), sit1 = SitOut(1, 1);
  p.Push(sit0);
  p.Push(sit1);
  Request a = Averaged(2, 1, {5}), b = Averaged(3, 1, {7});
  p.Push(a);
  p.Push(b);
  ExpectSums(h.Take(), 4, {0, 1, 2, 3}, 1, {12}, 2, {0, 1});
}

// Sitting out a round that must hold every worker (a sum, not an average) fails the key
// with the reason, for every pusher; nobody hangs.
TEST(BackupWorkersTest, SittingOutARoundThatWaitsForEveryWorkerFailsItSayingWhy) {
  BackupHarness h;
  RoundProtocol p(h.Context(), false);
  for (int rank = 0; rank < 4; ++rank) {
    Request push = Push(rank, 0, {1});
    p.Push(push);
  }
  h.Take();
  Request sit = SitOut(3, 1);
  p.Push(sit);
  Request sum = Push(0, 1, {1});
  p.Push(sum);
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 3u);
  ExpectAck(r[0], 3, 1);  // before any push of the round, nobody knows yet
  ExpectError(r[1], 3, 1, ErrorCode::kMismatch, "a worker sat it out");
  ExpectError(r[2], 0, 1, ErrorCode::kMismatch, "a worker sat it out");
}

TEST(ParamStateTest, AsyncRoundsPerWorkerDedupeResends) {
  ParamState k;
  ASSERT_EQ(AsyncPush(k, 1, 0), PushVerdict::kAccumulate);
  EXPECT_EQ(k.next_round, std::vector<uint32_t>(3, 0));
  k.Record(1);
  EXPECT_EQ(AsyncPush(k, 1, 0), PushVerdict::kDuplicate) << "a resend of round 0";
  EXPECT_EQ(AsyncPush(k, 1, 2), PushVerdict::kAhead);
  // Workers go at their own pace: rank 0 is at round 0 while rank 1 runs ahead.
  for (uint32_t round = 1; round < 10; ++round) {
    ASSERT_EQ(AsyncPush(k, 1, round), PushVerdict::kAccumulate);
    k.Record(1);
    ASSERT_EQ(AsyncPush(k, 1, round), PushVerdict::kDuplicate);
    ASSERT_EQ(AsyncPush(k, 1, round - 1), PushVerdict::kDuplicate);
  }
  EXPECT_EQ(AsyncPush(k, 0, 0), PushVerdict::kAccumulate);
  EXPECT_EQ(AsyncPush(k, 0, 1), PushVerdict::kAhead);
  EXPECT_EQ(k.next_round, (std::vector<uint32_t>{0, 10, 0}));
  // The definition still binds every worker.
  EXPECT_EQ(AsyncPush(k, 2, 0, 4096 + 4), PushVerdict::kMismatch);
  k.failure = "broken";
  EXPECT_EQ(AsyncPush(k, 0, 0), PushVerdict::kFailed);
}

TEST(ParamProtocolTest, EveryPushIsAnsweredWithTheParametersAtOnce) {
  Harness h(2);
  ParamProtocol p(h.Context());
  Request init = Push(0, 0, {1, 2}, true);
  p.Push(init);
  Request other_init = Push(1, 0, {5, 5}, true);  // the key has its parameters already
  p.Push(other_init);
  Request delta = Push(0, 1, {0.5f, 0.25f}, true);
  const void* delta_frame = delta.message.payload.data();
  p.Push(delta);
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 3u) << "no PUSH_ACK in asynchronous training";
  ExpectSum(r[0], 0, 0, 0, {1, 2}, 1);
  ExpectSum(r[1], 1, 0, 0, {1, 2}, 1);
  ExpectSum(r[2], 0, 1, 1, {1.5f, 2.25f}, 1);
  EXPECT_EQ(FloatsOf(r[0].payload), (std::vector<float>{1, 2})) << "old parameters untouched";
  EXPECT_EQ(r[2].payload.data(), delta_frame) << "new = delta + old, in the delta's frame";
  EXPECT_EQ(h.counters.async_updates, 1u);
  EXPECT_EQ(h.counters.bytes_summed, 24u);

  Request resend = Push(0, 1, {0.5f, 0.25f}, true);
  p.Push(resend);
  Request ahead = Push(0, 3, {1, 1}, true);
  p.Push(ahead);
  p.Pull(Pull(1, 0));
  p.Pull(Pull(1, 4));
  r = h.Take();
  ASSERT_EQ(r.size(), 4u);
  ExpectSum(r[0], 0, 1, 1, {1.5f, 2.25f}, 1);
  ExpectError(r[1], 0, 3, ErrorCode::kBadMessage,
              "push of " + KeyName(kKey) + " for round 3 but worker 0's next round is 2");
  ExpectSum(r[2], 1, 0, 0, {1.5f, 2.25f}, 1);
  ExpectError(r[3], 1, 4, ErrorCode::kBadMessage,
              "worker 1 asked for the parameters of " + KeyName(kKey) +
                  " after round 4 but this server has no record of that push");
  EXPECT_EQ(h.counters.duplicates, 1u);
  EXPECT_EQ(h.counters.results_resent, 1u);
}

TEST(ParamProtocolTest, UpdatesThatComeLaterHoldTheKeysRequestsInOrder) {
  Harness h(2);
  KeyProtocol* protocol = nullptr;
  h.UseDeferredSums(&protocol);
  ParamProtocol p(h.Context());
  protocol = &p;
  Request init = Push(0, 0, {1, 2}, true);
  p.Push(init);
  Request delta = Push(0, 1, {10, 20}, true);
  p.Push(delta);
  Request init1 = Push(1, 0, {7, 7}, true);  // waits for the update
  p.Push(init1);
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 1u);
  ExpectSum(r[0], 0, 0, 0, {1, 2}, 1);
  EXPECT_EQ(p.sums_in_flight(), 1);
  h.WaitForSums(p);
  r = h.Take();
  ASSERT_EQ(r.size(), 2u);
  ExpectSum(r[0], 0, 1, 1, {11, 22}, 1);
  ExpectSum(r[1], 1, 0, 0, {11, 22}, 1);
  EXPECT_EQ(h.counters.device_sums, 1u);
}

TEST(ParamProtocolTest, AFailedSummationFailsEveryKey) {
  Harness h(1);
  ParamProtocol p(h.Context());
  Request init = Push(0, 0, {1}, true);
  p.Push(init);
  h.Take();
  p.FailAll("the GPU is gone");
  Request next = Push(0, 1, {1}, true);
  p.Push(next);
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 1u);
  ExpectError(r[0], 0, 1, ErrorCode::kMismatch, KeyName(kKey) + ": the GPU is gone");
}

// --- RowsProtocol -------------------------------------------------------------------

constexpr uint64_t kRowsKey = 9;

Request RowsPushOf(int rank, uint32_t round, const std::vector<int64_t>& ids,
                   const std::vector<float>& values, uint64_t total_rows = 100) {
  Request r;
  r.message = MakeMessage(proto::ROWS_PUSH, 100 + rank);
  proto::Envelope& e = r.message.envelope;
  e.set_request_id(RequestId(rank, round));
  e.set_key(kRowsKey);
  e.set_round(round);
  e.set_dtype(proto::FLOAT32);
  e.set_tensor_hash(kHash);
  e.mutable_rows()->set_num_rows(ids.size());
  e.mutable_rows()->set_row_elements(2);
  e.mutable_rows()->set_total_rows(total_rows);
  Buffer b = Buffer::Allocate(ids.size() * 8 + values.size() * 4);
  std::memcpy(b.bytes(), ids.data(), ids.size() * 8);
  std::memcpy(b.bytes() + ids.size() * 8, values.data(), values.size() * 4);
  e.set_length(b.size());
  r.message.payload = b;
  r.identity = Identity(rank);
  r.rank = rank;
  return r;
}

TEST(RowsProtocolTest, EachPusherGetsTheSumsOfExactlyTheRowsItListed) {
  Harness h(2);
  RowsProtocol p(h.Context(), /*async_training=*/false);
  Request a = RowsPushOf(0, 0, {5, 9}, {1, 2, 3, 4});
  Request b = RowsPushOf(1, 0, {9, 2}, {10, 20, 30, 40});
  p.Push(a);
  p.Push(b);
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 3u) << "the sums double as the completing push's acknowledgement";
  EXPECT_EQ(r[0].kind, Reply::Kind::kAck);
  EXPECT_EQ(r[0].identity, Identity(0));
  EXPECT_EQ(r[1].kind, Reply::Kind::kRowsSum);
  EXPECT_EQ(r[1].identity, Identity(0));
  EXPECT_EQ(FloatsOf(r[1].payload), (std::vector<float>{1, 2, 13, 24}));
  EXPECT_EQ(r[2].identity, Identity(1));
  EXPECT_EQ(FloatsOf(r[2].payload), (std::vector<float>{13, 24, 30, 40}));
  EXPECT_EQ(r[2].sum.contributors, 2u);
  Message m = ToMessage(r[2], 42);
  EXPECT_EQ(m.type(), proto::ROWS_RESULT);
  EXPECT_EQ(m.envelope.rows().num_rows(), 2u);
  EXPECT_EQ(m.envelope.rows().row_elements(), 2u);
  EXPECT_EQ(m.envelope.length(), 16u);
  EXPECT_EQ(h.counters.rows_pushes, 2u);
  EXPECT_EQ(h.counters.rows_summed, 4u);
  EXPECT_EQ(h.counters.rounds, 1u);
}

TEST(RowsProtocolTest, ARowOutsideTheTensorFailsTheKeyForEveryPusher) {
  Harness h(2);
  RowsProtocol p(h.Context(), false);
  Request a = RowsPushOf(0, 0, {1}, {1, 1});
  Request b = RowsPushOf(1, 0, {100}, {1, 1});
  p.Push(a);
  p.Push(b);
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[1].kind, Reply::Kind::kError);
  EXPECT_EQ(r[1].code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r[1].reason.find("row id 100 (position 0 of 1) is outside the tensor's rows 0..99"),
            std::string::npos)
      << r[1].reason;
  EXPECT_EQ(r[2].identity, Identity(0));
  EXPECT_EQ(r[2].code, ErrorCode::kMismatch);
}

TEST(RowsProtocolTest, AsynchronousTrainingRefusesRows) {
  Harness h(1);
  RowsProtocol p(h.Context(), /*async_training=*/true);
  Request a = RowsPushOf(0, 0, {1}, {1, 1});
  p.Push(a);
  std::vector<Reply> r = h.Take();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r[0].reason.find("but sparse rows need synchronous training (FERRY_ENABLE_ASYNC=0)"),
            std::string::npos);
  EXPECT_EQ(h.counters.rejected, 1u);
}

// --- ToMessage ----------------------------------------------------------------------

TEST(ToMessageTest, BuildsEveryKindOfReply) {
  PendingReply to{3, "w", 77};
  Message ack = ToMessage(AckReply(to, kKey), 5);
  EXPECT_EQ(ack.type(), proto::PUSH_ACK);
  EXPECT_EQ(ack.envelope.request_id(), 77u);
  EXPECT_EQ(ack.envelope.key(), kKey);
  EXPECT_EQ(ack.sender(), 5);
  EXPECT_TRUE(ack.payload.empty());
  Message err = ToMessage(ErrorReply(to, kKey, ErrorCode::kMismatch, "why"), 5);
  EXPECT_EQ(err.type(), proto::ERROR);
  EXPECT_EQ(err.envelope.error().code(), static_cast<int>(ErrorCode::kMismatch));
  EXPECT_EQ(err.envelope.error().reason(), "why");
  Reply sum;
  sum.kind = Reply::Kind::kSum;
  sum.request_id = 8;
  sum.key = kKey;
  sum.sum.round = 4;
  sum.sum.dtype = DataType::kFloat32;
  sum.sum.length = 8;
  sum.sum.tensor_hash = kHash;
  sum.sum.contributors = 2;
  sum.payload = Floats({1, 2});
  Message m = ToMessage(sum, 5);
  EXPECT_EQ(m.type(), proto::PUSH_RESULT);
  EXPECT_EQ(m.envelope.round(), 4u);
  EXPECT_EQ(m.envelope.length(), 8u);
  EXPECT_EQ(m.envelope.tensor_hash(), kHash);
  EXPECT_EQ(m.envelope.contributors(), 2u);
  EXPECT_EQ(m.payload.data(), sum.payload.data()) << "shared, not copied";
  EXPECT_FALSE(m.envelope.has_rows());
}

}  // namespace
}  // namespace ferry
