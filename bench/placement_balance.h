#pragma once

// Placement balance of real models' gradients: bytes per server with Ferry's placement
// (worker/placement.h) beside BytePS's key hashing of the same partitions.
//
// Inputs are the shared workload CSVs (`<model>_tensors.csv`: one row per parameter
// tensor, `row,tensor,numel,bytes`, rows in backprop order). Ferry declares tensors in
// forward order, so the rows are reversed; tensors of one row keep their file order
// (PyTorch's named_parameters order: weight before bias).
//
// BytePS (bytedance/byteps, byteps/common/global.cc and operations.cc): tensor i in
// declaration order gets keys (i << 16) + partition, and with the default
// BYTEPS_KEY_HASH_FN=djb2 a key goes to server djb2(decimal string of the key) %
// servers, where djb2 is h = 5381, h = h * 33 + c over the characters.

#include <cstdint>
#include <string>
#include <vector>

namespace ferry::bench {

struct TensorRow {
  int row = 0;  // the CSV's row (layer group), 1 = the last layer
  std::string name;
  uint64_t bytes = 0;
};

// Reads a `<model>_tensors.csv`. Lines starting with '#' and the header are skipped.
// Throws FerryError(kInvalidArgument) naming the file and line on anything else that
// is not `row,tensor,numel,bytes` with bytes = 4 x numel (float32), or if the file
// cannot be read or holds no tensor.
std::vector<TensorRow> ReadTensorCsv(const std::string& path);

// Forward order: rows from the highest (the input side) to 1, file order within a row.
std::vector<TensorRow> ForwardOrder(std::vector<TensorRow> tensors);

// BytePS's key of partition `partition` of the `declared`-th tensor.
uint64_t BytePSKey(uint32_t declared, uint32_t partition);
// djb2 over the key's decimal digits, as BytePS's Hash_DJB2.
uint64_t Djb2OfDecimal(uint64_t key);
// The server BytePS picks for a key under its default hash (djb2).
int BytePSServer(uint64_t key, int servers);

struct Balance {
  std::vector<uint64_t> loads;  // bytes per server
  size_t partitions = 0;
  double MaxOverMean() const;  // 1.0 = perfect
};

// Ferry: tensors split by SplitTensor (float32 elements) into partitions of at most
// `partition_bytes`, placed in order by Placement with equal weights.
Balance FerryBalance(const std::vector<uint64_t>& tensor_bytes, int servers,
                     uint64_t partition_bytes);
// BytePS: the same partitions, each to BytePSServer(BytePSKey(tensor, partition)).
Balance BytePSBalance(const std::vector<uint64_t>& tensor_bytes, int servers,
                      uint64_t partition_bytes);
// Reference only, not something a worker can do while tensors are declared one at a
// time: the same partitions placed largest first, each on the least loaded server.
Balance LargestFirstBalance(const std::vector<uint64_t>& tensor_bytes, int servers,
                            uint64_t partition_bytes);

}  // namespace ferry::bench
