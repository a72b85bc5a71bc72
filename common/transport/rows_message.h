#pragma once

// Sparse rows on the wire (ROWS_PUSH / ROWS_RESULT, Worker::PushPullRows).
//
// A rows tensor is declared [R, ...]: R rows of `row_elements` elements. A worker sends
// each server, once per round, the rows of the tensor that server owns:
//   ROWS_PUSH   body `rows` {num_rows, row_elements, total_rows}; one payload frame:
//               num_rows int64 row ids (native byte order), then num_rows x row_elements
//               values of `dtype`, row after row, in the same order. num_rows may be 0
//               (then there is no payload frame).
//   ROWS_RESULT body `rows` {num_rows, row_elements}; payload: num_rows x row_elements
//               values: the round's sum of each row the push listed, in its order.
// Keys: RowsKey(tensor id, server rank), kept apart from the dense keys on the server.
//
// Validation (everything comes from the wire): body present, known dtype, row_elements
// >= 1, the payload exactly the size the header implies (computed without overflow)
// and within the limit. Row ids against total_rows are checked by the server, which
// knows the key's definition (RowKeyState::CheckRowIds).

#include <cstdint>
#include <string>

#include "common/transport/message.h"
#include "common/util/status.h"

namespace ferry {

inline uint64_t RowsKey(uint32_t tensor_id, uint32_t server_rank) {
  return MakeKey(tensor_id, server_rank);
}
// "rows of tensor 3 on server 1", for messages.
std::string RowsKeyName(uint64_t key);

// Payload bytes of a ROWS_PUSH (with_ids) or ROWS_RESULT (without) of this shape;
// false when it overflows 64 bits.
bool RowsPayloadBytes(uint64_t num_rows, uint64_t row_elements, DataType dtype, bool with_ids,
                      uint64_t* bytes);

// Checks a ROWS_PUSH or ROWS_RESULT as described above. OK when valid, else kBadMessage
// with the reason.
Status ValidateRowsMessage(const Message& m, uint64_t max_payload_bytes);

// ZeroMQ may hand a received frame at any offset of its receive buffer, but row ids are
// read as int64_t and values by the summation kernels: a misaligned payload is copied
// once into an aligned buffer (a rows push is small: only the rows listed).
void AlignRowsPayload(Message& m);

// A ROWS_PUSH's parts. REQUIRES: m passed ValidateRowsMessage and AlignRowsPayload.
inline const int64_t* RowIdsOf(const Message& m) {
  return static_cast<const int64_t*>(m.payload.data());
}
inline const uint8_t* RowValuesOf(const Message& m) {
  return m.payload.bytes() + m.envelope.rows().num_rows() * sizeof(int64_t);
}

}  // namespace ferry
