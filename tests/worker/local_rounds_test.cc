// LocalRounds (worker/local/local_rounds.h): the local root's book of rounds.

#include "worker/local/local_rounds.h"

#include <gtest/gtest.h>

#include "common/util/status.h"

namespace ferry {
namespace {

LocalRounds Book() {
  return LocalRounds(3, [](int lr) { return 100 + lr; });  // local rank lr has pid 100 + lr
}

TEST(LocalRoundsTest, TheKthCallOfEveryRankFormsRoundK) {
  LocalRounds rounds = Book();
  rounds.Submit("t", 1, LocalOp::kPushPull, DataType::kFloat32, 8, true, -1, 11);
  rounds.Submit("t", 1, LocalOp::kPushPull, DataType::kFloat32, 8, true, -1, 12);
  rounds.Submit("t", 0, LocalOp::kPushPull, DataType::kFloat32, 8, true, -1, 0);
  rounds.Submit("t", 2, LocalOp::kPushPull, DataType::kFloat32, 8, true, -1, 21);
  LocalRoundQueue& q = rounds.Of("t");
  ASSERT_EQ(q.q.size(), 2u);
  EXPECT_EQ(q.q[0].have, (std::vector<bool>{true, true, true}));
  EXPECT_EQ(q.q[0].seq, (std::vector<uint64_t>{0, 11, 21}));
  EXPECT_EQ(q.q[1].have, (std::vector<bool>{false, true, false}));
  EXPECT_EQ(q.q[1].seq[1], 12u);
  q.Pop();
  EXPECT_EQ(q.base, 1u);
  // Local rank 0's next call joins round 1, now at the front.
  rounds.Submit("t", 0, LocalOp::kPushPull, DataType::kFloat32, 8, true, -1, 0);
  EXPECT_EQ(q.q.front().have, (std::vector<bool>{true, true, false}));
  EXPECT_EQ(rounds.Find("other"), nullptr);
}

TEST(LocalRoundsTest, ACallThatDisagreesIsRefusedNamingBothCalls) {
  LocalRounds rounds = Book();
  rounds.Submit("w", 0, LocalOp::kPushPull, DataType::kFloat32, 8, false, -1, 0);
  try {
    rounds.Submit("w", 2, LocalOp::kBroadcast, DataType::kFloat32, 8, false, 1, 5);
    FAIL() << "no error";
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMismatch);
    EXPECT_EQ(std::string(e.what()),
              "local ranks disagree on round 0 of 'w': local rank 2 called BROADCAST (8 x "
              "float32, average 0, root 1) where another called PUSH_PULL (8 x float32, "
              "average 0, root -1)");
  }
  // The refused call took no place in the book.
  EXPECT_EQ(rounds.Of("w").next[2], 0u);
  EXPECT_FALSE(rounds.Of("w").q[0].have[2]);
}

TEST(LocalRoundsTest, DescribeSaysWhatTheRootsOperationWaitsFor) {
  LocalRounds rounds = Book();
  LocalRound& first =
      rounds.Submit("t", 0, LocalOp::kPushPull, DataType::kFloat32, 4, false, -1, 0);
  first.op_id = 1;
  rounds.Submit("t", 1, LocalOp::kPushPull, DataType::kFloat32, 4, false, -1, 3);
  LocalRound& second =
      rounds.Submit("t", 0, LocalOp::kPushPull, DataType::kFloat32, 4, false, -1, 0);
  second.op_id = 2;
  LocalRound& barrier =
      rounds.Submit("__b", 0, LocalOp::kBarrier, DataType::kFloat32, 0, false, -1, 0);
  barrier.op_id = 3;
  auto op = [](uint64_t id) { return [id](const LocalRound& r) { return r.op_id == id; }; };
  EXPECT_EQ(rounds.Describe(op(1), "__b"),
            "PUSH_PULL of 't': waiting for local rank(s) 2 (pid 102)");
  EXPECT_EQ(rounds.Describe(op(3), "__b"),
            "BARRIER of 'barrier': waiting for local rank(s) 1 (pid 101), 2 (pid 102)");
  rounds.Submit("t", 2, LocalOp::kPushPull, DataType::kFloat32, 4, false, -1, 7);
  rounds.Submit("t", 1, LocalOp::kPushPull, DataType::kFloat32, 4, false, -1, 4);
  rounds.Submit("t", 2, LocalOp::kPushPull, DataType::kFloat32, 4, false, -1, 8);
  EXPECT_EQ(rounds.Describe(op(2), "__b"),
            "PUSH_PULL of 't': queued behind an earlier operation of the same tensor");
  rounds.Of("t").q.front().started = true;
  EXPECT_EQ(rounds.Describe(op(1), "__b"),
            "PUSH_PULL of 't': waiting for the servers' sum (the machine's push_pull)");
  EXPECT_EQ(rounds.Describe(op(9), "__b"), "an operation that has just finished");
}

}  // namespace
}  // namespace ferry
