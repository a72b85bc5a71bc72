// Tests of the GPU summation engine (server/gpu): the device kernel and GpuSummer
// against the CPU kernels (common/reduce), bit for bit, for every data type, odd
// lengths, aligned and misaligned buffers, many keys on several streams and several
// summers on several threads, and the buffer-ownership invariants of gpu_summer.h.
// Every test needs a GPU: without one each is skipped with the reason (and fails under
// FERRY_REQUIRE_GPU=1, as scripts/gpu-checks runs them).

#include "server/gpu/gpu_summer.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "common/reduce/reduce.h"
#include "common/util/error.h"
#include "server/gpu/sum_kernels.h"
#include "tests/server/gpu/gpu_test_support.h"

namespace ferry {
namespace {

const DataType kAllTypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                              DataType::kFloat64, DataType::kInt32,   DataType::kInt64};
// Odd and even lengths around the 16-byte vectors of every type, and a few large ones.
const size_t kCounts[] = {1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 65, 127, 1000, 4097, 100003};

using Bytes = std::vector<uint8_t>;

// ---------------------------------------------------------------------------------
// Values and comparison (as tests/common/reduce_test.cc: NaNs compare by class, as the
// GPU returns the canonical NaN where x86 keeps a payload).

bool IsNaN(DataType t, const uint8_t* p) {
  switch (t) {
    case DataType::kFloat32: { float f; std::memcpy(&f, p, 4); return std::isnan(f); }
    case DataType::kFloat64: { double d; std::memcpy(&d, p, 8); return std::isnan(d); }
    case DataType::kFloat16: { uint16_t h; std::memcpy(&h, p, 2); return (h & 0x7C00) == 0x7C00 && (h & 0x3FF); }
    case DataType::kBFloat16: { uint16_t b; std::memcpy(&b, p, 2); return (b & 0x7F80) == 0x7F80 && (b & 0x7F); }
    default: return false;
  }
}

// Random bit patterns: for the 16-bit types every pattern (NaN, Inf, subnormals, ties);
// for float32/64 mostly nearby exponents, so that sums round, and now and then any
// pattern; integers wrap around.
void FillRandom(DataType t, uint8_t* p, size_t count, std::mt19937_64& rng) {
  const size_t size = DataTypeSize(t);
  for (size_t i = 0; i < count; ++i) {
    uint64_t r = rng();
    if (t == DataType::kFloat32 && (r >> 60) != 0) {
      r = (r & 0x807FFFFFu) | ((120u + ((r >> 32) & 15u)) << 23);
    } else if (t == DataType::kFloat64 && (r >> 60) != 0) {
      r = (r & 0x800FFFFFFFFFFFFFull) | ((1016ull + ((r >> 52) & 15u)) << 52);
    }
    std::memcpy(p + i * size, &r, size);
  }
}

// Element-by-element comparison; reports the first differences with their bits.
::testing::AssertionResult SameSum(DataType t, const uint8_t* got, const uint8_t* want,
                                   size_t count) {
  const size_t size = DataTypeSize(t);
  size_t bad = 0, numbers = 0;
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* g = got + i * size;
    const uint8_t* w = want + i * size;
    const bool same = IsNaN(t, w) ? IsNaN(t, g) : std::memcmp(g, w, size) == 0;
    numbers += IsNaN(t, w) ? 0 : 1;
    if (same) continue;
    if (bad++ == 0) result = ::testing::AssertionFailure();
    if (bad <= 5) {
      uint64_t gv = 0, wv = 0;
      std::memcpy(&gv, g, size);
      std::memcpy(&wv, w, size);
      result << DataTypeName(t) << " element " << i << " of " << count << ": GPU 0x" << std::hex
             << gv << ", CPU 0x" << wv << std::dec << "\n";
    }
  }
  if (bad > 0) return result << bad << " elements differ";
  // Most sums must be numbers, or the comparison would prove little (a few elements
  // may all be NaN by chance).
  if (count >= 64 && numbers * 2 < count) {
    return ::testing::AssertionFailure() << "only " << numbers << " of " << count
                                         << " expected sums are numbers";
  }
  return result;
}

