// Frames (FERRY_FRAME_BYTES; worker/dense_push_pull.h, server/key_state.h "Frames") in a
// whole job in this process (tests/support/in_process_cluster.h). Order, never time:
//
// Frame priority (one worker, so that B's sum waits for no other worker's push). A 64 MiB
// tensor A of one partition goes out as 256 frames of 256 KiB;
// the Van hands a worker's frames to ZeroMQ by priority while less than the watermark is
// unreleased (common/transport/van.h, "Order"). Once A's first frame was released, an
// urgent 4 KiB tensor B is pushed: it must complete while most of A's frames have not even
// been handed to ZeroMQ. With FERRY_FRAME_BYTES=0, A is one 64 MiB message in ZeroMQ when
// B comes, B's push waits behind all of it, and the check fails.
//
// Everything else with frames: several tensors of odd sizes (frames with a short last one,
// partitions smaller than a frame, fused ones), averaged or not, over rounds, with exact
// position-dependent sums, in arrival order and in rank order (deterministic bits).

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
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

constexpr long kFinishMs = 120000;
constexpr uint64_t kFrameBytes = 256 << 10;
constexpr uint64_t kBigBytes = 64 << 20;
constexpr uint64_t kBigElements = kBigBytes / sizeof(float);
constexpr uint64_t kBigFrames = kBigBytes / kFrameBytes;
constexpr uint64_t kSmallElements = 4096 / sizeof(float);

