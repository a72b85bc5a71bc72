#include "worker/tensor_catalog.h"

#include <gtest/gtest.h>

#include "common/transport/message.h"
#include "common/util/status.h"

namespace ferry {
namespace {

TEST(TensorCatalogTest, DeclarationsAreNumberedInOrderAndCutInTheCurrentLayout) {
  TensorCatalog c(1024, {1.0, 1.0});
  TensorInfo& a = c.Declare("a", DataType::kFloat32, {1000}, std::nullopt);  // 4000 bytes
  TensorInfo& b = c.Declare("b", DataType::kFloat64, {2, 3}, 7);
  EXPECT_EQ(a.id, 0u);
  EXPECT_EQ(b.id, 1u);
  EXPECT_EQ(a.priority, 0);
  EXPECT_EQ(b.priority, 7);
  ASSERT_EQ(a.cuts[0].parts.size(), 4u);
  EXPECT_EQ(a.cuts[0].rounds, (std::vector<uint32_t>{0, 0, 0, 0}));
  uint64_t bytes = 0;
  for (const auto& p : a.cuts[0].parts) bytes += p.bytes;
  EXPECT_EQ(bytes, 4000u);
  EXPECT_EQ(c.Find("b"), &b);
  EXPECT_EQ(c.Find("c"), nullptr);
  EXPECT_EQ(c.NameOf(1), "b");
  EXPECT_EQ(c.NameOf(9), "?");
  const std::vector<uint64_t> placed = c.PlacedBytes();
  EXPECT_EQ(placed[0] + placed[1], 4000u + 48u);
}

TEST(TensorCatalogTest, ARedeclarationMustMatchAndMayChangeThePriority) {
  TensorCatalog c(1024, {1.0});
  c.Declare("w", DataType::kFloat32, {4, 4}, std::nullopt);
  EXPECT_EQ(c.Declare("w", DataType::kFloat32, {16}, 3).priority, 3);
  try {
    c.Declare("w", DataType::kFloat32, {17}, std::nullopt);
    FAIL() << "accepted";
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(),
                 "tensor 'w' was declared as float32[4,4] and is now used as float32[17]");
  }
  EXPECT_THROW(c.Declare("x", DataType::kFloat32, {-1}, std::nullopt), FerryError);
  EXPECT_EQ(c.size(), 1u);
}

TEST(TensorCatalogTest, SwitchingBackReusesALayoutWithItsRounds) {
  TensorCatalog c(1024, {1.0, 2.0});
  TensorInfo& t = c.Declare("t", DataType::kFloat32, {1024}, std::nullopt);
  t.cuts[0].rounds[0] = 5;
  EXPECT_EQ(c.SwitchPartitionBytes(2048), 1u);
  EXPECT_EQ(c.partition_bytes(), 2048u);
  EXPECT_EQ(t.cuts[1].parts.size(), 2u);
  TensorInfo& u = c.Declare("u", DataType::kFloat32, {10}, std::nullopt);  // cut in layout 1 only
  EXPECT_EQ(u.cuts.size(), 2u);
  EXPECT_EQ(c.SwitchPartitionBytes(1024), 0u);
  EXPECT_EQ(t.cuts[0].rounds[0], 5u);
  EXPECT_FALSE(u.cuts[0].parts.empty());  // cut when switching back
  c.ResetRounds();
  EXPECT_EQ(t.cuts[0].rounds[0], 0u);
}

TEST(TensorCatalogTest, EveryWorkerComputesTheSamePlacement) {
  auto cut = [] {
    TensorCatalog c(4096, {1.0, 1.0, 2.0});
    for (int i = 0; i < 20; ++i) c.Declare(StrCat("t", i), DataType::kFloat32, {1000 + i * 37}, {});
    c.SwitchPartitionBytes(8192);
    std::vector<int> servers;
    for (uint32_t i = 0; i < c.size(); ++i) {
      for (const auto& p : c.at(i).cuts[1].parts) servers.push_back(p.server);
    }
    return servers;
  };
  EXPECT_EQ(cut(), cut());
}

}  // namespace
}  // namespace ferry
