// Tests of a server key's round bookkeeping (server/key_state.h): how Classify sorts
// pushes, when Record completes a round, and what NextRound resets.

#include "server/key_state.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

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
  EXPECT_TRUE(k.sum.empty());
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
  k.sum = Buffer::Allocate(kLength);
  k.NextRound(kWorkers);
  EXPECT_EQ(k.round, 1u);
  EXPECT_EQ(k.rounds_completed, 1u);
  EXPECT_TRUE(k.waiting.empty());
  EXPECT_EQ(k.pushed, std::vector<bool>(kWorkers, false));
  EXPECT_TRUE(k.sum.empty());
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
  k.sum = round0;
  EXPECT_FALSE(k.has_last);
  k.NextRound(kWorkers);
  ASSERT_TRUE(k.has_last);
  EXPECT_EQ(k.last_sum.data(), round0.data()) << "the sent buffer is kept, not copied";
  EXPECT_EQ(k.last_contributors, static_cast<uint32_t>(kWorkers));
  EXPECT_TRUE(k.sum.empty());
  // A PULL for round 0 is answered from last_sum; for round 1 before pushing: stale.
  EXPECT_EQ(k.ClassifyPull(2, 0), PushVerdict::kPrevious);
  EXPECT_EQ(k.ClassifyPull(2, 1), PushVerdict::kStale);
  ASSERT_EQ(Push(k, 2, 1), PushVerdict::kAccumulate);
  k.Record(2, Reply(2), std::vector<bool>(kWorkers, false));
  EXPECT_EQ(k.ClassifyPull(2, 1), PushVerdict::kDuplicate) << "pushed, round still open";
  EXPECT_EQ(k.ClassifyPull(2, 2), PushVerdict::kAhead);
  // Round 1 completes: round 0 is gone for good.
  Buffer round1 = Buffer::Allocate(kLength);
  k.sum = round1;
  k.NextRound(kWorkers);
  EXPECT_EQ(k.last_sum.data(), round1.data());
  EXPECT_EQ(k.last_contributors, 1u);
  EXPECT_EQ(Push(k, 0, 0), PushVerdict::kStale);
  EXPECT_EQ(k.ClassifyPull(0, 0), PushVerdict::kStale);
  // Restart (every worker joined) forgets everything resendable.
  k.Restart(kWorkers);
  EXPECT_EQ(k.round, 0u);
  EXPECT_FALSE(k.has_last);
  EXPECT_TRUE(k.last_sum.empty());
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

}  // namespace
}  // namespace ferry
