// ProcessSets (worker/process_sets.h): ids in order or named, each set's own key space,
// members only, a name in one set, the global set's partition size, and the refusals'
// messages.

#include "worker/process_sets.h"

#include <gtest/gtest.h>

#include "common/types/process_set.h"
#include "common/util/error.h"

namespace ferry {
namespace {

std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const FerryError& e) {
    return e.what();
  }
  return "";
}

TEST(ProcessSetsTest, EachSetDeclaresInItsOwnKeySpaceWithItsMembers) {
  ProcessSets sets(4096, {1.0, 1.0});
  EXPECT_EQ(sets.Add({3, 1}, 4), 1);
  EXPECT_EQ(sets.Add({0, 1, 2}, 4), 2);
  EXPECT_EQ(sets.Ranks(1), (std::vector<int>{1, 3}));
  // The same name in two sets would be two tensors: a name belongs to one set.
  auto a = sets.Declare(1, 3, "w", DataType::kFloat32, {1000}, std::nullopt, nullptr);
  auto b = sets.Declare(2, 0, "v", DataType::kFloat32, {1000}, std::nullopt, nullptr);
  EXPECT_EQ(a->id, ProcessSetFirstId(1));
  EXPECT_EQ(b->id, ProcessSetFirstId(2));
  EXPECT_EQ(a->set_size, 2);
  EXPECT_TRUE(IsProcessSetMember(a->members, 1) && IsProcessSetMember(a->members, 3));
  EXPECT_FALSE(IsProcessSetMember(a->members, 0));
  EXPECT_EQ(ProcessSetRanks(b->members), "0, 1, 2");
  EXPECT_EQ(sets.SetOf("w"), 1);
  EXPECT_EQ(sets.OfId(a->id), sets.OfName("w"));
  EXPECT_EQ(sets.OfId(5), nullptr);  // the global set's
  // Both sets' first partition goes to server 0: their placements are their own.
  EXPECT_EQ(a->cuts[0].parts[0].server, 0);
  EXPECT_EQ(b->cuts[0].parts[0].server, 0);
}

TEST(ProcessSetsTest, EverySetFollowsTheGlobalPartitionSize) {
  ProcessSets sets(4096, {1.0, 1.0});
  ASSERT_EQ(sets.Add({0, 1}, 2), 1);
  auto a = sets.Declare(1, 0, "w", DataType::kFloat32, {4096}, std::nullopt, nullptr);  // 16 KiB
  EXPECT_EQ(a->cuts[0].parts.size(), 4u);
  sets.SwitchPartitionBytes(8192);
  const TensorCatalog& catalog = *sets.OfName("w");
  EXPECT_EQ(catalog.partition_bytes(), 8192u);
  ASSERT_EQ(a->cuts.size(), 2u);
  EXPECT_EQ(a->cuts[catalog.layout()].parts.size(), 2u);
  EXPECT_EQ(a->cuts[0].parts.size(), 4u) << "the old layout's cut stays for its rounds";
  // A set added later starts in the size in force.
  ASSERT_EQ(sets.Add({1}, 2), 2);
  auto b = sets.Declare(2, 1, "v", DataType::kFloat32, {4096}, std::nullopt, nullptr);
  EXPECT_EQ(sets.OfName("v")->partition_bytes(), 8192u);
  EXPECT_EQ(b->cuts[sets.OfName("v")->layout()].parts.size(), 2u);
}

TEST(ProcessSetsTest, RefusalsNameTheSetAndTheRank) {
  ProcessSets sets(4096, {1.0});
  EXPECT_NE(ErrorOf([&] { sets.Add({}, 4); }).find("needs a rank"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { sets.Add({0, 4}, 4); }).find("rank 4 is not a worker rank (0..3)"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { sets.Add({1, 1}, 4); }).find("rank 1 is named twice"),
            std::string::npos);
  const int id = sets.Add({0, 1}, 4);
  EXPECT_NE(ErrorOf([&] {
              sets.Declare(id, 2, "w", DataType::kFloat32, {4}, std::nullopt, nullptr);
            }).find("rank 2 is not a member of process set 1 {0, 1}"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              sets.Declare(7, 0, "w", DataType::kFloat32, {4}, std::nullopt, nullptr);
            }).find("process set 7 is not registered"),
            std::string::npos);
  const int other = sets.Add({0}, 4);
  sets.Declare(id, 0, "w", DataType::kFloat32, {4}, std::nullopt, nullptr);
  EXPECT_NE(ErrorOf([&] {
              sets.Declare(other, 0, "w", DataType::kFloat32, {4}, std::nullopt, nullptr);
            }).find("belongs to process set 1, not to process set 2"),
            std::string::npos);
  // Named ids (a torch.distributed group's): in their own range, once.
  EXPECT_EQ(sets.Add({2, 3}, 4, 130), 130);
  EXPECT_NE(ErrorOf([&] { sets.Add({2}, 4, 130); }).find("id 130 is taken"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { sets.Add({2}, 4, 5); }).find("outside 128..255"), std::string::npos);
  sets.Remove(id);
  EXPECT_EQ(sets.SetOf("w"), 0);
  EXPECT_NE(ErrorOf([&] { sets.Remove(id); }).find("is not registered"), std::string::npos);
}

}  // namespace
}  // namespace ferry
