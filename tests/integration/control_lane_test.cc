// The control lane (common/transport/van.h, "Lanes"): acknowledgements never wait behind
// tensor bytes. A whole job in this process (tests/support/in_process_cluster.h).
//
// Each worker stops reading its data connections, pushes a 64 MiB tensor A, and waits for
// every partition of A to be acknowledged: the acks come on the control connections while
// A's sums, which the server sent as its rounds completed, wait unread on the data
// connections. After a barrier (so both workers' pushes of A are in, and the server has
// handed every sum of A to its transport), a 4 KiB tensor B is pushed: its ack arrives
// although 64 MiB of sums queued ahead of it on the data connections are still unread.
// Then the reads resume, and both sums are checked exactly. With FERRY_CONTROL_LANE=0 (the
// default; one
// connection per server, acks behind sums) the test fails: the hold applies only beside a
// control lane, so A's sums are read before B is pushed and A has finished.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "common/types/data_type.h"
#include "common/util/clock.h"
#include "common/util/counters.h"
#include "tests/support/in_process_cluster.h"
#include "worker/worker.h"

namespace ferry::testing {
namespace {

constexpr long kFinishMs = 60000;
constexpr uint64_t kBigElements = (64u << 20) / sizeof(float);  // 64 MiB
constexpr uint64_t kSmallElements = 4096 / sizeof(float);
constexpr uint64_t kPartitionBytes = 1u << 20;

// Waits until the worker has received `acks` acknowledgements; false after 30 s.
bool WaitForAcks(Worker& w, uint64_t acks) {
  const int64_t deadline = NowMs() + 30000;
  while (CounterValue(w.Counters(), "ack_delay_us_count") < acks) {
    if (NowMs() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST(ControlLaneTest, AnAckArrivesBeforeA64MiBSumQueuedAheadOfItIsRead) {
  InProcessCluster cluster({1, 2,
                            {{"FERRY_PARTITION_BYTES", std::to_string(kPartitionBytes)},
                             {"FERRY_SERVER_ENGINE_THREADS", "1"},
                             {"FERRY_CONTROL_LANE", "1"},
                             {"FERRY_RESEND_TIMEOUT_MS", "0"}}});
  cluster.RunWorkers([&](Worker& w) {
    const uint64_t big_partitions = kBigElements * sizeof(float) / kPartitionBytes;
    // Position-dependent values: worker r sends (r + 1) * (i % 1024); sums are 3x.
    std::vector<float> a(kBigElements), a_out(kBigElements, -1.0f);
    for (uint64_t i = 0; i < kBigElements; ++i) a[i] = static_cast<float>((w.rank() + 1) * (i % 1024));
    std::vector<float> b(kSmallElements), b_out(kSmallElements, -1.0f);
    for (uint64_t i = 0; i < kSmallElements; ++i) b[i] = static_cast<float>((w.rank() + 1) * (i + 7));

    w.van_for_test().HoldDataReadsForTest(true);
    Handle ha = w.PushPullAsync("A", a.data(), a_out.data(), DataType::kFloat32, kBigElements, false);
    ASSERT_TRUE(WaitForAcks(w, big_partitions))
        << "rank " << w.rank() << ": not every partition of A was acknowledged ("
        << CounterValue(w.Counters(), "ack_delay_us_count") << " of " << big_partitions << ")";
    w.Barrier();  // both workers' pushes of A are in: every sum of A was sent to us
    Handle hb = w.PushPullAsync("B", b.data(), b_out.data(), DataType::kFloat32, kSmallElements, false);
    ASSERT_TRUE(WaitForAcks(w, big_partitions + 1)) << "rank " << w.rank() << ": B was not acknowledged";
    // Not one byte of A's sums was read yet: neither operation can have finished.
    EXPECT_FALSE(w.Poll(ha));
    EXPECT_FALSE(w.Poll(hb));
    EXPECT_EQ(CounterValue(w.Counters(), "sum_delay_us_count"), 0u);

    w.van_for_test().HoldDataReadsForTest(false);
    w.Wait(ha);
    w.Wait(hb);
    for (uint64_t i = 0; i < kBigElements; ++i) {
      ASSERT_EQ(a_out[i], 3.0f * static_cast<float>(i % 1024)) << "rank " << w.rank() << " element " << i;
    }
    for (uint64_t i = 0; i < kSmallElements; ++i) {
      ASSERT_EQ(b_out[i], 3.0f * static_cast<float>(i + 7)) << "rank " << w.rank() << " element " << i;
    }
  });
  EXPECT_TRUE(cluster.Finish(kFinishMs));
}

}  // namespace
}  // namespace ferry::testing
