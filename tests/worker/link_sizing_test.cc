// Partitions sized per link (worker/partition_scheduling/link_sizing.h): the paths' rates
// from acknowledgements, the piece per path, and when a worker decides again; and the
// per-layer decomposition's pieces and measurements (layer_decomposition.h).

#include "worker/partition_scheduling/link_sizing.h"
#include "worker/partition_scheduling/layer_decomposition.h"

#include <gtest/gtest.h>

namespace ferry {
namespace {

constexpr double kMB = 1e6;

TEST(LinkRatesTest, AckedBytesOverTheTimeSinceTheLaterOfSendAndLastAck) {
  LinkRates rates(2);
  // Server 0: 100 KB pieces sent at 0, acked every millisecond: 100 MB/s.
  for (int i = 1; i <= 9; ++i) rates.OnAck(0, 100000, 0, i * 1000);
  EXPECT_DOUBLE_EQ(rates.Rate(0), 100 * kMB);
  // Server 1: nothing yet; a server beyond the slots adds its own.
  EXPECT_EQ(rates.Rate(1), 0);
  rates.OnAck(3, 50000, 0, 1000);
  EXPECT_EQ(rates.servers(), 4);
  EXPECT_DOUBLE_EQ(rates.Rate(3), 50 * kMB);
}

TEST(LinkRatesTest, TheMedianOfTheLastSamplesIgnoresABurst) {
  LinkRates rates(1);
  int64_t now = 0;
  auto ack = [&](int64_t sent, int64_t gap) {
    now += gap;
    rates.OnAck(0, 10000, sent, now);
  };
  for (int i = 0; i < 20; ++i) ack(now, 1000);        // 10 MB/s each
  for (int i = 0; i < 5; ++i) ack(now - 1000, 1);     // a burst: 10 GB/s each
  EXPECT_DOUBLE_EQ(rates.Rate(0), 10 * kMB);
  // Only the last kSamples count: a path that slowed shows it once they are all slow.
  for (size_t i = 0; i < LinkRates::kSamples; ++i) ack(now, 4000);
  EXPECT_DOUBLE_EQ(rates.Rate(0), 2.5 * kMB);
}

TEST(LinkSizingTest, PiecesFollowTheWorkersOwnRate) {
  // 2 ms pieces: 125 MB/s (1 Gbit/s) sends 250 KB: 128 KiB; 31.25 MB/s (250 Mbit/s) 62.5 KB:
  // 32 KiB; never below 32 KiB, never above the partition.
  EXPECT_EQ(PieceBytes(125 * kMB, 0, 4, 0.2, 2, kMinLinkPieceBytes, 1 << 20), 131072u);
  EXPECT_EQ(PieceBytes(31.25 * kMB, 0, 4, 0.2, 2, kMinLinkPieceBytes, 1 << 20), 32768u);
  EXPECT_EQ(PieceBytes(1 * kMB, 0, 4, 0.2, 2, kMinLinkPieceBytes, 1 << 20), 32768u);
  EXPECT_EQ(PieceBytes(10000 * kMB, 0, 4, 0.2, 2, kMinLinkPieceBytes, 1 << 20), 1u << 20);
  EXPECT_EQ(PieceBytes(125 * kMB, 0, 4, 0.2, 2, kMinLinkPieceBytes, 65536), 65536u);
  // Nothing measured: the partition.
  EXPECT_EQ(PieceBytes(0, 0, 4, 0.2, 2, kMinLinkPieceBytes, 1 << 20), 1u << 20);
}

TEST(LinkSizingTest, APathSlowerThanAnEvenShareGetsSmallerPieces) {
  // 4 servers on a 125 MB/s link: an even share is 31.25 MB/s. A share 10% below it is noise
  // (threshold 20%): the worker's piece. A path at a sixth of an even share is a slow path: 5 x 4 x 1.2 MB/s sends 48 KB in 2 ms.
  EXPECT_EQ(PieceBytes(125 * kMB, 28 * kMB, 4, 0.2, 2, kMinLinkPieceBytes, 1 << 20), 131072u);
  EXPECT_EQ(PieceBytes(125 * kMB, 5 * kMB, 4, 0.2, 2, kMinLinkPieceBytes, 1 << 20), 32768u);
  // A path faster than the worker's share cannot make pieces larger than its own link's.
  EXPECT_EQ(PieceBytes(125 * kMB, 500 * kMB, 4, 0.2, 2, kMinLinkPieceBytes, 1 << 20), 131072u);
}

TEST(LinkSizingTest, DecidesEveryServersPieceAndAgainOnlyWhenARateMoved) {
  LinkRates rates(3);
  for (int i = 1; i <= 5; ++i) {
    rates.OnAck(0, 40000, 0, i * 1000);  // 40 MB/s
    rates.OnAck(1, 40000, 0, i * 1000);
    rates.OnAck(2, 4000, 0, i * 1000);   // 4 MB/s: a slow server
  }
  LinkSizing sizing(2, kMinLinkPieceBytes, 0.2);
  const LinkPieces p = sizing.Decide(120 * kMB, rates, 1 << 20, 0);
  EXPECT_EQ(p.bytes, (std::vector<uint64_t>{131072, 131072, 32768}));
  // Nothing moved: no new decision. The worker's rate or a slow path moving past 20%: one
  // (above the paths' even share, 144 MB/s here, a faster worker rate sizes nothing more).
  EXPECT_FALSE(sizing.Moved(p, 120 * kMB, rates));
  EXPECT_FALSE(sizing.Moved(p, 140 * kMB, rates));
  EXPECT_TRUE(sizing.Moved(p, 90 * kMB, rates));
  for (size_t i = 0; i < LinkRates::kSamples; ++i) rates.OnAck(2, 40000, 0, 10000 + 1000 * i);
  EXPECT_TRUE(sizing.Moved(p, 120 * kMB, rates));
  EXPECT_EQ(sizing.Decide(120 * kMB, rates, 1 << 20, 0).bytes[2], 131072u);
}

TEST(LinkSizingTest, APathAtTheMeanRateKeepsWholePartitions) {
  // Partitions of 128 KiB sized for a mean of 31.25 MB/s (250 Mbit/s): the time rule alone
  // would give 32 KiB pieces (62.5 KB in 2 ms), but a worker at the mean, or within the
  // threshold of it, keeps whole partitions: on even links nothing changes.
  LinkRates rates(2);
  LinkSizing sizing(2, kMinLinkPieceBytes, 0.2);
  EXPECT_EQ(sizing.Decide(31.25 * kMB, rates, 131072, 31.25 * kMB).bytes,
            (std::vector<uint64_t>{131072, 131072}));
  EXPECT_EQ(sizing.Decide(26 * kMB, rates, 131072, 31.25 * kMB).bytes[0], 131072u);
  // A quarter of the mean: the time rule.
  EXPECT_EQ(sizing.Decide(7.8 * kMB, rates, 131072, 31.25 * kMB).bytes[0], 32768u);
}

TEST(LayerDecompositionTest, PiecesAreOnTheNestingLadder) {
  DecompositionParams p;
  p.min_piece_bytes = 32768;
  p.max_piece_bytes = 1 << 20;
  EXPECT_EQ(LayerPieceBytes(1 << 20, 1, p), 1u << 20);
  EXPECT_EQ(LayerPieceBytes(1 << 20, 4, p), 262144u);
  EXPECT_EQ(LayerPieceBytes(1 << 20, 3, p), 262144u);  // 349526 wanted: the ladder's step below
  EXPECT_EQ(LayerPieceBytes(1 << 20, 1000, p), 32768u);  // never below the least piece
  EXPECT_EQ(LayerPieceBytes(8 << 20, 1, p), 1u << 20);   // never above the partition
}

TEST(LayerDecompositionTest, LayerTimesTakeEachTensorsFirstReadyAndTheSpan) {
  LayerTimes times;
  times.OnReady(7, 4000, 1000);   // the last layer: ready first
  times.OnReady(7, 4000, 1500);   // its second partition: not a new ready
  times.OnReady(3, 8000, 4000);
  times.OnReady(0, 2000, 9000);   // the first layer: ready last, nothing hides it
  std::vector<uint32_t> tensors;
  double span = 0;
  const std::vector<LayerTransfer> layers = times.Take(&tensors, &span);
  EXPECT_EQ(tensors, (std::vector<uint32_t>{7, 3, 0}));
  ASSERT_EQ(layers.size(), 3u);
  EXPECT_EQ(layers[0].bytes, 4000u);
  EXPECT_DOUBLE_EQ(layers[0].hidden_us, 8000);
  EXPECT_DOUBLE_EQ(layers[1].hidden_us, 5000);
  EXPECT_DOUBLE_EQ(layers[2].hidden_us, 0);
  EXPECT_DOUBLE_EQ(span, 8000);
  // Taken: the next iteration starts empty.
  EXPECT_TRUE(times.Take(&tensors, &span).empty());
}

TEST(LayerDecompositionTest, AnExposedLargeLayerIsCutAndAHiddenOneIsNot) {
  // 125 bytes/us (1 Gbit/s), 30 us a piece. Layer 0 (ready last, 1 MiB) is exposed: its
  // tail shrinks with its pieces. Layer 1 (1 MiB, hidden behind 100 ms of compute) is sent
  // long before the end: cutting it would only cost.
  DecompositionParams p;
  p.bytes_per_us = 125;
  p.piece_overhead_us = 30;
  const std::vector<LayerTransfer> layers = {{1 << 20, 0}, {1 << 20, 100000}};
  const Decomposition d = DecomposeLayers(layers, p);
  EXPECT_GT(d.pieces[0], 1);
  EXPECT_EQ(d.pieces[1], 1);
  EXPECT_LT(d.predicted_end_us, PredictEnd(layers, {1, 1}, p));
}

}  // namespace
}  // namespace ferry