// Waits until `counter` of the worker reaches `value`; false after 30 s.
bool WaitForCounter(Worker& w, const std::string& counter, uint64_t value) {
  const int64_t deadline = NowMs() + 30000;
  while (CounterValue(w.Counters(), counter) < value) {
    if (NowMs() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(FrameTest, AnUrgentTensorPushedBehindA64MiBOneCompletesBeforeItsLastFrameLeaves) {
  InProcessCluster cluster({1, 1,
                            {{"FERRY_PARTITION_BYTES", std::to_string(kBigBytes)},
                             {"FERRY_MAX_MESSAGE_BYTES", std::to_string(2 * kBigBytes)},
                             {"FERRY_FRAME_BYTES", std::to_string(kFrameBytes)},
                             {"FERRY_TRANSPORT_WATERMARK_BYTES", std::to_string(2 * kFrameBytes)},
                             {"FERRY_SERVER_ENGINE_THREADS", "1"},
                             // The order queue is TCP's (the lane hands bytes over at once).
                             {"FERRY_SHM", "0"}}});
  cluster.RunWorkers([&](Worker& w) {
    std::vector<float> a(kBigElements), a_out(kBigElements, -1.0f);
    for (uint64_t i = 0; i < kBigElements; ++i) a[i] = static_cast<float>((w.rank() + 1) * (i % 1024));
    std::vector<float> b(kSmallElements), b_out(kSmallElements, -1.0f);
    for (uint64_t i = 0; i < kSmallElements; ++i) b[i] = static_cast<float>((w.rank() + 1) * (i + 7));
    w.DeclareTensor("B", DataType::kFloat32, {static_cast<int64_t>(kSmallElements)}, 0);
    w.DeclareTensor("A", DataType::kFloat32, {static_cast<int64_t>(kBigElements)}, -10);

    const uint64_t released = CounterValue(w.Counters(), "send_releases");
    Handle ha = w.PushPullAsync("A", a.data(), a_out.data(), DataType::kFloat32, kBigElements, false);
    ASSERT_TRUE(WaitForCounter(w, "send_releases", released + 1)) << "A's first frame never left";
    Handle hb = w.PushPullAsync("B", b.data(), b_out.data(), DataType::kFloat32, kSmallElements, false);
    w.Wait(hb);
    // B is done; A's frames mostly still wait in the order queue (what ZeroMQ released
    // is at most what it was handed).
    const uint64_t a_released = CounterValue(w.Counters(), "send_releases") - released - 1;
    std::printf("A's frames released (beyond the first) when B completed: %llu of %llu\n",
                static_cast<unsigned long long>(a_released),
                static_cast<unsigned long long>(kBigFrames));
    EXPECT_LT(a_released, kBigFrames / 2)
        << "rank " << w.rank() << ": " << a_released << " of A's " << kBigFrames
        << " frames left before the urgent B completed";
    EXPECT_FALSE(w.Poll(ha));
    w.Wait(ha);
    EXPECT_EQ(CounterValue(w.Counters(), "frames_pushed"), kBigFrames);
    for (uint64_t i = 0; i < kBigElements; ++i) {
      ASSERT_EQ(a_out[i], a[i]) << "element " << i;
    }
    for (uint64_t i = 0; i < kSmallElements; ++i) {
      ASSERT_EQ(b_out[i], b[i]) << "element " << i;
    }
  });
  EXPECT_TRUE(cluster.Finish(kFinishMs));
}

// Tensors of odd sizes in 4 KiB frames and 10 KiB partitions: many frames, short last
// frames, partitions below a frame (whole, some fused), averaged and not; over 3 rounds.
// `window`: FERRY_WINDOW=bdp down to one frame, so frames' credit returns (ReturnPart)
// decide what goes.
void SumsAreExact(bool deterministic, bool window = false) {
  const std::vector<uint64_t> counts = {1, 1000, 1024, 2561, 5000, 77777};
  InProcessCluster cluster({2, 3,
                            {{"FERRY_PARTITION_BYTES", "10240"},
                             {"FERRY_FRAME_BYTES", "4096"},
                             {"FERRY_DETERMINISTIC", deterministic ? "1" : "0"},
                             {"FERRY_WINDOW", window ? "bdp" : "fixed"},
                             {"FERRY_WINDOW_MIN_BYTES", "4096"},
                             {"FERRY_WINDOW_MAX_BYTES", "16384"}}});
  cluster.RunWorkers([&](Worker& w) {
    const int n = w.size();
    for (int round = 0; round < 3; ++round) {
      std::vector<std::vector<float>> in(counts.size()), out(counts.size());
      std::vector<Handle> handles;
      for (size_t t = 0; t < counts.size(); ++t) {
        in[t].resize(counts[t]);
        out[t].assign(counts[t], -1.0f);
        // Averaged tensors push n x the value, so the average is an exact integer.
        const int scale = t % 2 == 1 ? n : 1;
        for (uint64_t i = 0; i < counts[t]; ++i) {
          in[t][i] = static_cast<float>(scale * ((w.rank() + 1) * 1000 + round * 100 + t * 10 + i % 977));
        }
        handles.push_back(w.PushPullAsync("t" + std::to_string(t), in[t].data(), out[t].data(),
                                          DataType::kFloat32, counts[t], t % 2 == 1));
      }
      for (Handle h : handles) w.Wait(h);
      for (size_t t = 0; t < counts.size(); ++t) {
        for (uint64_t i = 0; i < counts[t]; ++i) {
          float sum = 0;
          for (int r = 0; r < n; ++r) {
            sum += static_cast<float>((r + 1) * 1000 + round * 100 + t * 10 + i % 977);
          }
          ASSERT_EQ(out[t][i], sum) << "rank " << w.rank() << " round " << round
                                         << " tensor " << t << " element " << i;
        }
      }
    }
    EXPECT_GT(CounterValue(w.Counters(), "frames_pushed"), 0u);
    // The window sampled every acknowledged task or frame, and applied only when asked.
    const CounterValues c = w.Counters();
    EXPECT_EQ(CounterValue(c, "window.on"), window ? 1u : 0u);
    EXPECT_GE(CounterValue(c, "window.samples"), CounterValue(c, "partitions_pushed"));
    EXPECT_GT(CounterValue(c, "window.rate_bytes_per_s"), 0u);
    if (window) {
      EXPECT_GE(CounterValue(c, "window.bytes"), 4096u);
      EXPECT_LE(CounterValue(c, "window.bytes"), 16384u);
    }
  });
  EXPECT_TRUE(cluster.Finish(kFinishMs));
}

TEST(FrameTest, SumsOfFramesAreExact) { SumsAreExact(false); }
TEST(FrameTest, SumsOfFramesAreExactInRankOrder) { SumsAreExact(true); }
TEST(FrameTest, SumsOfFramesAreExactUnderAWindowOfAFewFrames) { SumsAreExact(false, true); }

}  // namespace
}  // namespace ferry::testing