// Stores the small integer `v` (exact in every type) as element i.
void SetElement(DataType t, uint8_t* p, size_t i, double v) {
  const size_t size = DataTypeSize(t);
  uint64_t bits = 0;
  switch (t) {
    case DataType::kFloat32: { const float f = static_cast<float>(v); std::memcpy(&bits, &f, 4); break; }
    case DataType::kFloat64: std::memcpy(&bits, &v, 8); break;
    case DataType::kFloat16: bits = FloatToHalf(static_cast<float>(v)); break;
    case DataType::kBFloat16: bits = FloatToBFloat16(static_cast<float>(v)); break;
    case DataType::kInt32: bits = static_cast<uint32_t>(static_cast<int32_t>(v)); break;
    case DataType::kInt64: bits = static_cast<uint64_t>(static_cast<int64_t>(v)); break;
  }
  std::memcpy(p + i * size, &bits, size);
}

// The CPU engine's round: the first push is the sum, each later one is added.
Bytes CpuRound(DataType t, const std::vector<Bytes>& pushes) {
  Bytes sum = pushes[0];
  const size_t count = sum.size() / DataTypeSize(t);
  for (size_t i = 1; i < pushes.size(); ++i) SumInto(sum.data(), pushes[i].data(), count, t);
  return sum;
}

std::vector<Bytes> RandomPushes(DataType t, size_t count, int workers, std::mt19937_64& rng) {
  std::vector<Bytes> pushes(workers, Bytes(count * DataTypeSize(t)));
  for (Bytes& p : pushes) FillRandom(t, p.data(), count, rng);
  return pushes;
}

std::unique_ptr<GpuSummer> NewSummer(int streams = 2) {
  GpuSummerOptions o;
  o.streams = streams;
  o.wait_timeout = std::chrono::milliseconds(30000);
  return GpuSummer::Create(o);
}

// One round of `pushes` through the summer; the sum.
Buffer GpuRound(GpuSummer& s, uint64_t key, DataType t, const std::vector<Bytes>& pushes) {
  for (const Bytes& p : pushes) s.Add(key, p.data(), p.size(), t);
  return s.FinishAndWait(key);
}

class GpuSummerTest : public ::testing::Test {
 protected:
  void SetUp() override { FERRY_SKIP_WITHOUT_GPU(); }
};

// ---------------------------------------------------------------------------------
// The kernel alone.

// Device buffers at offset 0 (16-byte aligned: the vector path plus the element tail)
// and at one element in (the element path alone), against SumInto.
TEST_F(GpuSummerTest, KernelMatchesCpuEveryTypeAlignedAndNot) {
  std::mt19937_64 rng(1);
  for (DataType t : kAllTypes) {
    const size_t size = DataTypeSize(t);
    for (size_t count : kCounts) {
      for (size_t offset : {size_t{0}, size_t{1}}) {
        SCOPED_TRACE(DataTypeName(t) + " x " + std::to_string(count) + " at element " +
                     std::to_string(offset));
        std::vector<Bytes> in = RandomPushes(t, count, 2, rng);
        const Bytes want = CpuRound(t, in);
        const size_t bytes = (count + offset) * size;
        void* d = nullptr;
        void* s = nullptr;
        ASSERT_EQ(cudaMalloc(&d, bytes), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&s, bytes), cudaSuccess);
        uint8_t* dst = static_cast<uint8_t*>(d) + offset * size;
        uint8_t* src = static_cast<uint8_t*>(s) + offset * size;
        ASSERT_EQ(cudaMemcpy(dst, in[0].data(), in[0].size(), cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(src, in[1].data(), in[1].size(), cudaMemcpyHostToDevice), cudaSuccess);
        gpu::SumIntoDevice(dst, src, count, t, nullptr);
        Bytes got(in[0].size());
        ASSERT_EQ(cudaMemcpy(got.data(), dst, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
        cudaFree(d);
        cudaFree(s);
        ASSERT_TRUE(SameSum(t, got.data(), want.data(), count));
      }
    }
  }
}

TEST_F(GpuSummerTest, KernelRefusesMisalignedElements) {
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 64), cudaSuccess);
  uint8_t* p = static_cast<uint8_t*>(d);
  try {
    gpu::SumIntoDevice(p + 1, p + 32, 4, DataType::kFloat32, nullptr);
    ADD_FAILURE() << "a float32 buffer at an odd address was accepted";
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  }
  cudaFree(d);
}

