#include "common/types/data_type.h"

namespace ferry {

size_t DataTypeSize(DataType t) {
  switch (t) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat16: return 2;
    case DataType::kBFloat16: return 2;
    case DataType::kFloat64: return 8;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
  }
  return 0;  // not a valid type: callers must check IsValidDataType first
}

std::string DataTypeName(DataType t) {
  switch (t) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kFloat64: return "float64";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
  }
  return "unknown(" + std::to_string(static_cast<int32_t>(t)) + ")";
}

bool IsValidDataType(int32_t value) { return value >= 0 && value < kNumDataTypes; }

bool ParseDataType(const std::string& name, DataType* out) {
  static const struct {
    const char* name;
    DataType type;
  } kNames[] = {
      {"float32", DataType::kFloat32},   {"fp32", DataType::kFloat32},
      {"float", DataType::kFloat32},     {"float16", DataType::kFloat16},
      {"fp16", DataType::kFloat16},      {"half", DataType::kFloat16},
      {"bfloat16", DataType::kBFloat16}, {"bf16", DataType::kBFloat16},
      {"float64", DataType::kFloat64},   {"fp64", DataType::kFloat64},
      {"double", DataType::kFloat64},    {"int32", DataType::kInt32},
      {"int64", DataType::kInt64},
  };
  for (const auto& n : kNames) {
    if (name == n.name) {
      if (out != nullptr) *out = n.type;
      return true;
    }
  }
  return false;
}

bool IsFloatingPoint(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kBFloat16 ||
         t == DataType::kFloat64;
}

}  // namespace ferry
