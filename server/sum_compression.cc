#include "server/sum_compression.h"

#include <utility>

#include "common/util/strings.h"

namespace ferry {

const CompressionSpec* SumCompression::Spec(const std::string& text, std::string* why) {
  auto it = specs_.find(text);
  if (it != specs_.end()) return &it->second;
  CompressionSpec spec;
  if (Status s = CompressionSpec::Parse(text, &spec); !s.ok()) {
    *why = s.message();
    return nullptr;
  }
  if (spec.none()) {
    *why = "a compressed push names no compressor ('none')";
    return nullptr;
  }
  return &specs_.emplace(text, spec).first->second;
}

std::string SumCompression::DecodePush(Request& request) {
  proto::Envelope& e = request.message.envelope;
  const std::string what = StrCat("worker ", request.rank, "'s compressed push of ",
                                  KeyName(e.key()), " round ", e.round(), " (", e.compression(),
                                  "): ");
  std::string why;
  const CompressionSpec* spec = Spec(e.compression(), &why);
  if (spec == nullptr) return what + why;
  const auto dtype = static_cast<DataType>(e.dtype());
  if (!IsValidDataType(e.dtype()) || !IsFloatingPoint(dtype)) {
    return StrCat(what, "values of ", DataTypeName(dtype), "; only floating-point tensors are "
                  "compressed");
  }
  if (e.frame_bytes() != 0 || e.offset() != 0) return what + "compressed pushes are not cut in frames";
  const uint64_t raw = e.raw_length();
  if (raw == 0 || raw % DataTypeSize(dtype) != 0 || raw > max_raw_bytes_) {
    return StrCat(what, "it stands for ", raw, " bytes, not a whole number of ", DataTypeName(dtype),
                  " elements up to ", max_raw_bytes_, " bytes (FERRY_MAX_MESSAGE_BYTES)");
  }
  const uint64_t n = raw / DataTypeSize(dtype);
  Buffer values = Buffer::Allocate(raw);
  const Buffer& wire = request.message.payload;
  Status s = Decompress(*spec, dtype, wire.bytes(), wire.size(), n,
                        PushSeed(*spec, e.key(), e.round(), request.rank), values.data());
  if (!s.ok()) return what + s.message();
  request.message.payload = std::move(values);
  e.set_length(raw);
  return "";
}

Buffer SumCompression::CompressSum(uint64_t key, uint32_t round, const std::string& text,
                                   DataType dtype, const Buffer& sum) {
  std::string why;
  const CompressionSpec* spec = Spec(text, &why);
  FERRY_ENFORCE(spec != nullptr, ErrorCode::kInternal, KeyName(key), ": ", why);
  const uint64_t n = sum.size() / DataTypeSize(dtype);
  std::unique_ptr<PartitionCompressor>& c = sums_[key];
  if (!c || c->spec() != *spec) c = std::make_unique<PartitionCompressor>(*spec, dtype, n, false);
  Buffer wire = Buffer::Allocate(CompressedBytes(*spec, n));
  c->Compress(sum.data(), CompressionSeed(key, round), wire.bytes());
  return wire;
}

}  // namespace ferry