// ---------------------------------------------------------------------------------
// GpuSummer: sums.

// Four workers' random pushes for every type and length; host buffers at odd addresses
// (received frames come at any address).
TEST_F(GpuSummerTest, ExactSumsEveryTypeAndLength) {
  auto summer = NewSummer();
  std::mt19937_64 rng(2);
  uint64_t key = 0;
  for (DataType t : kAllTypes) {
    for (size_t count : kCounts) {
      SCOPED_TRACE(DataTypeName(t) + " x " + std::to_string(count));
      std::vector<Bytes> pushes = RandomPushes(t, count, 4, rng);
      const Bytes want = CpuRound(t, pushes);
      for (const Bytes& p : pushes) {
        Bytes odd(p.size() + 1);
        std::memcpy(odd.data() + 1, p.data(), p.size());
        summer->Add(key, odd.data() + 1, p.size(), t);
      }
      const Buffer got = summer->FinishAndWait(key++);
      ASSERT_EQ(got.size(), want.size());
      ASSERT_TRUE(SameSum(t, got.bytes(), want.data(), count));
    }
  }
}

// Small integers: every type adds them exactly, so the expected sum is known without
// the CPU kernels: worker w pushes (i % 23) - 11 + w, three workers.
TEST_F(GpuSummerTest, SmallIntegerSumsAreExact) {
  auto summer = NewSummer();
  const size_t count = 1001;
  uint64_t key = 100;
  for (DataType t : kAllTypes) {
    SCOPED_TRACE(DataTypeName(t));
    std::vector<Bytes> pushes(3, Bytes(count * DataTypeSize(t)));
    Bytes want(count * DataTypeSize(t));
    for (size_t i = 0; i < count; ++i) {
      const double base = static_cast<double>(i % 23) - 11;
      for (int w = 0; w < 3; ++w) SetElement(t, pushes[w].data(), i, base + w);
      SetElement(t, want.data(), i, 3 * base + 3);  // w = 0 + 1 + 2
    }
    const Buffer got = GpuRound(*summer, key++, t, pushes);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0);
  }
}

TEST_F(GpuSummerTest, OnePushIsItsOwnSum) {
  auto summer = NewSummer();
  std::mt19937_64 rng(3);
  for (DataType t : kAllTypes) {
    std::vector<Bytes> one = RandomPushes(t, 4097, 1, rng);
    const Buffer got = GpuRound(*summer, static_cast<uint64_t>(t), t, one);
    ASSERT_EQ(got.size(), one[0].size());
    EXPECT_EQ(std::memcmp(got.data(), one[0].data(), got.size()), 0) << DataTypeName(t);
  }
}

// The accumulator is reused: each round's first push replaces the last round's sum.
TEST_F(GpuSummerTest, EveryRoundStartsAfresh) {
  auto summer = NewSummer();
  std::mt19937_64 rng(4);
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE(round);
    std::vector<Bytes> pushes = RandomPushes(DataType::kFloat32, 777, 2 + round % 3, rng);
    const Buffer got = GpuRound(*summer, 7, DataType::kFloat32, pushes);
    const Bytes want = CpuRound(DataType::kFloat32, pushes);
    ASSERT_TRUE(SameSum(DataType::kFloat32, got.bytes(), want.data(), 777));
  }
}

