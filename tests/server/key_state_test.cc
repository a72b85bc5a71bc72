// Tests of a server key's round bookkeeping (server/key_state.h): how Classify sorts
// pushes, when Record completes a round, and what NextRound resets; the rank order of
// deterministic sums, and how keys spread over engine threads. (Async mode's keys:
// ParamState, tests/server/key_protocol_test.cc.)

#include "server/key_state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/transport/message.h"

namespace ferry {
namespace {

constexpr int kWorkers = 3;
constexpr uint64_t kLength = 4096;
constexpr uint64_t kHash = 0xfeedfacecafebeefull;

PushVerdict Push(KeyState& k, int rank, uint32_t round, uint64_t length = kLength,
                 DataType dtype = DataType::kFloat32, uint64_t hash = kHash) {
  return k.Classify(rank, round, length, dtype, hash, kWorkers);
}

PendingReply Reply(int rank) {
  PendingReply r;
  r.worker_id = 10 + rank;
  r.identity = "worker-" + std::to_string(rank);
  r.request_id = 100 + static_cast<uint64_t>(rank);
  return r;
}

TEST(KeyStateTest, FirstPushDefinesTheKey) {
  KeyState k;
  EXPECT_FALSE(k.defined);
  EXPECT_EQ(Push(k, 1, 0, 8192, DataType::kFloat16, 77), PushVerdict::kAccumulate);
  EXPECT_TRUE(k.defined);
  EXPECT_EQ(k.length, 8192u);
  EXPECT_EQ(k.dtype, DataType::kFloat16);
  EXPECT_EQ(k.tensor_hash, 77u);
  EXPECT_EQ(k.defined_by_rank, 1);
  EXPECT_EQ(k.pushed, std::vector<bool>(kWorkers, false));
  // Classify changes nothing else.
  EXPECT_EQ(k.round, 0u);
  EXPECT_TRUE(k.waiting.empty());
  EXPECT_TRUE(k.frames.empty()) << "the round's cut is fixed by its first Record";
  EXPECT_EQ(k.bytes_pushed, 0u);
  EXPECT_EQ(k.rounds_completed, 0u);
  // A second Classify of the same push does not redefine the key.
  EXPECT_EQ(Push(k, 2, 0, 8192, DataType::kFloat16, 77), PushVerdict::kAccumulate);
  EXPECT_EQ(k.defined_by_rank, 1);
}

TEST(KeyStateTest, CurrentRoundAccumulates) {
  KeyState k;
  for (int rank = 0; rank < kWorkers; ++rank) {
    SCOPED_TRACE(rank);
    EXPECT_EQ(Push(k, rank, 0), PushVerdict::kAccumulate);
  }
}

TEST(KeyStateTest, SameRankTwiceIsDuplicate) {
  KeyState k;
  ASSERT_EQ(Push(k, 0, 0), PushVerdict::kAccumulate);
  EXPECT_FALSE(k.Record(0, Reply(0), std::vector<bool>(kWorkers, false)));
  EXPECT_EQ(Push(k, 0, 0), PushVerdict::kDuplicate);
  // Other ranks still accumulate.
  EXPECT_EQ(Push(k, 1, 0), PushVerdict::kAccumulate);
}

TEST(KeyStateTest, PreviousRoundIsAnsweredOlderIsStaleFutureIsAhead) {
  KeyState k;
  ASSERT_EQ(Push(k, 0, 0), PushVerdict::kAccumulate);
  k.NextRound(kWorkers);
  k.NextRound(kWorkers);
  ASSERT_EQ(k.round, 2u);
  EXPECT_EQ(Push(k, 0, 0), PushVerdict::kStale);
  EXPECT_EQ(Push(k, 1, 1), PushVerdict::kPrevious);
  EXPECT_EQ(Push(k, 2, 2), PushVerdict::kAccumulate);
  EXPECT_EQ(Push(k, 2, 3), PushVerdict::kAhead);
  EXPECT_EQ(Push(k, 0, 1000), PushVerdict::kAhead);
  EXPECT_EQ(Push(k, 0, 0xffffffffu), PushVerdict::kAhead);
}

TEST(KeyStateTest, FirstPushOfAFutureRoundIsAhead) {
  KeyState k;
  EXPECT_EQ(Push(k, 0, 1), PushVerdict::kAhead);
  // The key is defined all the same.
  EXPECT_TRUE(k.defined);
  EXPECT_EQ(k.defined_by_rank, 0);
}

TEST(KeyStateTest, DifferentDefinitionIsMismatch) {
  KeyState k;
  ASSERT_EQ(Push(k, 0, 0), PushVerdict::kAccumulate);
  EXPECT_EQ(Push(k, 1, 0, kLength + 4), PushVerdict::kMismatch);
  EXPECT_EQ(Push(k, 1, 0, kLength / 2), PushVerdict::kMismatch);
  EXPECT_EQ(Push(k, 1, 0, kLength, DataType::kInt32), PushVerdict::kMismatch);
  EXPECT_EQ(Push(k, 1, 0, kLength, DataType::kFloat32, kHash + 1), PushVerdict::kMismatch);
  // Also for a push that would otherwise be a duplicate or ahead.
  EXPECT_EQ(Push(k, 0, 0, kLength * 2), PushVerdict::kMismatch);
  EXPECT_EQ(Push(k, 1, 5, kLength, DataType::kFloat64), PushVerdict::kMismatch);
  // The definition stays the first push's.
  EXPECT_EQ(k.length, kLength);
  EXPECT_EQ(k.dtype, DataType::kFloat32);
  EXPECT_EQ(k.tensor_hash, kHash);
  EXPECT_EQ(Push(k, 1, 0), PushVerdict::kAccumulate);
}

TEST(KeyStateTest, FailedKeyRefusesEverything) {
  KeyState k;
  ASSERT_EQ(Push(k, 0, 0), PushVerdict::kAccumulate);
  k.failure = "workers disagree on tensor 0 partition 0";
  EXPECT_EQ(Push(k, 1, 0), PushVerdict::kFailed);
  EXPECT_EQ(Push(k, 0, 0), PushVerdict::kFailed);
  EXPECT_EQ(Push(k, 1, 7), PushVerdict::kFailed);
  EXPECT_EQ(Push(k, 1, 0, 1), PushVerdict::kFailed);

  // Even before any definition.
  KeyState fresh;
  fresh.failure = "x";
  EXPECT_EQ(Push(fresh, 0, 0), PushVerdict::kFailed);
  EXPECT_FALSE(fresh.defined);
}

TEST(KeyStateTest, RecordCompletesWhenAllWorkersPushed) {
  KeyState k;
  const int order[kWorkers] = {2, 0, 1};
  for (int i = 0; i < kWorkers; ++i) {
    int rank = order[i];
    SCOPED_TRACE(rank);
    ASSERT_EQ(Push(k, rank, 0), PushVerdict::kAccumulate);
    bool complete = k.Record(rank, Reply(rank), std::vector<bool>(kWorkers, false));
    EXPECT_EQ(complete, i == kWorkers - 1);
    EXPECT_TRUE(k.pushed[rank]);
    EXPECT_EQ(k.waiting.size(), static_cast<size_t>(i + 1));
    EXPECT_EQ(k.bytes_pushed, kLength * (i + 1));
  }
  // The pushers wait in arrival order.
  ASSERT_EQ(k.waiting.size(), 3u);
  EXPECT_EQ(k.waiting[0].identity, "worker-2");
  EXPECT_EQ(k.waiting[0].worker_id, 12);
  EXPECT_EQ(k.waiting[0].request_id, 102u);
  EXPECT_EQ(k.waiting[1].identity, "worker-0");
  EXPECT_EQ(k.waiting[2].identity, "worker-1");
  EXPECT_EQ(k.pushed, std::vector<bool>(kWorkers, true));
}

TEST(KeyStateTest, SingleWorkerCompletesAtOnce) {
  KeyState k;
  ASSERT_EQ(k.Classify(0, 0, kLength, DataType::kFloat32, kHash, 1), PushVerdict::kAccumulate);
  EXPECT_TRUE(k.Record(0, Reply(0), std::vector<bool>(1, false)));
}

TEST(KeyStateTest, NextRoundResets) {
  KeyState k;
  for (int rank = 0; rank < kWorkers; ++rank) {
    ASSERT_EQ(Push(k, rank, 0), PushVerdict::kAccumulate);
    k.Record(rank, Reply(rank), std::vector<bool>(kWorkers, false));
  }
  k.frames[0].sum = Buffer::Allocate(kLength);
  k.NextRound(kWorkers);
  EXPECT_EQ(k.round, 1u);
  EXPECT_EQ(k.rounds_completed, 1u);
  EXPECT_TRUE(k.waiting.empty());
  EXPECT_EQ(k.pushed, std::vector<bool>(kWorkers, false));
  EXPECT_TRUE(k.frames.empty());
  // The definition and the byte count survive.
  EXPECT_TRUE(k.defined);
  EXPECT_EQ(k.length, kLength);
  EXPECT_EQ(k.bytes_pushed, kLength * kWorkers);

  // Round 1 now accumulates; a resend of round 0 is answered from last_sum.
  EXPECT_EQ(Push(k, 0, 1), PushVerdict::kAccumulate);
  EXPECT_EQ(Push(k, 0, 0), PushVerdict::kPrevious);
  EXPECT_EQ(Push(k, 0, 2), PushVerdict::kAhead);
}

TEST(KeyStateTest, ManyRounds) {
  KeyState k;
  for (uint32_t round = 0; round < 50; ++round) {
    for (int i = 0; i < kWorkers; ++i) {
      int rank = static_cast<int>((round + static_cast<uint32_t>(i)) % kWorkers);
      ASSERT_EQ(Push(k, rank, round), PushVerdict::kAccumulate);
      // A resend of the push just recorded, and an early push of the next round.
      bool complete = k.Record(rank, Reply(rank), std::vector<bool>(kWorkers, false));
      ASSERT_EQ(Push(k, rank, round), PushVerdict::kDuplicate);
      ASSERT_EQ(Push(k, rank, round + 1), PushVerdict::kAhead);
      ASSERT_EQ(complete, i == kWorkers - 1);
    }
    k.NextRound(kWorkers);
  }
  EXPECT_EQ(k.round, 50u);
  EXPECT_EQ(k.rounds_completed, 50u);
  EXPECT_EQ(k.bytes_pushed, 50 * kWorkers * kLength);
}

TEST(KeyStateTest, CompletedRoundSumIsKeptForResendsUntilTheNextCompletes) {
  KeyState k;
  for (int rank = 0; rank < kWorkers; ++rank) {
    ASSERT_EQ(Push(k, rank, 0), PushVerdict::kAccumulate);
    k.Record(rank, Reply(rank), std::vector<bool>(kWorkers, false));
  }
  Buffer round0 = Buffer::Allocate(kLength);
  k.frames[0].sum = round0;
  EXPECT_FALSE(k.has_last);
  k.NextRound(kWorkers);
  ASSERT_TRUE(k.has_last);
  EXPECT_EQ(k.last_sums[0].data(), round0.data()) << "the sent buffer is kept, not copied";
  EXPECT_EQ(k.last_contributors, static_cast<uint32_t>(kWorkers));
  EXPECT_TRUE(k.frames.empty());
  // A RESEND_SUM for round 0 is answered from last_sum; for round 1 before pushing: stale.
  EXPECT_EQ(k.ClassifyPull(2, 0), PushVerdict::kPrevious);
  EXPECT_EQ(k.ClassifyPull(2, 1), PushVerdict::kStale);
  ASSERT_EQ(Push(k, 2, 1), PushVerdict::kAccumulate);
  k.Record(2, Reply(2), std::vector<bool>(kWorkers, false));
  EXPECT_EQ(k.ClassifyPull(2, 1), PushVerdict::kDuplicate) << "pushed, round still open";
  EXPECT_EQ(k.ClassifyPull(2, 2), PushVerdict::kAhead);
  // Round 1 completes: round 0 is gone for good.
  Buffer round1 = Buffer::Allocate(kLength);
  k.frames[0].sum = round1;
  k.NextRound(kWorkers);
  EXPECT_EQ(k.last_sums[0].data(), round1.data());
  EXPECT_EQ(k.last_contributors, 1u);
  EXPECT_EQ(Push(k, 0, 0), PushVerdict::kStale);
  EXPECT_EQ(k.ClassifyPull(0, 0), PushVerdict::kStale);
  // Restart (every worker joined) forgets everything resendable.
  k.Restart(kWorkers);
  EXPECT_EQ(k.round, 0u);
  EXPECT_FALSE(k.has_last);
  EXPECT_TRUE(k.last_sums.empty());
  EXPECT_EQ(Push(k, 0, 0), PushVerdict::kAccumulate);
}

TEST(KeyStateTest, FailedKeyRefusesPulls) {
  KeyState k;
  ASSERT_EQ(Push(k, 0, 0), PushVerdict::kAccumulate);
  k.failure = "broken";
  EXPECT_EQ(k.ClassifyPull(0, 0), PushVerdict::kFailed);
  KeyState undefined;
  EXPECT_EQ(undefined.ClassifyPull(0, 0), PushVerdict::kStale);
}

TEST(KeyStateTest, JoinedWorkersAreNotWaitedFor) {
  KeyState k;
  ASSERT_EQ(k.Classify(0, 0, 16, DataType::kFloat32, 7, 3), PushVerdict::kAccumulate);
  std::vector<bool> joined = {false, false, true};  // worker 2 has no more pushes
  EXPECT_FALSE(k.Record(0, Reply(0), joined));
  ASSERT_EQ(k.Classify(1, 0, 16, DataType::kFloat32, 7, 3), PushVerdict::kAccumulate);
  EXPECT_TRUE(k.Record(1, Reply(1), joined));
  EXPECT_EQ(k.waiting.size(), 2u);  // the sum holds two contributions
  KeyState empty;
  EXPECT_FALSE(empty.Complete({true, true, true})) << "nothing to answer";
}

// --- Deterministic mode: sums in rank order -------------------------------------

Buffer Floats(const std::vector<float>& v) {
  Buffer b = Buffer::Allocate(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<float> FloatsOf(const Buffer& b) {
  std::vector<float> v(b.size() / sizeof(float));
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

void AddFloats(Buffer& sum, const Buffer& push) {
  SumInto(sum.data(), push.data(), sum.size() / sizeof(float), DataType::kFloat32);
}

// Pushes of `values[rank]` arriving in `order`, as the server takes them (Classify,
// hold, Record, SumInRankOrder); returns the completed sum. Checks that the sum never
// holds a rank above a missing one.
std::vector<float> SumArriving(const std::vector<std::vector<float>>& values,
                               const std::vector<int>& order, const std::vector<bool>& joined) {
  const int workers = static_cast<int>(values.size());
  const uint64_t length = values[0].size() * sizeof(float);
  KeyState k;
  bool complete = false;
  for (int rank : order) {
    EXPECT_EQ(k.Classify(rank, 0, length, DataType::kFloat32, kHash, workers),
              PushVerdict::kAccumulate);
    complete = k.Record(rank, Reply(rank), joined);
    k.frames[0].held[rank] = Floats(values[rank]);
    k.SumInRankOrder(joined, AddFloats);
    for (int r = 0; r < k.frames[0].next_rank; ++r) {
      EXPECT_TRUE(k.pushed[r] || joined[r]) << "rank " << r << " summed before it pushed";
    }
    for (int r = k.frames[0].next_rank; r < workers; ++r) {
      EXPECT_EQ(k.frames[0].held[r].empty(), !k.pushed[r] || length == 0) << "rank " << r << " held";
    }
  }
  EXPECT_TRUE(complete);
  EXPECT_EQ(k.frames[0].next_rank, workers);
  return FloatsOf(k.frames[0].sum);
}

TEST(KeyStateTest, RankOrderSumIsTheSameBitsForEveryArrivalOrder) {
  // Float addition is not associative: (1e8 + 1) - 1e8 = 0 but (1e8 - 1e8) + 1 = 1.
  const std::vector<std::vector<float>> values = {
      {1e8f, 1.0f, -1e8f, 3.0f},  // rank 0
      {1.0f, -1e8f, 1e8f, 1e8f},  // rank 1
      {-1e8f, 1e8f, 1.0f, -1e8f}  // rank 2
  };
  std::vector<float> rank_order(4);
  for (size_t i = 0; i < 4; ++i) rank_order[i] = (values[0][i] + values[1][i]) + values[2][i];
  std::vector<int> order = {0, 1, 2};
  std::vector<std::vector<float>> arrival_sums;
  do {
    SCOPED_TRACE(::testing::Message() << "arrival " << order[0] << order[1] << order[2]);
    std::vector<float> sum = SumArriving(values, order, {false, false, false});
    EXPECT_EQ(std::memcmp(sum.data(), rank_order.data(), 16), 0)
        << sum[0] << " " << sum[1] << " " << sum[2] << " " << sum[3];
    // What summing in arrival order would give, to show the values need the order.
    std::vector<float> arrival(4);
    for (size_t i = 0; i < 4; ++i) {
      arrival[i] = (values[order[0]][i] + values[order[1]][i]) + values[order[2]][i];
    }
    arrival_sums.push_back(arrival);
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(rank_order, (std::vector<float>{0.0f, 0.0f, 1.0f, 0.0f}));
  std::sort(arrival_sums.begin(), arrival_sums.end());
  arrival_sums.erase(std::unique(arrival_sums.begin(), arrival_sums.end()), arrival_sums.end());
  EXPECT_GT(arrival_sums.size(), 1u) << "arrival order would change the sum";
}

TEST(KeyStateTest, RankOrderAdoptsTheLowestRankAndHoldsHigherOnes) {
  KeyState k;
  const std::vector<bool> none(kWorkers, false);
  ASSERT_EQ(Push(k, 2, 0, 4), PushVerdict::kAccumulate);
  Buffer two = Floats({2.0f});
  k.Record(2, Reply(2), none);
  k.frames[0].held[2] = two;
  k.SumInRankOrder(none, AddFloats);
  EXPECT_EQ(k.frames[0].next_rank, 0) << "rank 0 has not pushed: nothing is summed";
  EXPECT_TRUE(k.frames[0].sum.empty());
  ASSERT_EQ(Push(k, 0, 0, 4), PushVerdict::kAccumulate);
  Buffer zero = Floats({0.5f});
  k.Record(0, Reply(0), none);
  k.frames[0].held[0] = zero;
  k.SumInRankOrder(none, AddFloats);
  EXPECT_EQ(k.frames[0].next_rank, 1);
  EXPECT_EQ(k.frames[0].sum.data(), zero.data()) << "rank 0's frame adopted, not copied";
  EXPECT_FALSE(k.frames[0].held[2].empty()) << "rank 2 waits for rank 1";
  ASSERT_EQ(Push(k, 1, 0, 4), PushVerdict::kAccumulate);
  EXPECT_TRUE(k.Record(1, Reply(1), none));
  k.frames[0].held[1] = Floats({0.25f});
  k.SumInRankOrder(none, AddFloats);
  EXPECT_EQ(k.frames[0].next_rank, kWorkers);
  EXPECT_EQ(FloatsOf(k.frames[0].sum), std::vector<float>{2.75f});
  // The next round starts from rank 0 with nothing held.
  k.NextRound(kWorkers);
  EXPECT_TRUE(k.frames.empty()) << "the next round starts with nothing held";
}

TEST(KeyStateTest, RankOrderSkipsJoinedRanks) {
  // Rank 1 joined: rank 2's push goes once rank 0 pushed, and also when rank 1 joins
  // only after rank 2 pushed.
  const std::vector<std::vector<float>> values = {{1e8f}, {0.0f}, {1.0f}};
  std::vector<float> sum = SumArriving(values, {2, 0}, {false, true, false});
  EXPECT_EQ(sum, std::vector<float>{1e8f + 1.0f});

  KeyState k;
  std::vector<bool> joined(kWorkers, false);
  for (int rank : {2, 0}) {
    ASSERT_EQ(Push(k, rank, 0, 4), PushVerdict::kAccumulate);
    EXPECT_FALSE(k.Record(rank, Reply(rank), joined));
    k.frames[0].held[rank] = Floats(values[rank]);
    k.SumInRankOrder(joined, AddFloats);
  }
  EXPECT_EQ(k.frames[0].next_rank, 1);
  joined[1] = true;  // what Server::HandleJoin does: drain, then complete
  k.SumInRankOrder(joined, AddFloats);
  EXPECT_EQ(k.frames[0].next_rank, kWorkers);
  EXPECT_TRUE(k.Complete(joined));
  EXPECT_EQ(FloatsOf(k.frames[0].sum), std::vector<float>{1e8f + 1.0f});
}

// --- Engine threads: keys spread evenly -------------------------------------------

// Keys of a model: tensor t has partitions(t) partitions; key = (t << 32) | partition.
std::vector<uint64_t> ModelKeys(int tensors, int (*partitions)(int)) {
  std::vector<uint64_t> keys;
  for (int t = 0; t < tensors; ++t) {
    for (int p = 0; p < partitions(t); ++p) keys.push_back(MakeKey(t, p));
  }
  return keys;
}

int OnePartition(int) { return 1; }
// ResNet-50 at 4 MiB partitions: 161 one-partition tensors, a few large ones.
int ResNetLike(int t) { return t % 20 == 19 ? 2 + t % 3 : 1; }
// VGG-16-like: a few huge tensors of many partitions.
int FewHuge(int t) { return t < 3 ? 100 + 17 * t : 1; }

// The most and least keys any engine gets, relative to an even share.
std::pair<double, double> Spread(const std::vector<uint64_t>& keys, int engines,
                                 int (*engine_of)(uint64_t, int)) {
  std::vector<int> count(engines, 0);
  for (uint64_t k : keys) count[engine_of(k, engines)]++;
  const double share = static_cast<double>(keys.size()) / engines;
  return {*std::max_element(count.begin(), count.end()) / share,
          *std::min_element(count.begin(), count.end()) / share};
}

int IdentityHash(uint64_t key, int engines) {  // what std::hash<uint64_t> % engines did
  return static_cast<int>(std::hash<uint64_t>()(key) % static_cast<uint64_t>(engines));
}

TEST(KeyStateTest, CutsThatNestAreAcceptedAndOthersAreBadFrames) {
  // CutsNest: the larger a multiple of the smaller, or one the whole key.
  EXPECT_TRUE(CutsNest(1024, 4096, kLength));
  EXPECT_TRUE(CutsNest(4096, 1024, kLength));
  EXPECT_TRUE(CutsNest(1536, kLength, kLength));  // one is the whole key
  EXPECT_FALSE(CutsNest(1536, 1024, kLength));
  EXPECT_FALSE(CutsNest(0, 1024, kLength));
  KeyState k;
  // Rank 0's 2048-byte frame fixes the grid; rank 1's 1024-byte pieces and rank 2's whole
  // key are accepted; a 1536-byte cut is not.
  const FrameRef grid{2048, 2048, 2048};
  ASSERT_EQ(k.Classify(0, 0, grid, kLength, DataType::kFloat32, kHash, kWorkers),
            PushVerdict::kAccumulate);
  k.Record(0, Reply(0), grid);
  EXPECT_EQ(k.frames.size(), 2u);
  const FrameRef fine{3072, 1024, 1024}, whole{0, kLength, kLength}, odd{1536, 1536, 1536};
  EXPECT_EQ(k.Classify(1, 0, fine, kLength, DataType::kFloat32, kHash, kWorkers),
            PushVerdict::kAccumulate);
  EXPECT_TRUE(k.Recut(fine));
  EXPECT_EQ(k.Classify(2, 0, whole, kLength, DataType::kFloat32, kHash, kWorkers),
            PushVerdict::kAccumulate);
  EXPECT_EQ(k.Classify(1, 0, odd, kLength, DataType::kFloat32, kHash, kWorkers),
            PushVerdict::kBadFrame);
  // A piece gathered already, or one of a grid frame recorded, is a duplicate.
  k.staged[{1, 1}].pieces.push_back(3072);
  EXPECT_EQ(k.Classify(1, 0, fine, kLength, DataType::kFloat32, kHash, kWorkers),
            PushVerdict::kDuplicate);
  EXPECT_EQ(k.Classify(0, 0, FrameRef{2048, 1024, 1024}, kLength, DataType::kFloat32, kHash,
                       kWorkers),
            PushVerdict::kDuplicate);
  // Rounds that may close early (backup workers) take one cut only.
  k.backup.eligible = true;
  EXPECT_EQ(k.Classify(2, 0, whole, kLength, DataType::kFloat32, kHash, kWorkers),
            PushVerdict::kBadFrame);
  // The next round forgets what was gathered.
  k.backup.eligible = false;
  k.NextRound(kWorkers);
  EXPECT_TRUE(k.staged.empty());
}

TEST(KeyStateTest, KeysSpreadEvenlyOverEngines) {
  struct Model {
    const char* name;
    int tensors;
    int (*partitions)(int);
  };
  for (const Model& m : {Model{"single", 169, OnePartition}, Model{"resnet", 161, ResNetLike},
                         Model{"vgg", 32, FewHuge}, Model{"bert", 400, OnePartition}}) {
    std::vector<uint64_t> keys = ModelKeys(m.tensors, m.partitions);
    for (int engines : {2, 3, 4, 8}) {
      SCOPED_TRACE(::testing::Message() << m.name << " (" << keys.size() << " keys) on "
                                        << engines << " engines");
      auto [most, least] = Spread(keys, engines, EngineForKey);
      // Random placement of n keys in e bins has a standard deviation of
      // sqrt(n/e) keys per bin; these bounds leave 3 of them at 160 keys on 8 engines.
      EXPECT_LT(most, 1.45);
      EXPECT_GT(least, 0.55);
      auto [old_most, old_least] = Spread(keys, engines, IdentityHash);
      (void)old_most;
      // With a power-of-two number of engines (the default is 4) the identity put
      // every first partition on engine 0 (2^32 is 1 modulo 3, so 3 engines were fine).
      if (m.partitions == OnePartition && (engines & (engines - 1)) == 0) {
        EXPECT_EQ(old_least, 0.0) << "the identity hash left engines idle";
      }
    }
  }
  // Every engine index is in range, for any key.
  for (uint64_t key : {uint64_t{0}, ~uint64_t{0}, uint64_t{1} << 63, MakeKey(0xffffffffu, 7)}) {
    for (int engines : {1, 2, 7, 256}) {
      int e = EngineForKey(key, engines);
      EXPECT_GE(e, 0);
      EXPECT_LT(e, engines);
    }
  }
}

// Sums that arrive later (GPU, server/summation.h): between completion and the sum the
// key is `summing`; the server sets the flag, KeyState keeps the round as it is.
TEST(KeyStateTest, SummingRoundTakesResendsAsDuplicatesAndDoesNotCompleteAgain) {
  KeyState k;
  const std::vector<bool> none(kWorkers, false);
  bool complete = false;
  for (int rank = 0; rank < kWorkers; ++rank) {
    ASSERT_EQ(Push(k, rank, 0), PushVerdict::kAccumulate);
    complete = k.Record(rank, Reply(rank), none);
  }
  ASSERT_TRUE(complete);
  k.frames[0].summing = true;  // Finish returned false: the sum is on its way
  EXPECT_FALSE(k.Complete(none)) << "a JOIN meanwhile must not finish the round twice";
  EXPECT_FALSE(k.Complete({true, true, true}));
  for (int rank = 0; rank < kWorkers; ++rank) {
    EXPECT_EQ(Push(k, rank, 0), PushVerdict::kDuplicate) << "a resend: acknowledged again";
    EXPECT_EQ(k.ClassifyPull(rank, 0), PushVerdict::kDuplicate) << "a PULL: acknowledged again";
  }
  EXPECT_EQ(Push(k, 0, 1), PushVerdict::kAhead) << "nobody has the sum of round 0 yet";
  // The sum arrives: the round moves on as on the CPU.
  k.frames[0].summing = false;
  k.frames[0].sum = Floats({1.0f});
  k.NextRound(kWorkers);
  EXPECT_EQ(k.round, 1u);
  EXPECT_EQ(Push(k, 0, 0), PushVerdict::kPrevious);
  EXPECT_EQ(Push(k, 0, 1), PushVerdict::kAccumulate);
}

TEST(KeyStateTest, RestartStartsANewGeneration) {
  KeyState k;
  ASSERT_EQ(Push(k, 0, 0), PushVerdict::kAccumulate);
  k.Record(0, Reply(0), std::vector<bool>(kWorkers, false));
  const uint64_t before = k.generation;
  k.frames[0].summing = true;
  k.Restart(kWorkers);
  EXPECT_TRUE(k.frames.empty());
  EXPECT_NE(k.generation, before) << "a sum finished before the restart must be recognised";
}

TEST(KeyStateTest, TakeInRankOrderHandsOverPushesInRankOrder) {
  // The GPU path takes each push in rank order (to Add it on the device) instead of
  // summing into `sum`; `sum` stays untouched.
  KeyState k;
  const std::vector<bool> joined = {false, true, false};  // rank 1 joined
  std::vector<float> taken;
  auto take = [&taken](Buffer push) { taken.push_back(FloatsOf(push)[0]); };
  ASSERT_EQ(Push(k, 2, 0, 4), PushVerdict::kAccumulate);
  k.Record(2, Reply(2), joined);
  k.frames[0].held[2] = Floats({2.0f});
  k.TakeInRankOrder(joined, take);
  EXPECT_TRUE(taken.empty()) << "rank 2 waits for rank 0";
  ASSERT_EQ(Push(k, 0, 0, 4), PushVerdict::kAccumulate);
  EXPECT_TRUE(k.Record(0, Reply(0), joined));
  k.frames[0].held[0] = Floats({0.5f});
  k.TakeInRankOrder(joined, take);
  EXPECT_EQ(taken, (std::vector<float>{0.5f, 2.0f})) << "rank 0, then (1 joined) rank 2";
  EXPECT_EQ(k.frames[0].next_rank, kWorkers);
  EXPECT_TRUE(k.frames[0].sum.empty());
  EXPECT_TRUE(k.frames[0].held[0].empty() && k.frames[0].held[2].empty()) << "handed over, not kept";
}

}  // namespace
}  // namespace ferry
