#include "common/transport/rows_message.h"

#include <cstdint>

#include "common/util/status.h"

namespace ferry {

std::string RowsKeyName(uint64_t key) {
  return StrCat("rows of tensor ", KeyTensor(key), " on server ", KeyPartition(key));
}

bool RowsPayloadBytes(uint64_t num_rows, uint64_t row_elements, DataType dtype, bool with_ids,
                      uint64_t* bytes) {
  const uint64_t per_row_values = row_elements * DataTypeSize(dtype);
  if (row_elements != 0 && per_row_values / row_elements != DataTypeSize(dtype)) return false;
  const uint64_t per_row = per_row_values + (with_ids ? sizeof(int64_t) : 0);
  if (per_row < per_row_values) return false;
  if (num_rows != 0 && (num_rows * per_row) / num_rows != per_row) return false;
  *bytes = num_rows * per_row;
  return true;
}

Status ValidateRowsMessage(const Message& m, uint64_t max_payload_bytes) {
  const proto::Envelope& e = m.envelope;
  const std::string type = MessageTypeName(e.type());
  if (e.body_case() != proto::Envelope::kRows) return BadMessageError(type + " without its body");
  if (!IsValidDataType(e.dtype())) {
    return BadMessageError(StrCat("unknown dtype ", static_cast<int>(e.dtype())));
  }
  const proto::RowsHeader& h = e.rows();
  if (h.row_elements() == 0) return BadMessageError(type + " with rows of 0 elements");
  if (e.type() == proto::ROWS_PUSH && h.total_rows() == 0) {
    return BadMessageError(type + " of a tensor of 0 rows");
  }
  if (Status bad = CheckPayloadFrame(m, max_payload_bytes); !bad.ok()) return bad;
  uint64_t expected = 0;
  if (!RowsPayloadBytes(h.num_rows(), h.row_elements(), static_cast<DataType>(e.dtype()),
                        e.type() == proto::ROWS_PUSH, &expected) ||
      expected != m.payload.size()) {
    return BadMessageError(StrCat(type, " of ", h.num_rows(), " rows of ", h.row_elements(), " ",
                                  DataTypeName(static_cast<DataType>(e.dtype())),
                                  " elements but a payload of ", m.payload.size(), " bytes"));
  }
  return Status::Ok();
}

void AlignRowsPayload(Message& m) {
  if (reinterpret_cast<uintptr_t>(m.payload.data()) % alignof(int64_t) != 0) {
    m.payload = Buffer::CopyOf(m.payload.data(), m.payload.size());
  }
}

}  // namespace ferry