// A large partition, then larger keys on the same stream: the staging blocks and the
// scratch buffer grow (in stream order) and every sum stays exact.
TEST_F(GpuSummerTest, GrowingKeysOnOneStream) {
  auto summer = NewSummer(1);
  std::mt19937_64 rng(5);
  uint64_t key = 0;
  for (size_t count : {size_t{1000}, size_t{1} << 20, (size_t{16} << 20) + 3, size_t{4096}}) {
    SCOPED_TRACE(count);
    std::vector<Bytes> pushes = RandomPushes(DataType::kBFloat16, count, 3, rng);
    const Buffer got = GpuRound(*summer, key++, DataType::kBFloat16, pushes);
    const Bytes want = CpuRound(DataType::kBFloat16, pushes);
    ASSERT_TRUE(SameSum(DataType::kBFloat16, got.bytes(), want.data(), count));
  }
}

// ---------------------------------------------------------------------------------
// Many keys at once.

struct KeyCase {
  DataType type;
  std::vector<Bytes> pushes;
  Bytes want;
};

std::map<uint64_t, KeyCase> MakeKeys(int keys, int workers, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::map<uint64_t, KeyCase> cases;
  for (int k = 0; k < keys; ++k) {
    KeyCase c;
    c.type = kAllTypes[k % 6];
    const size_t count = 1 + rng() % 70000;  // odd and even lengths
    c.pushes = RandomPushes(c.type, count, workers, rng);
    c.want = CpuRound(c.type, c.pushes);
    cases[(static_cast<uint64_t>(k) << 32) | (k % 3)] = std::move(c);
  }
  return cases;
}

// Pushes interleaved across keys (worker by worker, as they arrive at a server), keys
// finished in a shuffled order while others still take pushes; every sum delivered
// exactly once and exact.
void RunInterleaved(GpuSummer& summer, const std::map<uint64_t, KeyCase>& cases, int workers,
                    uint64_t seed) {
  std::vector<uint64_t> order;
  for (const auto& [key, c] : cases) order.push_back(key);
  std::mt19937_64 rng(seed);
  std::map<uint64_t, int> delivered;
  std::map<uint64_t, Buffer> sums;
  for (int w = 0; w < workers; ++w) {
    std::shuffle(order.begin(), order.end(), rng);
    for (uint64_t key : order) {
      const KeyCase& c = cases.at(key);
      summer.Add(key, c.pushes[w].data(), c.pushes[w].size(), c.type);
      if (w == workers - 1) {
        summer.Finish(key, [&, key](Buffer sum) {
          ++delivered[key];
          sums[key] = std::move(sum);
        });
      }
    }
    summer.RunCompletions();
  }
  summer.Drain();
  EXPECT_EQ(summer.pending(), 0u);
  for (const auto& [key, c] : cases) {
    ASSERT_EQ(delivered[key], 1) << "key " << key;
    ASSERT_EQ(sums[key].size(), c.want.size()) << "key " << key;
    ASSERT_TRUE(SameSum(c.type, sums[key].bytes(), c.want.data(), c.want.size() / DataTypeSize(c.type)))
        << "key " << key;
  }
}

TEST_F(GpuSummerTest, ManyKeysInterleavedOnFourStreams) {
  auto summer = NewSummer(4);
  const auto cases = MakeKeys(96, 4, 6);
  for (int round = 0; round < 3; ++round) RunInterleaved(*summer, cases, 4, 60 + round);
}

