#include "bench/placement_balance.h"

#include <algorithm>
#include <fstream>
#include <numeric>
#include <sstream>

#include "common/util/error.h"
#include "worker/placement.h"

namespace ferry::bench {
namespace {

constexpr size_t kFloat32 = 4;

// Parses a whole unsigned decimal field; false if it is empty or has anything else.
bool ParseUnsigned(const std::string& field, uint64_t* out) {
  if (field.empty() || field.size() > 19) return false;
  uint64_t v = 0;
  for (char c : field) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

std::vector<PartitionSpec> Partitions(uint64_t bytes, uint64_t partition_bytes) {
  return SplitTensor(bytes, kFloat32, partition_bytes);
}

}  // namespace

std::vector<TensorRow> ReadTensorCsv(const std::string& path) {
  std::ifstream in(path);
  FERRY_ENFORCE(in.good(), ErrorCode::kInvalidArgument, "cannot read ", path);
  std::vector<TensorRow> tensors;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#' || line.rfind("row,", 0) == 0) continue;
    std::vector<std::string> fields;
    std::stringstream s(line);
    std::string field;
    while (std::getline(s, field, ',')) fields.push_back(field);
    uint64_t row = 0, numel = 0, bytes = 0;
    FERRY_ENFORCE(fields.size() == 4 && ParseUnsigned(fields[0], &row) && row > 0 &&
                      row < (1u << 30) && !fields[1].empty() && ParseUnsigned(fields[2], &numel) &&
                      ParseUnsigned(fields[3], &bytes),
                  ErrorCode::kInvalidArgument, path, ":", number,
                  ": expected row,tensor,numel,bytes, got '", line, "'");
    FERRY_ENFORCE(bytes == numel * kFloat32, ErrorCode::kInvalidArgument, path, ":", number,
                  ": tensor '", fields[1], "' has ", numel, " elements but ", bytes,
                  " bytes (expected float32, 4 bytes each)");
    tensors.push_back({static_cast<int>(row), fields[1], bytes});
  }
  FERRY_ENFORCE(!tensors.empty(), ErrorCode::kInvalidArgument, path, ": no tensors");
  return tensors;
}

std::vector<TensorRow> ForwardOrder(std::vector<TensorRow> tensors) {
  std::stable_sort(tensors.begin(), tensors.end(),
                   [](const TensorRow& a, const TensorRow& b) { return a.row > b.row; });
  return tensors;
}

uint64_t BytePSKey(uint32_t declared, uint32_t partition) {
  return (static_cast<uint64_t>(declared) << 16) + partition;
}

uint64_t Djb2OfDecimal(uint64_t key) {
  uint64_t hash = 5381;
  for (char c : std::to_string(key)) hash = hash * 33 + static_cast<uint64_t>(c);
  return hash;
}

int BytePSServer(uint64_t key, int servers) {
  return static_cast<int>(Djb2OfDecimal(key) % static_cast<uint64_t>(servers));
}

double Balance::MaxOverMean() const {
  uint64_t total = std::accumulate(loads.begin(), loads.end(), uint64_t{0});
  if (total == 0) return 1.0;
  double mean = static_cast<double>(total) / static_cast<double>(loads.size());
  return static_cast<double>(*std::max_element(loads.begin(), loads.end())) / mean;
}

Balance FerryBalance(const std::vector<uint64_t>& tensor_bytes, int servers,
                     uint64_t partition_bytes) {
  Placement placement(std::vector<double>(servers, 1.0 / servers));
  Balance b;
  for (uint64_t bytes : tensor_bytes) {
    for (const auto& p : Partitions(bytes, partition_bytes)) {
      placement.Assign(p.bytes);
      ++b.partitions;
    }
  }
  b.loads = placement.loads();
  return b;
}

Balance BytePSBalance(const std::vector<uint64_t>& tensor_bytes, int servers,
                      uint64_t partition_bytes) {
  Balance b;
  b.loads.assign(servers, 0);
  for (size_t t = 0; t < tensor_bytes.size(); ++t) {
    for (const auto& p : Partitions(tensor_bytes[t], partition_bytes)) {
      b.loads[BytePSServer(BytePSKey(static_cast<uint32_t>(t), p.index), servers)] += p.bytes;
      ++b.partitions;
    }
  }
  return b;
}

Balance LargestFirstBalance(const std::vector<uint64_t>& tensor_bytes, int servers,
                            uint64_t partition_bytes) {
  std::vector<uint64_t> sizes;
  for (uint64_t bytes : tensor_bytes) {
    for (const auto& p : Partitions(bytes, partition_bytes)) sizes.push_back(p.bytes);
  }
  std::stable_sort(sizes.begin(), sizes.end(), std::greater<uint64_t>());
  Placement placement(std::vector<double>(servers, 1.0 / servers));
  for (uint64_t s : sizes) placement.Assign(s);
  Balance b;
  b.loads = placement.loads();
  b.partitions = sizes.size();
  return b;
}

}  // namespace ferry::bench
