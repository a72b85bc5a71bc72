// A whole job in this process (tests/support/in_process_cluster.h): scheduler, servers
// and workers as role objects on threads, real ZeroMQ sockets on loopback. Values are
// small integers, so every sum and average is exact in float and compared with ==.

#include "tests/support/in_process_cluster.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <cstdint>
#include <string>
#include <vector>

#include "common/types/data_type.h"
#include "common/util/counters.h"
#include "tests/support/stats_files.h"
#include "worker/device/device_push_pull.h"
#include "worker/device/fake_device.h"
#include "worker/worker.h"

namespace ferry::testing {
namespace {

constexpr long kFinishMs = 20000;

TEST(InProcessClusterTest, DensePushPullOfSeveralTensorsSumsExactly) {
  // Small partitions: every tensor but the one-element one spreads over both servers.
  InProcessCluster cluster({2, 2, {{"FERRY_PARTITION_BYTES", "4096"}}});
  const std::vector<uint64_t> sizes = {1, 1000, 5000, 100000};
  constexpr int kRounds = 3;
  cluster.RunWorkers([&](Worker& w) {
    ASSERT_EQ(w.size(), 2);
    ASSERT_EQ(w.num_servers(), 2);
    for (int round = 0; round < kRounds; ++round) {
      std::vector<std::vector<float>> in(sizes.size()), out(sizes.size());
      std::vector<Handle> handles;
      for (size_t t = 0; t < sizes.size(); ++t) {
        // Worker r sends (r + 1) * (i % 1000 + round): sums 3x, averages 1.5x, exact.
        in[t].resize(sizes[t]);
        out[t].assign(sizes[t], -1.0f);
        for (uint64_t i = 0; i < sizes[t]; ++i) {
          in[t][i] = static_cast<float>((w.rank() + 1) * (i % 1000 + round));
        }
        handles.push_back(w.PushPullAsync("dense" + std::to_string(t), in[t].data(), out[t].data(),
                                          DataType::kFloat32, sizes[t],
                                          /*average=*/t % 2 == 1));
      }
      for (Handle h : handles) w.Wait(h);
      for (size_t t = 0; t < sizes.size(); ++t) {
        const float scale = t % 2 == 1 ? 1.5f : 3.0f;
        for (uint64_t i = 0; i < sizes[t]; ++i) {
          const float expected = scale * static_cast<float>(i % 1000 + round);
          ASSERT_EQ(out[t][i], expected)
              << "rank " << w.rank() << " tensor " << t << " element " << i << " round " << round;
        }
      }
    }
    // Integers too, in place.
    std::vector<int64_t> counts(777, w.rank() + 10);
    w.PushPull("counts", counts.data(), counts.data(), DataType::kInt64, counts.size(), false);
    for (int64_t c : counts) ASSERT_EQ(c, 21);
  });
  EXPECT_TRUE(cluster.Finish(kFinishMs));
}

// Who sends (worker/dense_push_pull.h): a push_pull's partitions leave from the caller's
// thread, and those a reply's credit lets out from van-io, not through the sender thread.
// Under `fifo` (no credit) and under `credit` with room for one 4 KiB partition (every later
// partition waits for an ack), exact sums, and the sender thread sent few batches: the
// design sends none; the bound leaves room for its once-a-second safety net meeting a
// batch in the microseconds between a quiet hand-off and its sender.
class DirectSendTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DirectSendTest, PartitionsGoFromTheCallerAndTheRepliesAndSumsAreExact) {
  InProcessCluster cluster({2, 2,
                            {{"FERRY_SCHEDULING_POLICY", GetParam()},
                             {"FERRY_PARTITION_BYTES", "4096"},
                             {"FERRY_SCHEDULING_CREDIT_BYTES", "4096"},
                             {"FERRY_FUSION_BYTES", "0"}}});
  constexpr int kRounds = 20;
  constexpr uint64_t kElements = 5000;  // 5 partitions of up to 4 KiB
  cluster.RunWorkers([&](Worker& w) {
    std::vector<float> in(kElements), out(kElements);
    for (int round = 0; round < kRounds; ++round) {
      for (uint64_t i = 0; i < kElements; ++i) {
        in[i] = static_cast<float>((w.rank() + 1) * (i % 100 + round));
      }
      w.PushPull("direct", in.data(), out.data(), DataType::kFloat32, kElements, false);
      for (uint64_t i = 0; i < kElements; ++i) {
        ASSERT_EQ(out[i], 3.0f * static_cast<float>(i % 100 + round))
            << "rank " << w.rank() << " element " << i << " round " << round;
      }
    }
    const CounterValues c = w.Counters();
    const uint64_t partitions = CounterValue(c, "partitions_pushed");
    const uint64_t by_sender = CounterValue(c, "sender_thread_batches");
    EXPECT_EQ(partitions, kRounds * 5u);
    EXPECT_LE(by_sender * 10, partitions)
        << "rank " << w.rank() << ": the sender thread sent " << by_sender << " of "
        << partitions << " partitions";
  });
  EXPECT_TRUE(cluster.Finish(kFinishMs));
}

INSTANTIATE_TEST_SUITE_P(Policies, DirectSendTest, ::testing::Values("fifo", "credit"));

TEST(InProcessClusterTest, SparseRowsSumExactly) {
  InProcessCluster cluster({2, 2, {}});
  constexpr int64_t kRows = 100, kWidth = 4;
  cluster.RunWorkers([&](Worker& w) {
    w.DeclareTensor("emb", DataType::kFloat32, {kRows, kWidth});
    // Worker r pushes (r + 1) * (row + 1) in every element of a row it lists.
    const std::vector<int64_t> rows =
        w.rank() == 0 ? std::vector<int64_t>{1, 5, 5, 99} : std::vector<int64_t>{5, 7};
    std::vector<float> values, out(rows.size() * kWidth, -1.0f);
    for (int64_t row : rows) values.insert(values.end(), kWidth, (w.rank() + 1) * (row + 1.0f));
    w.PushPullRows("emb", rows.data(), rows.size(), values.data(), out.data(), DataType::kFloat32,
                   false);
    // Row 1: 1 * 2; row 5: 1 * 6 twice + 2 * 6; row 7: 2 * 8; row 99: 1 * 100.
    const std::map<int64_t, float> sums = {{1, 2.0f}, {5, 24.0f}, {7, 16.0f}, {99, 100.0f}};
    for (size_t j = 0; j < rows.size(); ++j) {
      for (int64_t k = 0; k < kWidth; ++k) {
        ASSERT_EQ(out[j * kWidth + k], sums.at(rows[j]))
            << "rank " << w.rank() << " row " << rows[j];
      }
    }
    // A round in which worker 1 pushes no rows.
    const std::vector<int64_t> second =
        w.rank() == 0 ? std::vector<int64_t>{3} : std::vector<int64_t>{};
    std::vector<float> v(second.size() * kWidth, 7.0f), o(second.size() * kWidth, -1.0f);
    w.PushPullRows("emb", second.data(), second.size(), v.data(), o.data(), DataType::kFloat32,
                   false);
    for (float x : o) ASSERT_EQ(x, 7.0f);
  });
  EXPECT_TRUE(cluster.Finish(kFinishMs));
}

TEST(InProcessClusterTest, BroadcastGivesEveryWorkerTheRootsTensor) {
  InProcessCluster cluster({2, 3, {{"FERRY_PARTITION_BYTES", "4096"}}});
  cluster.RunWorkers([&](Worker& w) {
    for (int root = 0; root < w.size(); ++root) {
      std::vector<float> data(3000);
      for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(w.rank() * 10000 + i);
      w.Broadcast("params" + std::to_string(root), data.data(), DataType::kFloat32, data.size(),
                  root);
      for (size_t i = 0; i < data.size(); ++i) {
        ASSERT_EQ(data[i], static_cast<float>(root * 10000 + i)) << "rank " << w.rank();
      }
    }
  });
  EXPECT_TRUE(cluster.Finish(kFinishMs));
}

TEST(InProcessClusterTest, NoWorkerLeavesABarrierBeforeEveryWorkerReachedIt) {
  InProcessCluster cluster({1, 3, {}});
  std::atomic<int> arrived{0};
  constexpr int kBarriers = 5;
  cluster.RunWorkers([&](Worker& w) {
    for (int b = 1; b <= kBarriers; ++b) {
      arrived.fetch_add(1);
      w.Barrier();
      // Everyone arrived at barrier b; nobody can be past barrier b + 1's arrival.
      const int seen = arrived.load();
      EXPECT_GE(seen, b * w.size()) << "rank " << w.rank() << " barrier " << b;
      EXPECT_LE(seen, (b + 1) * w.size()) << "rank " << w.rank() << " barrier " << b;
    }
  });
  EXPECT_EQ(arrived.load(), kBarriers * 3);
  EXPECT_TRUE(cluster.Finish(kFinishMs));
}

// A name used with another size or dtype is declared anew (worker/tensor_catalog.h):
// exact sums in every layout, and the servers drop the old declarations' keys once both
// workers retired them.
TEST(InProcessClusterTest, ANameDeclaredAnewSumsExactlyAndTheServersDropTheOldKeys) {
  StatsFiles stats;
  InProcessCluster cluster(
      {2, 2, {{"FERRY_PARTITION_BYTES", "4096"}, {"FERRY_STATS_FILE", stats.path_template()}}});
  const std::vector<uint64_t> sizes = {1000, 3000, 1};
  constexpr int kSteps = 30;
  // Step s uses sizes[s % 3] elements, float32 on even steps and int64 on odd ones: every
  // step is another layout than the one before.
  auto count = [&](int step) { return sizes[step % 3]; };
  auto keys = [&](int step) {  // partitions of 4096 bytes
    const uint64_t bytes = count(step) * (step % 2 == 0 ? 4 : 8);
    return std::max<uint64_t>(1, (bytes + 4095) / 4096);
  };
  cluster.RunWorkers([&](Worker& w) {
    std::vector<float> y(500, static_cast<float>(w.rank() + 1));  // another name, unchanged
    for (int step = 0; step < kSteps; ++step) {
      const uint64_t n = count(step);
      Handle hy = w.PushPullAsync("y", y.data(), y.data(), DataType::kFloat32, y.size(), true);
      if (step % 2 == 0) {
        std::vector<float> x(n);
        for (uint64_t i = 0; i < n; ++i) x[i] = static_cast<float>((w.rank() + 1) * (i % 97 + step));
        w.PushPull("x", x.data(), x.data(), DataType::kFloat32, n, false);
        for (uint64_t i = 0; i < n; ++i) {
          ASSERT_EQ(x[i], 3.0f * static_cast<float>(i % 97 + step)) << "step " << step << " i " << i;
        }
      } else {
        std::vector<int64_t> x(n);
        for (uint64_t i = 0; i < n; ++i) x[i] = (w.rank() + 1) * static_cast<int64_t>(i + step);
        w.PushPull("x", x.data(), x.data(), DataType::kInt64, n, false);
        for (uint64_t i = 0; i < n; ++i) {
          ASSERT_EQ(x[i], 3 * static_cast<int64_t>(i + step)) << "step " << step << " i " << i;
        }
      }
      w.Wait(hy);
      for (float v : y) ASSERT_EQ(v, 1.5f) << "step " << step;  // the average of 1 and 2
      std::fill(y.begin(), y.end(), static_cast<float>(w.rank() + 1));
    }
  });
  EXPECT_TRUE(cluster.Finish(kFinishMs));
  EXPECT_EQ(stats.Sum("worker", "redeclarations"), 2u * (kSteps - 1));
  uint64_t retired = 0;
  for (int step = 0; step < kSteps - 1; ++step) retired += keys(step);
  // Every declaration but the last was retired by both workers. The last RETIREs may still
  // be queued when the job ends (a server stops without draining its engines' queues).
  const uint64_t dropped = stats.Sum("server", "keys_retired");
  EXPECT_LE(dropped, retired);
  EXPECT_GE(dropped, retired - keys(kSteps - 2) - keys(kSteps - 3));
}

// Workers that disagree: worker 0 declares "x" anew while worker 1 still uses the old
// size. Worker 1 is told why (not left to its deadline), its refused declaration is undone,
// and once it uses the new size too, both sums complete exactly.
TEST(InProcessClusterTest, AWorkerStillOnTheOldDeclarationIsToldAndCanCatchUp) {
  InProcessCluster cluster({2, 2, {}});
  cluster.RunWorkers([&](Worker& w) {
    std::vector<float> small(10), large(20);
    for (int step = 0; step < 2; ++step) {
      std::fill(small.begin(), small.end(), static_cast<float>(w.rank() + 1));
      w.PushPull("x", small.data(), small.data(), DataType::kFloat32, small.size(), false);
      for (float v : small) ASSERT_EQ(v, 3.0f);
    }
    if (w.rank() == 1) {
      std::fill(small.begin(), small.end(), 1.0f);
      try {
        w.PushPull("x", small.data(), small.data(), DataType::kFloat32, small.size(), false);
        ADD_FAILURE() << "worker 1's push of the old declaration was accepted";
      } catch (const FerryError& e) {
        EXPECT_EQ(e.code(), ErrorCode::kMismatch);
        EXPECT_NE(std::string(e.what()).find("worker(s) 0 declared the name of tensor 0 anew"),
                  std::string::npos)
            << e.what();
      }
    }
    std::fill(large.begin(), large.end(), static_cast<float>(w.rank() + 1));
    w.PushPull("x", large.data(), large.data(), DataType::kFloat32, large.size(), false);
    for (float v : large) ASSERT_EQ(v, 3.0f) << "rank " << w.rank();
  });
  EXPECT_TRUE(cluster.Finish(kFinishMs));
}

// Re-initialisation (worker/binding_core.h): every worker suspends and resumes, twice,
// using its names with other sizes each time: exact sums, the same ranks, and the servers
// drop every key of the sessions before.
TEST(InProcessClusterTest, WorkersSuspendAndResumeWithExactSumsAndTheKeysFreed) {
  StatsFiles stats;
  InProcessCluster cluster({2, 2,
                            {{"FERRY_PARTITION_BYTES", "4096"},
                             {"FERRY_STATS_FILE", stats.path_template()}}});
  cluster.RunWorkers([&](Worker& w) {
    const int rank = w.rank();
    for (int session = 0; session < 3; ++session) {
      std::vector<float> a(2000 + 1000 * session, static_cast<float>(rank + session));
      std::vector<float> b(7, static_cast<float>(10 * (rank + 1)));
      w.PushPull("a", a.data(), a.data(), DataType::kFloat32, a.size(), false);
      w.PushPull("b", b.data(), b.data(), DataType::kFloat32, b.size(), true);
      for (float v : a) ASSERT_EQ(v, static_cast<float>(1 + 2 * session)) << "session " << session;
      for (float v : b) ASSERT_EQ(v, 15.0f);
      if (session == 2) break;
      w.Suspend();
      w.Suspend();  // idempotent
      try {
        w.PushPull("b", b.data(), b.data(), DataType::kFloat32, b.size(), true);
        ADD_FAILURE() << "a push_pull of a suspended worker was accepted";
      } catch (const FerryError& e) {
        EXPECT_EQ(e.code(), ErrorCode::kShutdown) << e.what();
      }
      w.Resume();
      EXPECT_EQ(w.rank(), rank);
    }
  });
  EXPECT_TRUE(cluster.Finish(kFinishMs));
  // Sessions 0 and 1: a (2 and 3 partitions of 4 KiB... 8000 and 12000 bytes: 2 and 3) and b
  // (1 each), retired by both workers at each suspension. The third session's keys stay.
  EXPECT_EQ(stats.Sum("server", "keys_retired"), 2u + 1u + 3u + 1u);
}

// The job ends once every worker is suspended or shut down and one is shut down for good:
// a suspended worker then cannot come back, and says why.
TEST(InProcessClusterTest, AJobEndsWhenEveryWorkerLeftAndOneForGood) {
  InProcessCluster cluster({1, 2, {}});
  std::atomic<bool> suspended{false};
  cluster.RunWorkers([&](Worker& w) {
    std::vector<float> x(5, 1.0f);
    w.PushPull("x", x.data(), x.data(), DataType::kFloat32, x.size(), false);
    if (w.rank() == 1) {  // leaves for good once worker 0 is suspended
      while (!suspended) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      w.Shutdown();  // returns once the scheduler ended the job
      return;
    }
    w.Suspend();
    suspended = true;
    for (int i = 0; i < 20000 && !w.JobEnded(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(w.JobEnded());
    try {
      w.Resume();
      ADD_FAILURE() << "resumed after the job ended";
    } catch (const FerryError& e) {
      EXPECT_EQ(e.code(), ErrorCode::kShutdown);
      EXPECT_NE(std::string(e.what()).find("the job has ended meanwhile"), std::string::npos)
          << e.what();
    }
  });
  EXPECT_TRUE(cluster.Finish(kFinishMs));
}

// Uneven data: rank 1 declares a name, and re-declares one, while rank 0 has joined (as
// Horovod allows: the joined rank counts as zeros). At the next join rank 0 takes rank 1's
// declarations, so that afterwards both meet on the same keys: the names rank 0 never saw,
// the re-declared shape and a new name sum exactly.
TEST(InProcessClusterTest, AJoinHandsTheDeclarationsMadeMeanwhileToTheWorkersThatHadJoined) {
  InProcessCluster cluster({2, 2, {}});
  cluster.RunWorkers([&](Worker& w) {
    const float mine = static_cast<float>(w.rank() + 1);
    std::vector<float> x(100, mine);
    w.PushPull("x", x.data(), x.data(), DataType::kFloat32, x.size(), false);
    for (float v : x) ASSERT_EQ(v, 3.0f);
    EXPECT_GE(w.Join(), 0);  // nothing declared meanwhile: fine
    if (w.rank() == 1) {  // more batches, alone once rank 0 joined
      std::fill(x.begin(), x.end(), 2.0f);
      w.PushPull("x", x.data(), x.data(), DataType::kFloat32, x.size(), false);
      for (float v : x) ASSERT_EQ(v, 2.0f);  // rank 0 counts as zeros
      std::vector<float> metric(3, 5.0f), smaller(50, 4.0f);
      w.PushPull("metric", metric.data(), metric.data(), DataType::kFloat32, 3, false);
      for (float v : metric) ASSERT_EQ(v, 5.0f);
      w.PushPull("x", smaller.data(), smaller.data(), DataType::kFloat32, 50, false);
      for (float v : smaller) ASSERT_EQ(v, 4.0f);
    }
    EXPECT_EQ(w.Join(), 1);
    std::vector<float> metric(3, mine), smaller(50, mine), fresh(7, mine);
    w.PushPull("metric", metric.data(), metric.data(), DataType::kFloat32, 3, false);
    w.PushPull("x", smaller.data(), smaller.data(), DataType::kFloat32, 50, false);
    w.PushPull("fresh", fresh.data(), fresh.data(), DataType::kFloat32, 7, false);
    for (float v : metric) EXPECT_EQ(v, 3.0f);
    for (float v : smaller) EXPECT_EQ(v, 3.0f);
    for (float v : fresh) EXPECT_EQ(v, 3.0f);
  });
  EXPECT_TRUE(cluster.Finish(kFinishMs));
}

// Declarations that no early join explains (each worker declared another name at the same
// point): join() says so on both, instead of leaving their next push_pulls to wait out a
// deadline on different keys.
TEST(InProcessClusterTest, AJoinRefusesWorkersWhoseDeclarationsParted) {
  InProcessCluster cluster({2, 2, {}});
  cluster.RunWorkers([&](Worker& w) {
    std::vector<float> x(100, 1.0f);
    w.PushPull("x", x.data(), x.data(), DataType::kFloat32, x.size(), false);
    w.DeclareTensor(w.rank() == 0 ? "only_on_0" : "only_on_1", DataType::kFloat32, {4});
    try {
      w.Join();
      ADD_FAILURE() << "rank " << w.rank() << ": a join with parted declarations passed";
    } catch (const FerryError& e) {
      EXPECT_EQ(e.code(), ErrorCode::kMismatch);
      EXPECT_NE(std::string(e.what()).find("the workers' tensor declarations differ"),
                std::string::npos)
          << e.what();
    }
  });
  EXPECT_TRUE(cluster.Finish(kFinishMs));
}

// A staged push_pull (the device path's): each partition is sent only once released, from
// whatever thread releases it, in any order. The input holds garbage until a partition's
// bytes are written just before its release, so an early send would break the exact sum;
// with one partition held the operation cannot finish, and another tensor's push_pull is
// not held up by it.
TEST(InProcessClusterTest, AStagedPushPullSendsEachPartitionOnlyOnceReleased) {
  InProcessCluster cluster({2, 2, {{"FERRY_PARTITION_BYTES", "4096"}}});
  cluster.RunWorkers([&](Worker& w) {
    constexpr uint64_t kCount = 3000;  // 12000 bytes: 3 partitions
    const float mine = static_cast<float>(w.rank() + 1);
    std::vector<float> in(kCount, -1000.0f), out(kCount, 0.0f);
    std::vector<PartitionSpec> parts;
    // Each partition's sum is complete in `out` when part_summed names it.
    std::mutex summed_mu;
    std::vector<std::pair<uint32_t, bool>> summed;  // (partition, its sum was exact then)
    auto exact = [&](uint32_t i) {
      const uint64_t first = parts[i].offset / sizeof(float);
      for (uint64_t k = first; k < first + parts[i].bytes / sizeof(float); ++k) {
        if (out[k] != 3.0f * static_cast<float>(k % 100)) return false;
      }
      return true;
    };
    const Handle h = w.PushPullStagedAsync(
        "staged", in.data(), out.data(), DataType::kFloat32, kCount, /*average=*/false, &parts,
        std::nullopt, nullptr, [&](uint32_t i) {
          std::lock_guard<std::mutex> lock(summed_mu);
          summed.emplace_back(i, exact(i));
        });
    ASSERT_EQ(parts.size(), 3u);
    auto fill_and_release = [&](uint32_t i) {
      const uint64_t first = parts[i].offset / sizeof(float);
      for (uint64_t k = first; k < first + parts[i].bytes / sizeof(float); ++k) {
        in[k] = mine * static_cast<float>(k % 100);
      }
      w.ReleasePartition(h, i);
    };
    std::thread([&] { fill_and_release(2); }).join();  // a device callback's thread
    fill_and_release(1);
    std::vector<float> other(10, mine);
    w.PushPull("other", other.data(), other.data(), DataType::kFloat32, other.size(), false);
    for (float v : other) EXPECT_EQ(v, 3.0f);
    EXPECT_FALSE(w.Poll(h));  // partition 0 is still held
    fill_and_release(0);
    w.Wait(h);
    for (uint64_t k = 0; k < kCount; ++k) {
      ASSERT_EQ(out[k], 3.0f * static_cast<float>(k % 100)) << "rank " << w.rank() << " " << k;
    }
    {
      std::lock_guard<std::mutex> lock(summed_mu);
      std::sort(summed.begin(), summed.end());
      EXPECT_EQ(summed, (std::vector<std::pair<uint32_t, bool>>{{0, true}, {1, true}, {2, true}}));
    }
    // Releasing again, or an operation that is not staged, is refused.
    EXPECT_THROW(w.ReleasePartition(h, 0), FerryError);
    const Handle plain = w.PushPullAsync("other", other.data(), other.data(), DataType::kFloat32,
                                         other.size(), false);
    EXPECT_THROW(w.ReleasePartition(plain, 0), FerryError);
    w.Wait(plain);
  });
  EXPECT_TRUE(cluster.Finish(kFinishMs));
}

// A push_pull of device memory on the fake device (host memory standing in for it): the
// partitions are copied once the producer's kernel is done, each sent as it lands, and the
// consumer's later work sees the exact sums; the caller's thread never waited for the
// device (Start returned while the producer was still held).
TEST(InProcessClusterTest, ADevicePushPullOverlapsCopiesWithSendsAndSumsExactly) {
  InProcessCluster cluster({2, 2, {{"FERRY_PARTITION_BYTES", "4096"}}});
  cluster.RunWorkers([&](Worker& w) {
    constexpr uint64_t kCount = 3000;  // 3 partitions
    FakeDevice device;
    const DeviceApi::Stream producer = device.NewStream(), consumer = device.NewStream();
    std::vector<float> grad(kCount, -1000.0f), out(kCount, 0.0f), seen;
    auto kernel = device.Hold(producer);  // backward still computing the gradient
    device.HostCallback(producer, [&] {
      for (uint64_t k = 0; k < kCount; ++k) grad[k] = (w.rank() + 1.0f) * (k % 100);
    });
    {
      DevicePushPull device_path(w, device);
      const Handle h = device_path.Start("device.grad", grad.data(), out.data(),
                                         DataType::kFloat32, kCount, false, producer, consumer);
      EXPECT_FALSE(device_path.Poll(h));
      EXPECT_EQ(device.copies(), 0u);
      kernel->Open();
      device_path.Wait(h);
      const DeviceApi::Event step = device.NewEvent();
      for (int iteration = 0; iteration < 3; ++iteration) {
        if (iteration > 0) {  // the next steps: the same tensor, at once
          device_path.Wait(device_path.Start("device.grad", grad.data(), out.data(),
                                             DataType::kFloat32, kCount, false, producer,
                                             consumer));
        }
        seen.clear();
        device.HostCallback(consumer, [&] { seen = out; });  // the optimizer step
        device.Record(step, consumer);
        device.Synchronize(step);
        ASSERT_EQ(seen.size(), kCount);
        for (uint64_t k = 0; k < kCount; ++k) {
          ASSERT_EQ(seen[k], 3.0f * (k % 100)) << "rank " << w.rank() << " element " << k;
        }
      }
      device.DestroyEvent(step);
      // Pinned once: each step's buffer came back once its copies back completed.
      EXPECT_EQ(device_path.pinned_allocated(), 1u);
      EXPECT_EQ(device.pinned_live(), 1);
    }
    EXPECT_EQ(device.copies(), 18u);  // 3 partitions there and 3 back, 3 times
    EXPECT_EQ(device.pinned_live(), 0);
    {
      // A tensor of no elements (torch gives it a null data pointer): nothing to copy.
      DevicePushPull device_path(w, device);
      device_path.Wait(device_path.Start("device.empty", nullptr, nullptr, DataType::kFloat32, 0,
                                         false, producer, consumer));
    }
    EXPECT_EQ(device.copies(), 18u);
    EXPECT_EQ(device.pinned_live(), 0);
  });
  EXPECT_TRUE(cluster.Finish(kFinishMs));
}

// The learned order (worker/point_to_point.h): rank 1 asks for tags 3, 2, 1, 0; rank 0's
// sends of tags 0..3, queued together (its transport's queues held, then released), arrive
// in call order the first time (nothing learned yet), then in the order rank 1 asked for
// them; with a declared priority (0 for all) in call order again. Every payload exact.
TEST(InProcessClusterTest, SendsWithoutAPriorityTakeTheOrderTheirReceiverAskedFor) {
  // TCP between the workers: the shared-memory lane's payloads skip the order queues.
  InProcessCluster cluster({1, 2, {{"FERRY_SHM", "0"}}});
  constexpr int kTags = 4;
  constexpr uint64_t kCount = 16384;
  std::vector<std::vector<int>> arrivals;  // rank 1's, per round
  cluster.RunWorkers([&](Worker& w) {
    std::vector<std::vector<float>> data(kTags, std::vector<float>(kCount));
    auto round = [&](int32_t priority, int r) {
      std::vector<Handle> handles;
      if (w.rank() == 1) {
        std::mutex mu;
        std::condition_variable done;
        std::vector<int> order;  // completion callbacks run in completion order
        for (int tag = kTags - 1; tag >= 0; --tag) {
          w.RecvAsync(data[tag].data(), kCount, DataType::kFloat32, 0, tag,
                      [&, tag](Handle, const Verdict& v) {
                        std::lock_guard<std::mutex> lock(mu);
                        order.push_back(v.ok() ? tag : -1);
                        done.notify_all();
                      });
        }
        w.Barrier();  // every receive posted before the sends
        std::unique_lock<std::mutex> lock(mu);
        ASSERT_TRUE(done.wait_for(lock, std::chrono::seconds(20),
                                  [&] { return order.size() == kTags; }))
            << "round " << r << ": " << order.size() << " of " << kTags << " receives done";
        for (int tag = 0; tag < kTags; ++tag) {
          ASSERT_EQ(data[tag], std::vector<float>(kCount, 10.0f * r + tag)) << "tag " << tag;
        }
        arrivals.push_back(order);
        return;
      }
      for (int tag = 0; tag < kTags; ++tag) data[tag].assign(kCount, 10.0f * r + tag);
      w.Barrier();
      w.van_for_test().HoldDataQueuesForTest(true);
      for (int tag = 0; tag < kTags; ++tag) {
        handles.push_back(w.SendAsync(data[tag].data(), kCount, DataType::kFloat32, 1, tag,
                                      priority));
      }
      w.van_for_test().HoldDataQueuesForTest(false);
      for (Handle h : handles) w.Wait(h);
    };
    round(PointToPoint::kLearnedPriority, 0);
    round(PointToPoint::kLearnedPriority, 1);
    round(0, 2);
  });
  EXPECT_TRUE(cluster.Finish(kFinishMs));
  ASSERT_EQ(arrivals.size(), 3u);
  EXPECT_EQ(arrivals[0], (std::vector<int>{0, 1, 2, 3})) << "nothing learned yet";
  EXPECT_EQ(arrivals[1], (std::vector<int>{3, 2, 1, 0})) << "the order rank 1 asked for";
  EXPECT_EQ(arrivals[2], (std::vector<int>{0, 1, 2, 3})) << "declared priorities";
}

TEST(InProcessClusterTest, SpawnThreadsRunsEveryRankOnItsOwnThread) {
  std::vector<std::thread::id> ids(4);
  SpawnThreads(4, [&](int rank) { ids[rank] = std::this_thread::get_id(); });
  for (int a = 0; a < 4; ++a) {
    EXPECT_NE(ids[a], std::this_thread::get_id());
    for (int b = a + 1; b < 4; ++b) EXPECT_NE(ids[a], ids[b]);
  }
}

}  // namespace
}  // namespace ferry::testing