// Several engine threads, each with its own summer, at once (as a server runs them).
TEST_F(GpuSummerTest, SummersOnSeveralThreads) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &failures] {
      try {
        auto summer = NewSummer(2);
        const auto cases = MakeKeys(24, 3, 70 + t);
        for (int round = 0; round < 3; ++round) RunInterleaved(*summer, cases, 3, 700 + round);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "thread " << t << ": " << e.what();
        ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

// ---------------------------------------------------------------------------------
// Ownership and completion.

// A sum still held (by ZeroMQ, or as last_sum) is never overwritten: the next round
// gets another block; a released block is reused.
TEST_F(GpuSummerTest, SumBlockIsReusedOnlyAfterRelease) {
  auto summer = NewSummer();
  std::mt19937_64 rng(8);
  auto r1 = RandomPushes(DataType::kInt32, 5000, 2, rng);
  auto r2 = RandomPushes(DataType::kInt32, 5000, 2, rng);
  Buffer a = GpuRound(*summer, 1, DataType::kInt32, r1);
  const void* a_block = a.data();
  Buffer b = GpuRound(*summer, 1, DataType::kInt32, r2);
  EXPECT_NE(b.data(), a_block);
  const Bytes want1 = CpuRound(DataType::kInt32, r1);
  EXPECT_EQ(std::memcmp(a.data(), want1.data(), want1.size()), 0) << "round 1's sum was overwritten";
  a = Buffer();  // the last holder lets go
  Buffer c = GpuRound(*summer, 1, DataType::kInt32, r1);
  EXPECT_EQ(c.data(), a_block) << "a released block was not reused";
  EXPECT_EQ(std::memcmp(c.data(), want1.data(), want1.size()), 0);
}

TEST_F(GpuSummerTest, SumOutlivesTheSummer) {
  std::mt19937_64 rng(9);
  auto pushes = RandomPushes(DataType::kFloat64, 3333, 3, rng);
  Buffer sum;
  {
    auto summer = NewSummer();
    sum = GpuRound(*summer, 1, DataType::kFloat64, pushes);
  }
  const Bytes want = CpuRound(DataType::kFloat64, pushes);
  EXPECT_TRUE(SameSum(DataType::kFloat64, sum.bytes(), want.data(), 3333));
}

// on_ready wakes the owner from a CUDA thread; RunCompletions then delivers.
TEST_F(GpuSummerTest, OnReadyWakesTheOwner) {
  std::mutex mu;  // guards ready
  std::condition_variable cv;
  int ready = 0;
  GpuSummerOptions o;
  o.on_ready = [&] {
    std::lock_guard<std::mutex> lock(mu);
    ++ready;
    cv.notify_all();
  };
  auto summer = GpuSummer::Create(o);
  std::mt19937_64 rng(10);
  auto pushes = RandomPushes(DataType::kFloat16, 10001, 2, rng);
  for (const Bytes& p : pushes) summer->Add(5, p.data(), p.size(), DataType::kFloat16);
  Buffer sum;
  summer->Finish(5, [&](Buffer s) { sum = std::move(s); });
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return ready > 0; }))
        << "on_ready never ran";
  }
  EXPECT_EQ(summer->RunCompletions(), 1u);
  EXPECT_EQ(summer->pending(), 0u);
  const Bytes want = CpuRound(DataType::kFloat16, pushes);
  EXPECT_TRUE(SameSum(DataType::kFloat16, sum.bytes(), want.data(), 10001));
}

// `done` may start the next round (the server sends replies from it).
TEST_F(GpuSummerTest, DoneMayStartTheNextRound) {
  auto summer = NewSummer();
  const int32_t ones[4] = {1, 1, 1, 1};
  summer->Add(3, ones, sizeof ones, DataType::kInt32);
  Buffer second;
  summer->Finish(3, [&](Buffer) {
    summer->Add(3, ones, sizeof ones, DataType::kInt32);
    summer->Add(3, ones, sizeof ones, DataType::kInt32);
    summer->Finish(3, [&](Buffer s) { second = std::move(s); });
  });
  summer->Drain();
  ASSERT_EQ(second.size(), sizeof ones);
  int32_t got[4];
  std::memcpy(got, second.data(), sizeof got);
  for (int32_t v : got) EXPECT_EQ(v, 2);
}

