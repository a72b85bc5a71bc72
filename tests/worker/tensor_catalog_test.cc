#include "worker/tensor_catalog.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "common/transport/message.h"
#include "common/util/status.h"

namespace ferry {
namespace {

TEST(TensorCatalogTest, DeclarationsAreNumberedInOrderAndCutInTheCurrentLayout) {
  TensorCatalog c(1024, {1.0, 1.0});
  TensorInfo& a = *c.Declare("a", DataType::kFloat32, {1000}, std::nullopt);  // 4000 bytes
  TensorInfo& b = *c.Declare("b", DataType::kFloat64, {2, 3}, 7);
  EXPECT_EQ(a.id, 0u);
  EXPECT_EQ(b.id, 1u);
  EXPECT_EQ(a.priority, 0);
  EXPECT_EQ(b.priority, 7);
  ASSERT_EQ(a.cuts[0].parts.size(), 4u);
  EXPECT_EQ(a.cuts[0].rounds, (std::vector<uint32_t>{0, 0, 0, 0}));
  uint64_t bytes = 0;
  for (const auto& p : a.cuts[0].parts) bytes += p.bytes;
  EXPECT_EQ(bytes, 4000u);
  EXPECT_EQ(c.Find("b").get(), &b);
  EXPECT_EQ(c.Find("c"), nullptr);
  EXPECT_EQ(c.NameOf(1), "b");
  EXPECT_EQ(c.NameOf(9), "?");
  const std::vector<uint64_t> placed = c.PlacedBytes();
  EXPECT_EQ(placed[0] + placed[1], 4000u + 48u);
}

TEST(TensorCatalogTest, TheSameSizeIsTheSameDeclarationAndMayChangeThePriority) {
  TensorCatalog c(1024, {1.0});
  auto w = c.Declare("w", DataType::kFloat32, {4, 4}, std::nullopt);
  EXPECT_EQ(c.Declare("w", DataType::kFloat32, {16}, 3), w);
  EXPECT_EQ(w->priority, 3);
  EXPECT_THROW(c.Declare("x", DataType::kFloat32, {-1}, std::nullopt), FerryError);
  EXPECT_EQ(c.size(), 1u);
  EXPECT_EQ(c.next_id(), 1u);
}

TEST(TensorCatalogTest, AnotherSizeOrDtypeIsANewDeclarationWithFreshKeys) {
  TensorCatalog c(1024, {1.0, 1.0});
  auto w = c.Declare("w", DataType::kFloat32, {4, 4}, 5);
  auto v = c.Declare("v", DataType::kFloat32, {100}, std::nullopt);
  std::shared_ptr<TensorInfo> old;
  auto w2 = c.Declare("w", DataType::kFloat32, {17}, std::nullopt, &old);
  EXPECT_EQ(old, w);
  EXPECT_TRUE(w->superseded);
  EXPECT_EQ(w2->id, 2u);               // the next id: keys no server has seen
  EXPECT_EQ(w2->priority, 5);          // the name keeps its priority
  EXPECT_EQ(c.Find("w"), w2);
  EXPECT_EQ(c.FindId(0), w.get());     // still held until it is retired
  EXPECT_EQ(w->cuts[0].rounds.size(), 1u);  // its operations still run on its cut
  const std::vector<uint64_t> placed = c.PlacedBytes();
  EXPECT_EQ(placed[0] + placed[1], 400u + 68u);  // w's 64 bytes were released
  c.Retire(0);
  EXPECT_EQ(c.FindId(0), nullptr);
  EXPECT_EQ(c.NameOf(0), "?");
  old.reset();
  auto w3 = c.Declare("w", DataType::kFloat64, {17}, std::nullopt, &old);  // another dtype
  EXPECT_EQ(old, w2);
  EXPECT_EQ(w3->id, 3u);
  EXPECT_EQ(c.size(), 3u);  // v, w2 (superseded, not retired), w3
}

TEST(TensorCatalogTest, ReleasedBytesLeaveThePlacementAsIfNeverPlaced) {
  // Declaring a, re-declaring it, then b places b as if a's first size never existed
  // beside it: every worker that re-declares at the same point places b alike.
  TensorCatalog with(1024, {1.0, 1.0, 1.0});
  with.Declare("a", DataType::kFloat32, {700}, std::nullopt);
  with.Declare("a", DataType::kFloat32, {300}, std::nullopt);
  auto b = with.Declare("b", DataType::kFloat32, {2000}, std::nullopt);
  TensorCatalog without(1024, {1.0, 1.0, 1.0});
  without.Declare("a", DataType::kFloat32, {300}, std::nullopt);
  auto b2 = without.Declare("b", DataType::kFloat32, {2000}, std::nullopt);
  std::vector<int> servers, servers2;
  for (const auto& p : b->cuts[0].parts) servers.push_back(p.server);
  for (const auto& p : b2->cuts[0].parts) servers2.push_back(p.server);
  EXPECT_EQ(servers, servers2);
  EXPECT_EQ(with.PlacedBytes(), without.PlacedBytes());
}

TEST(TensorCatalogTest, AnUndoneDeclarationIsDeclaredAfreshAtItsNextUse) {
  TensorCatalog c(1024, {1.0, 1.0});
  auto x = c.Declare("x", DataType::kFloat32, {10}, std::nullopt);
  c.Undeclare(*x);
  c.Undeclare(*x);  // no-op
  EXPECT_EQ(c.Find("x"), nullptr);
  EXPECT_EQ(c.PlacedBytes(), (std::vector<uint64_t>{0, 0}));
  EXPECT_EQ(c.Declare("x", DataType::kFloat32, {10}, std::nullopt)->id, 1u);
}

TEST(TensorCatalogTest, AsynchronousTrainingKeepsLayoutsFixed) {
  TensorCatalog c(1024, {1.0}, /*fixed_layouts=*/true);
  c.Declare("w", DataType::kFloat32, {4, 4}, std::nullopt);
  try {
    c.Declare("w", DataType::kFloat32, {17}, std::nullopt);
    FAIL() << "accepted";
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("tensor 'w' was declared as float32[4,4] and is now "
                                         "used as float32[17]: in asynchronous training"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(c.size(), 1u);
}

TEST(TensorCatalogTest, SwitchingBackReusesALayoutWithItsRounds) {
  TensorCatalog c(1024, {1.0, 2.0});
  TensorInfo& t = *c.Declare("t", DataType::kFloat32, {1024}, std::nullopt);
  t.cuts[0].rounds[0] = 5;
  EXPECT_EQ(c.SwitchPartitionBytes(2048), 1u);
  EXPECT_EQ(c.partition_bytes(), 2048u);
  EXPECT_EQ(t.cuts[1].parts.size(), 2u);
  TensorInfo& u = *c.Declare("u", DataType::kFloat32, {10}, std::nullopt);  // cut in layout 1 only
  c.Declare("s", DataType::kFloat32, {10}, std::nullopt);
  auto s2 = c.Declare("s", DataType::kFloat32, {20}, std::nullopt);  // s superseded
  EXPECT_EQ(u.cuts.size(), 2u);
  EXPECT_EQ(c.SwitchPartitionBytes(1024), 0u);
  EXPECT_EQ(t.cuts[0].rounds[0], 5u);
  EXPECT_FALSE(u.cuts[0].parts.empty());  // cut when switching back
  EXPECT_FALSE(s2->cuts[0].parts.empty());
  EXPECT_EQ(c.FindId(2)->cuts.size(), 2u);  // the superseded s: never cut in layout 0
  c.ResetRounds();
  EXPECT_EQ(t.cuts[0].rounds[0], 0u);
}

TEST(TensorCatalogTest, EveryWorkerComputesTheSamePlacement) {
  auto cut = [] {
    TensorCatalog c(4096, {1.0, 1.0, 2.0});
    for (int i = 0; i < 20; ++i) c.Declare(StrCat("t", i), DataType::kFloat32, {1000 + i * 37}, {});
    c.SwitchPartitionBytes(8192);
    std::vector<int> servers;
    for (uint32_t i = 0; i < c.next_id(); ++i) {
      for (const auto& p : c.FindId(i)->cuts[1].parts) servers.push_back(p.server);
    }
    return servers;
  };
  EXPECT_EQ(cut(), cut());
}

// Every partition of every current declaration in layout `gen`, as (id, index) -> server.
std::map<std::pair<uint32_t, uint32_t>, int> Servers(TensorCatalog& c, uint32_t gen) {
  std::map<std::pair<uint32_t, uint32_t>, int> out;
  for (uint32_t i = 0; i < c.next_id(); ++i) {
    const TensorInfo* t = c.FindId(i);
    if (t == nullptr || t->superseded || t->cuts.size() <= gen) continue;
    for (const auto& p : t->cuts[gen].parts) out[{i, p.index}] = p.server;
  }
  return out;
}

TEST(TensorCatalogTest, AServerThatLeftHasItsPartitionsPlacedAgainAndNoOtherMoves) {
  auto catalog = [] {
    auto c = std::make_unique<TensorCatalog>(4096, std::vector<double>{1.0, 1.0, 2.0, 1.0});
    for (int i = 0; i < 30; ++i) {
      c->Declare(StrCat("t", i), DataType::kFloat32, {700 + i * 311}, {});
    }
    c->SwitchPartitionBytes(16384);  // two layouts, both to be moved off server 1
    return c;
  };
  std::unique_ptr<TensorCatalog> c = catalog();
  const auto before0 = Servers(*c, 0), before1 = Servers(*c, 1);
  size_t on_1 = 0;
  for (const auto* m : {&before0, &before1}) {
    for (const auto& [part, server] : *m) on_1 += server == 1;
  }
  ASSERT_GT(on_1, 0u);
  const std::vector<double> survivors = {1.0, 0.0, 2.0, 1.0};
  EXPECT_EQ(c->SetServerWeights(survivors), on_1);
  for (uint32_t gen : {0u, 1u}) {
    const auto& before = gen == 0 ? before0 : before1;
    const auto after = Servers(*c, gen);
    ASSERT_EQ(after.size(), before.size());
    for (const auto& [part, server] : after) {
      EXPECT_NE(server, 1);
      if (before.at(part) != 1) {
        EXPECT_EQ(server, before.at(part)) << "a partition moved";
      }
    }
  }
  // The current layout's bytes follow the survivors' weights within a partition each.
  c->SwitchPartitionBytes(16384);
  const std::vector<uint64_t> bytes = c->PlacedBytes();
  uint64_t total = 0;
  for (uint64_t b : bytes) total += b;
  EXPECT_EQ(bytes[1], 0u);
  for (int s : {0, 2, 3}) {
    EXPECT_NEAR(static_cast<double>(bytes[s]), total * survivors[s] / 4.0, 16384.0) << s;
  }
  // New declarations and new layouts avoid it too.
  c->Declare("late", DataType::kFloat32, {100000}, {});
  c->SwitchPartitionBytes(8192);
  for (uint32_t gen : {1u, 2u}) {
    for (const auto& [part, server] : Servers(*c, gen)) EXPECT_NE(server, 1);
  }
  // Every worker moves the same partitions to the same servers.
  std::unique_ptr<TensorCatalog> other = catalog();
  other->SetServerWeights(survivors);
  c = catalog();
  c->SetServerWeights(survivors);
  EXPECT_EQ(Servers(*c, 0), Servers(*other, 0));
  EXPECT_EQ(Servers(*c, 1), Servers(*other, 1));
}

// The catalog of a running worker, with a history (a re-declaration, a second layout, a
// server that left), and the same catalog loaded from its snapshot into a fresh one (a
// worker joining an elastic job): the same ids, cuts, placements and digest, and what is
// declared next is numbered and placed alike.
void ExpectSameCuts(TensorCatalog& a, TensorCatalog& b, const std::string& name) {
  auto ta = a.Find(name);
  auto tb = b.Find(name);
  ASSERT_TRUE(ta && tb) << name;
  EXPECT_EQ(ta->id, tb->id) << name;
  EXPECT_EQ(ta->hash, tb->hash) << name;
  EXPECT_EQ(ta->priority, tb->priority) << name;
  ASSERT_EQ(ta->cuts.size(), tb->cuts.size()) << name;
  for (size_t gen = 0; gen < ta->cuts.size(); ++gen) {
    ASSERT_EQ(ta->cuts[gen].parts.size(), tb->cuts[gen].parts.size()) << name << " layout " << gen;
    for (size_t i = 0; i < ta->cuts[gen].parts.size(); ++i) {
      const PartitionSpec& pa = ta->cuts[gen].parts[i];
      const PartitionSpec& pb = tb->cuts[gen].parts[i];
      EXPECT_EQ(pa.index, pb.index);
      EXPECT_EQ(pa.offset, pb.offset);
      EXPECT_EQ(pa.bytes, pb.bytes);
      EXPECT_EQ(pa.server, pb.server) << name << " layout " << gen << " partition " << i;
    }
  }
}

TEST(TensorCatalogTest, ASnapshotLoadedElsewhereIsTheSameCatalog) {
  const std::vector<double> weights = {0.5, 0.3, 0.2};
  TensorCatalog running(4096, weights);
  running.Declare("a", DataType::kFloat32, {3000}, std::nullopt);
  running.Declare("b", DataType::kFloat16, {10, 700}, 7);
  running.Declare("c", DataType::kInt64, {5}, std::nullopt);
  running.Declare("a", DataType::kFloat32, {4000}, std::nullopt);  // a re-declaration
  running.SwitchPartitionBytes(16384);
  running.Declare("d", DataType::kFloat64, {9000}, std::nullopt);
  running.SwitchPartitionBytes(4096);
  running.SetServerWeights({0.6, 0.0, 0.4});  // server 1 left: its partitions moved
  running.Retire(0);                          // the superseded "a" is gone

  TensorCatalog joiner(1 << 20, {1.0, 1.0, 1.0});
  joiner.Declare("mine", DataType::kFloat32, {1}, std::nullopt);  // replaced by the load
  joiner.Load(running.Snapshot());
  EXPECT_EQ(joiner.Digest(), running.Digest());
  EXPECT_EQ(joiner.next_id(), running.next_id());
  EXPECT_EQ(joiner.layout(), running.layout());
  EXPECT_EQ(joiner.partition_bytes(), 4096u);
  EXPECT_EQ(joiner.PlacedBytes(), running.PlacedBytes());
  EXPECT_EQ(joiner.Find("mine"), nullptr);
  for (const char* name : {"a", "b", "c", "d"}) ExpectSameCuts(running, joiner, name);
  // From here on both decide alike: a new name, a re-declaration, another layout.
  for (TensorCatalog* c : {&running, &joiner}) {
    c->Declare("e", DataType::kFloat32, {12345}, std::nullopt);
    c->Declare("b", DataType::kFloat16, {10, 900}, std::nullopt);
    c->SwitchPartitionBytes(16384);
  }
  for (const char* name : {"a", "b", "c", "d", "e"}) ExpectSameCuts(running, joiner, name);
  EXPECT_EQ(joiner.Digest(), running.Digest());
}

TEST(TensorCatalogTest, ASnapshotThatDoesNotAddUpIsRefusedAndChangesNothing) {
  TensorCatalog running(4096, {1.0, 1.0});
  running.Declare("a", DataType::kFloat32, {3000}, std::nullopt);
  const proto::CatalogSnapshot good = running.Snapshot();
  TensorCatalog joiner(4096, {1.0, 1.0});
  joiner.Declare("x", DataType::kFloat32, {10}, std::nullopt);
  const uint64_t before = joiner.Digest();
  auto refused = [&](proto::CatalogSnapshot s, const char* what) {
    try {
      joiner.Load(s);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const FerryError& e) {
      EXPECT_EQ(e.code(), ErrorCode::kBadMessage) << e.what();
    }
    EXPECT_EQ(joiner.Digest(), before) << what;
  };
  proto::CatalogSnapshot s = good;
  s.mutable_tensors(0)->mutable_cuts(0)->mutable_parts(0)->set_server(2);
  refused(s, "a partition on a server that does not exist");
  s = good;
  s.mutable_tensors(0)->mutable_cuts(0)->mutable_parts(0)->set_bytes(1);
  refused(s, "partitions that do not cover the tensor");
  s = good;
  s.add_server_weights(1.0);
  refused(s, "another number of servers");
  s = good;
  s.set_next_id(0);
  refused(s, "an id at or above the next id");
  s = good;
  s.set_layout(3);
  refused(s, "a current layout that does not exist");
}

}  // namespace
}  // namespace ferry
