#pragma once

// The element types Ferry moves and sums, and their names and sizes.
//
// Its own header, below both the transport (which checks a message's dtype and length)
// and the summation kernels (common/reduce), so that the wire code does not depend on
// the arithmetic.

#include <cstddef>
#include <cstdint>
#include <string>

namespace ferry {

// Wire values of the data types (also used in proto/ferry.proto; keep in sync).
enum class DataType : int32_t {
  kFloat32 = 0,
  kFloat16 = 1,
  kBFloat16 = 2,
  kFloat64 = 3,
  kInt32 = 4,
  kInt64 = 5,
};

constexpr int kNumDataTypes = 6;

// Size of one element in bytes. REQUIRES: IsValidDataType(t).
size_t DataTypeSize(DataType t);
// "float32", "float16", ... ; "unknown(N)" for a value outside the enum.
std::string DataTypeName(DataType t);
bool IsValidDataType(int32_t value);
// float32, float16, bfloat16, float64.
bool IsFloatingPoint(DataType t);
// Parses "float32", "fp32", "float", "float16", "fp16", "half", "bfloat16", "bf16",
// "float64", "fp64", "double", "int32", "int64". Returns false if unknown.
bool ParseDataType(const std::string& name, DataType* out);

}  // namespace ferry