TEST_F(GpuSummerTest, ResetDropsTheOpenRound) {
  auto summer = NewSummer();
  const int64_t a[3] = {5, 6, 7}, b[3] = {-1, 0, 1};
  summer->Add(9, a, sizeof a, DataType::kInt64);
  summer->Add(9, a, sizeof a, DataType::kInt64);
  EXPECT_TRUE(summer->HasOpenRound(9));
  summer->Reset(9);
  EXPECT_FALSE(summer->HasOpenRound(9));
  summer->Add(9, b, sizeof b, DataType::kInt64);
  const Buffer got = summer->FinishAndWait(9);
  ASSERT_EQ(got.size(), sizeof b);
  EXPECT_EQ(std::memcmp(got.data(), b, sizeof b), 0);
}

// Forget (a retired tensor): waits for the work queued, frees the key; a sum finished
// before still arrives, and the key may come back with another length.
TEST_F(GpuSummerTest, ForgetFreesTheKeySoItMayComeBackWithAnotherLength) {
  auto summer = NewSummer();
  const int64_t a[3] = {5, 6, 7}, b[2] = {-1, 1};
  summer->Add(9, a, sizeof a, DataType::kInt64);
  int calls = 0;
  Buffer first;
  summer->Finish(9, [&](Buffer s) {
    ++calls;
    first = std::move(s);
  });
  summer->Forget(9);
  summer->Forget(12345);  // never added: nothing to do
  summer->Drain();
  ASSERT_EQ(calls, 1);
  ASSERT_EQ(first.size(), sizeof a);
  EXPECT_EQ(std::memcmp(first.data(), a, sizeof a), 0);
  summer->Add(9, b, sizeof b, DataType::kInt64);  // refused unless forgotten: another length
  const Buffer got = summer->FinishAndWait(9);
  ASSERT_EQ(got.size(), sizeof b);
  EXPECT_EQ(std::memcmp(got.data(), b, sizeof b), 0);
}

TEST_F(GpuSummerTest, ZeroLengthKey) {
  auto summer = NewSummer();
  summer->Add(4, nullptr, 0, DataType::kFloat32);
  summer->Add(4, nullptr, 0, DataType::kFloat32);
  int calls = 0;
  summer->Finish(4, [&](Buffer s) {
    ++calls;
    EXPECT_TRUE(s.empty());
  });
  summer->Drain();
  EXPECT_EQ(calls, 1);
}

// Bad calls throw kInvalidArgument and leave the key's round as it was.
TEST_F(GpuSummerTest, BadCallsThrowAndChangeNothing) {
  auto summer = NewSummer();
  const float x[4] = {1, 2, 3, 4};
  summer->Add(1, x, sizeof x, DataType::kFloat32);
  const auto expect_invalid = [](const std::function<void()>& call, const char* needle) {
    try {
      call();
      ADD_FAILURE() << "accepted; expected an error containing '" << needle << "'";
    } catch (const FerryError& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_invalid([&] { summer->Add(1, x, 8, DataType::kFloat32); }, "holds 16 bytes of float32");
  expect_invalid([&] { summer->Add(1, x, 16, DataType::kInt32); }, "Add got 16 bytes of int32");
  expect_invalid([&] { summer->Add(2, x, 6, DataType::kFloat32); }, "not a whole number");
  expect_invalid([&] { summer->Add(2, x, 8, static_cast<DataType>(9)); }, "invalid data type");
  expect_invalid([&] { summer->Finish(2, nullptr); }, "no open round");
  expect_invalid([&] {
    GpuSummerOptions o;
    o.streams = 0;
    GpuSummer::Create(o);
  }, "streams must be 1..64");
  summer->Add(1, x, sizeof x, DataType::kFloat32);
  const Buffer got = summer->FinishAndWait(1);
  const float want[4] = {2, 4, 6, 8};
  ASSERT_EQ(got.size(), sizeof want);
  EXPECT_EQ(std::memcmp(got.data(), want, sizeof want), 0);
  expect_invalid([&] { summer->Finish(1, nullptr); }, "no open round");
}

}  // namespace
}  // namespace ferry
