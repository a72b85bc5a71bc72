// ferry-test-worker's compression modes (test_worker.cc dispatches; compression_test.cc
// in tests/integration runs them).
//
// "compression": compressed push_pulls (FERRY_COMPRESSION = --compression on every worker,
// FERRY_DETERMINISTIC=1, one partition per tensor): every output must equal, bit for bit,
// what this program computes for the whole job with the codecs alone: each rank's
// compressor (error feedback and momentum carried across rounds), the pushes decompressed
// and summed in rank order, the server's compressor of the sum (its own error feedback),
// averaged where asked. A tensor under FERRY_COMPRESSION_MIN_BYTES and an integer tensor
// travel raw and sum exactly.
//
// "compression_mismatch": rank 0 compresses a tensor with onebit, the others with
// topk:0.1 (Worker::SetCompression): every worker's push_pull fails naming both, and the
// other keys are still served.

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/compress/codec.h"
#include "common/reduce/reduce.h"
#include "worker/worker.h"

namespace ferry {

int ExpectRefusedThenServed(Worker& w, const char* name, uint64_t count, const std::string& words);

namespace {

constexpr int kExitWrong = 3;

struct TestTensor {
  const char* name;
  DataType dtype;
  uint64_t n;
  bool average;
  uint64_t key = 0;
};

// Rank `rank`'s value of element i of tensor `t` in round `round`, in [-1, 1].
float Value(int rank, int round, size_t t, uint64_t i) {
  const uint64_t h = (i * 2654435761ull + rank * 97ull + round * 13ull + t * 7919ull) % 2001;
  return (static_cast<float>(h) - 1000.0f) / 1000.0f;
}

std::vector<uint8_t> Input(const TestTensor& t, size_t index, int rank, int round) {
  std::vector<uint8_t> out(t.n * DataTypeSize(t.dtype));
  for (uint64_t i = 0; i < t.n; ++i) {
    const float v = Value(rank, round, index, i);
    switch (t.dtype) {
      case DataType::kBFloat16: {
        const uint16_t b = FloatToBFloat16(v);
        std::memcpy(&out[2 * i], &b, 2);
        break;
      }
      case DataType::kInt32: {
        const int32_t x = static_cast<int32_t>(v * 1000);
        std::memcpy(&out[4 * i], &x, 4);
        break;
      }
      default:
        std::memcpy(&out[4 * i], &v, 4);
    }
  }
  return out;
}

// The whole job's result of one round of tensor `t`, as the codecs compute it.
class Reference {
 public:
  Reference(const CompressionSpec& spec, const TestTensor& t, int workers, bool compressed)
      : spec_(spec), t_(t), compressed_(compressed) {
    if (!compressed) return;
    for (int r = 0; r < workers; ++r) {
      ranks_.emplace_back(spec, t.dtype, t.n, /*momentum=*/true);
    }
    server_.emplace_back(spec, t.dtype, t.n, /*momentum=*/false);
  }

  std::vector<uint8_t> Round(size_t index, int round, int workers) {
    std::vector<uint8_t> sum;
    for (int r = 0; r < workers; ++r) {
      std::vector<uint8_t> x = Input(t_, index, r, round);
      if (compressed_) {
        std::vector<uint8_t> wire(CompressedBytes(spec_, t_.n));
        const uint64_t seed = PushSeed(spec_, t_.key, round, r);
        ranks_[r].Compress(x.data(), seed, wire.data());
        Decompress(spec_, t_.dtype, wire.data(), wire.size(), t_.n, seed, x.data())
            .ThrowIfError();
      }
      if (sum.empty()) {
        sum = std::move(x);
      } else {
        SumInto(sum.data(), x.data(), t_.n, t_.dtype);
      }
    }
    if (compressed_) {
      std::vector<uint8_t> wire(CompressedBytes(spec_, t_.n));
      const uint64_t seed = CompressionSeed(t_.key, round);
      server_[0].Compress(sum.data(), seed, wire.data());
      Decompress(spec_, t_.dtype, wire.data(), wire.size(), t_.n, seed, sum.data())
          .ThrowIfError();
    }
    if (t_.average) Scale(sum.data(), 1.0 / workers, t_.n, t_.dtype);
    return sum;
  }

 private:
  const CompressionSpec spec_;
  const TestTensor t_;
  const bool compressed_;
  std::vector<PartitionCompressor> ranks_;
  std::vector<PartitionCompressor> server_;
};

uint64_t Fnv(uint64_t h, const std::vector<uint8_t>& bytes) {
  for (uint8_t b : bytes) h = (h ^ b) * 1099511628211ull;
  return h;
}

}  // namespace

int RunCompression(Worker& w, const std::string& text, int rounds) {
  CompressionSpec spec;
  CompressionSpec::Parse(text, &spec).ThrowIfError();
  std::vector<TestTensor> tensors = {{"c.average", DataType::kFloat32, 70001, true},
                                     {"c.bf16", DataType::kBFloat16, 40000, false},
                                     {"c.small", DataType::kFloat32, 1000, false},
                                     {"c.int", DataType::kInt32, 30000, false}};
  std::vector<Reference> refs;
  for (TestTensor& t : tensors) {
    const int id = w.DeclareTensor(t.name, t.dtype, {static_cast<int64_t>(t.n)});
    t.key = MakeLayoutKey(static_cast<uint32_t>(id), 0, 0);
    const uint64_t bytes = t.n * DataTypeSize(t.dtype);
    const bool compressed = bytes >= 65536 && CompressesTo(spec, t.dtype, bytes);
    refs.emplace_back(spec, t, w.size(), compressed);
  }
  uint64_t checksum = 14695981039346656037ull;
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::vector<uint8_t>> in, out;
    std::vector<Handle> handles;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TestTensor& t = tensors[i];
      in.push_back(Input(t, i, w.rank(), round));
      out.emplace_back(in.back().size(), 0xEE);
      handles.push_back(w.PushPullAsync(t.name, in.back().data(), out.back().data(), t.dtype,
                                        t.n, t.average));
    }
    for (Handle h : handles) w.Wait(h);
    for (size_t i = 0; i < tensors.size(); ++i) {
      const std::vector<uint8_t> expected = refs[i].Round(i, round, w.size());
      if (expected != out[i]) {
        size_t at = 0;
        while (at < expected.size() && expected[at] == out[i][at]) ++at;
        std::fprintf(stderr, "WRONG %s round %d: byte %zu of %zu differs from the reference\n",
                     tensors[i].name, round, at, expected.size());
        return kExitWrong;
      }
      checksum = Fnv(checksum, out[i]);
    }
  }
  const CounterValues c = w.Counters();
  const uint64_t raw = CounterValue(c, "compression.raw_bytes");
  const uint64_t wire = CounterValue(c, "compression.wire_bytes");
  std::printf("OK compression %s rounds=%d checksum %016llx raw_bytes=%llu wire_bytes=%llu\n",
              spec.ToString().c_str(), rounds, static_cast<unsigned long long>(checksum),
              static_cast<unsigned long long>(raw), static_cast<unsigned long long>(wire));
  return 0;
}

int RunCompressionMismatch(Worker& w) {
  const uint64_t count = 50000;
  w.DeclareTensor("mixed", DataType::kFloat32, {static_cast<int64_t>(count)});
  w.SetCompression("mixed", w.rank() == 0 ? "onebit" : "topk:0.1");
  return ExpectRefusedThenServed(w, "mixed", count, "disagree on the compression");
}

}  // namespace ferry
