// Tests of the placement-balance benchmark's pieces (bench/placement_balance.h): the
// workload CSV reader, forward order, BytePS's key hashing, and the balance of small
// workloads worked out by hand.

#include "bench/placement_balance.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/util/error.h"

namespace ferry::bench {
namespace {

// A temporary file with `text`, removed at the end of the test.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    char tmpl[] = "/tmp/ferry-balance-XXXXXX";
    int fd = mkstemp(tmpl);
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = tmpl;
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ReadTensorCsvTest, ReadsRowsNamesAndBytes) {
  TempFile f(
      "# toy: tensor -> row mapping (fp32 bytes)\n"
      "row,tensor,numel,bytes\n"
      "1,fc.weight,1000,4000\n"
      "1,fc.bias,10,40\r\n"
      "2,conv.weight,27,108\n");
  auto t = ReadTensorCsv(f.path());
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].row, 1);
  EXPECT_EQ(t[0].name, "fc.weight");
  EXPECT_EQ(t[0].bytes, 4000u);
  EXPECT_EQ(t[1].name, "fc.bias");
  EXPECT_EQ(t[1].bytes, 40u);
  EXPECT_EQ(t[2].row, 2);
  EXPECT_EQ(t[2].bytes, 108u);
}

void ExpectRefused(const std::string& text, const std::string& words) {
  TempFile f(text);
  try {
    ReadTensorCsv(f.path());
    ADD_FAILURE() << "accepted: " << text;
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(f.path()), std::string::npos) << e.what();
  }
}

TEST(ReadTensorCsvTest, RefusesBadLinesNamingFileAndLine) {
  ExpectRefused("row,tensor,numel,bytes\n1,a,10\n",
                ":2: expected row,tensor,numel,bytes, got '1,a,10'");
  ExpectRefused("1,a,ten,40\n", ":1: expected row,tensor,numel,bytes");
  ExpectRefused("0,a,10,40\n", ":1: expected");  // rows start at 1
  ExpectRefused("1,a,10,-40\n", ":1: expected");
  ExpectRefused("1,a,10,41\n", ":1: tensor 'a' has 10 elements but 41 bytes");
  ExpectRefused("# nothing\nrow,tensor,numel,bytes\n", "no tensors");
  try {
    ReadTensorCsv("/nonexistent/ferry/x_tensors.csv");
    ADD_FAILURE();
  } catch (const FerryError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read /nonexistent/ferry/x_tensors.csv"),
              std::string::npos);
  }
}

TEST(ForwardOrderTest, ReversesRowsKeepingFileOrderWithinARow) {
  std::vector<TensorRow> backprop = {{1, "fc.weight", 8},    {1, "fc.bias", 4},
                                     {2, "conv2.weight", 8}, {2, "bn2.weight", 4},
                                     {2, "bn2.bias", 4},     {3, "conv1.weight", 8}};
  std::vector<std::string> names;
  for (const auto& t : ForwardOrder(backprop)) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"conv1.weight", "conv2.weight", "bn2.weight",
                                             "bn2.bias", "fc.weight", "fc.bias"}));
}

TEST(BytePSHashTest, KeysAndDjb2OfTheDecimalKey) {
  EXPECT_EQ(BytePSKey(0, 0), 0u);
  EXPECT_EQ(BytePSKey(1, 0), 65536u);
  EXPECT_EQ(BytePSKey(3, 2), 196610u);
  // h = 5381; h = h * 33 + c: "0" -> 5381 * 33 + '0' = 177621.
  EXPECT_EQ(Djb2OfDecimal(0), 177621u);
  EXPECT_EQ(Djb2OfDecimal(1), 177622u);
  EXPECT_EQ(Djb2OfDecimal(65536), 210653553582u);
  EXPECT_EQ(Djb2OfDecimal(196610), 6951376374012u);
  // Wraps modulo 2^64 like BytePS's uint64_t.
  EXPECT_EQ(Djb2OfDecimal(12345678901234u), 3046910961280192252u);
  EXPECT_EQ(BytePSServer(0, 8), 5);
  EXPECT_EQ(BytePSServer(65536, 8), 6);
  EXPECT_EQ(BytePSServer(65537, 4), 3);
  EXPECT_EQ(BytePSServer(196610, 2), 0);
}

TEST(BalanceTest, SmallWorkloadByHand) {
  // float32 tensors of 5000, 300, 9000 and 40 bytes in partitions of 4096 bytes:
  // 4096 + 904 | 300 | 4096 + 4096 + 808 | 40 (7 partitions, 14340 bytes).
  const std::vector<uint64_t> tensors = {5000, 300, 9000, 40};
  Balance ferry2 = FerryBalance(tensors, 2, 4096);
  EXPECT_EQ(ferry2.partitions, 7u);
  // Least loaded first: 4096->0, 904->1, 300->1, 4096->1, 4096->0, 808->1, 40->1.
  EXPECT_EQ(ferry2.loads, (std::vector<uint64_t>{8192, 6148}));
  EXPECT_DOUBLE_EQ(ferry2.MaxOverMean(), 8192.0 / 7170.0);
  Balance ferry3 = FerryBalance(tensors, 3, 4096);
  EXPECT_EQ(ferry3.loads, (std::vector<uint64_t>{4904, 5000, 4436}));

  // BytePS: keys 0, 1 | 65536 | 131072, 131073, 131074 | 196608 by djb2.
  Balance byteps2 = BytePSBalance(tensors, 2, 4096);
  EXPECT_EQ(byteps2.partitions, 7u);
  EXPECT_EQ(byteps2.loads, (std::vector<uint64_t>{5300, 9040}));
  Balance byteps3 = BytePSBalance(tensors, 3, 4096);
  EXPECT_EQ(byteps3.loads, (std::vector<uint64_t>{8492, 1712, 4136}));

  // Largest first: 4096 x 3, then 904 -> 0, 808 -> 1, 300 -> 2, 40 -> 2.
  Balance lpt3 = LargestFirstBalance(tensors, 3, 4096);
  EXPECT_EQ(lpt3.loads, (std::vector<uint64_t>{5000, 4904, 4436}));
}

TEST(BalanceTest, EqualTensorsSpreadEvenly) {
  // 64 tensors of one partition each on 8 servers: exactly 8 each, max/mean 1.
  std::vector<uint64_t> tensors(64, 4096);
  Balance b = FerryBalance(tensors, 8, 4096);
  EXPECT_EQ(b.loads, std::vector<uint64_t>(8, 8 * 4096));
  EXPECT_DOUBLE_EQ(b.MaxOverMean(), 1.0);
}

}  // namespace
}  // namespace ferry::bench
