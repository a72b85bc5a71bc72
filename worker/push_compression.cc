#include "worker/push_compression.h"

#include "common/reduce/reduce.h"
#include "common/util/strings.h"

namespace ferry {

namespace {

uint64_t Elements(const Operation& op, const PartitionSpec& p) {
  return p.bytes / DataTypeSize(op.tensor->dtype);
}

}  // namespace

bool PushCompression::Compressed(const Operation& op, const PartitionSpec& p) {
  return CompressesTo(op.compression, op.tensor->dtype, p.bytes);
}

uint64_t PushCompression::WireBytes(const Operation& op, const PartitionSpec& p) {
  return Compressed(op, p) ? CompressedBytes(op.compression, Elements(op, p)) : p.bytes;
}

Buffer PushCompression::Compress(const Operation& op, const PartitionSpec& p, uint64_t key,
                                 uint32_t round, int rank) {
  const uint64_t n = Elements(op, p);
  std::unique_ptr<PartitionCompressor>& c = keys_[key];
  if (!c || c->spec() != op.compression) {
    c = std::make_unique<PartitionCompressor>(op.compression, op.tensor->dtype, n, true);
  }
  Buffer wire = Buffer::Allocate(CompressedBytes(op.compression, n));
  c->Compress(op.input + p.offset, PushSeed(op.compression, key, round, rank), wire.bytes());
  counters_.compression_raw_bytes += p.bytes;
  counters_.compression_wire_bytes += wire.size();
  return wire;
}

void PushCompression::Label(const Operation& op, const PartitionSpec& p, Message* m) {
  m->envelope.set_compression(op.compression.ToString());
  m->envelope.set_raw_length(p.bytes);
}

std::string PushCompression::CheckSum(const Operation& op, const PartitionSpec& p,
                                      const Message& m) {
  const proto::Envelope& e = m.envelope;
  if (e.compression() == op.compression.ToString() && e.raw_length() == p.bytes &&
      e.length() == WireBytes(op, p)) {
    return "";
  }
  return StrCat("a sum compressed with '", e.compression(), "' of ", e.length(),
                " bytes standing for ", e.raw_length(), ", where '", op.compression.ToString(),
                "' of ", p.bytes, " bytes takes ", WireBytes(op, p));
}

bool PushCompression::Deliver(const Operation& op, const PartitionSpec& p, const Message& m,
                              int workers, uint8_t* out, std::string* why) {
  const DataType dtype = op.tensor->dtype;
  const uint64_t n = Elements(op, p);
  Status s = Decompress(op.compression, dtype, m.payload.bytes(), m.payload.size(), n,
                        CompressionSeed(m.envelope.key(), m.envelope.round()), out);
  if (!s.ok()) {
    *why = s.message();
    return false;
  }
  if (op.average) Scale(out, 1.0 / workers, n, dtype);
  return true;
}

}  // namespace ferry
