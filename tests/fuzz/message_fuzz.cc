// libFuzzer target for everything that parses bytes from the wire: envelope decoding,
// message validation (a valid frame lies inside its key, on its cut), the splitting of a fused push
// (PUSH_FUSED) into its pushes, a server key's classification of a push, and a sparse-rows push
// (ROWS_PUSH) checked and summed as a server's rows key would, and a compressed push
// decoded and its sum compressed again as a server's SumCompression does.
//
// Input layout (so the fuzzer can shape frames): byte 0 = number of frames (1..3, mod 4),
// then per frame a little-endian u16 length and that many bytes (truncated at the end
// of the input). Frame 1 is the envelope, frame 2 the payload.
//
// Build: CC=clang CXX=clang++ cmake -DFERRY_BUILD_FUZZERS=ON ...; run:
//   build-fuzz/bin/ferry-message-fuzz -max_total_time=60 tests/fuzz/corpus

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/transport/fused_push.h"
#include "common/transport/message.h"
#include "common/transport/rows_message.h"
#include "server/key_state.h"
#include "server/row_key_state.h"
#include "server/sum_compression.h"

namespace {

std::vector<std::string> SplitFrames(const uint8_t* data, size_t size) {
  std::vector<std::string> frames;
  if (size == 0) return frames;
  size_t n = data[0] % 4;
  size_t at = 1;
  for (size_t i = 0; i < n && at < size; ++i) {
    size_t len = data[at];
    if (at + 1 < size) len |= static_cast<size_t>(data[at + 1]) << 8;
    at += 2;
    if (at > size) break;
    len = std::min(len, size - at);
    frames.emplace_back(reinterpret_cast<const char*>(data + at), len);
    at += len;
  }
  return frames;
}

// A valid PUSH or PUSH_RESULT lies inside its key, where its cut puts a frame (message.h,
// "Frames"): so two frames of one cut are equal or disjoint.
void CheckFrameInvariants(const ferry::proto::Envelope& e) {
  const uint64_t key_length = ferry::FrameKeyLength(e), frame = ferry::FrameSize(e);
  if (e.offset() > key_length || e.length() > key_length - e.offset()) __builtin_trap();
  if (frame == 0) {
    if (e.offset() != 0 || e.length() != 0) __builtin_trap();  // only an empty whole key
    return;
  }
  if (e.offset() % frame != 0) __builtin_trap();
  if (e.offset() / frame >= ferry::FrameCount(key_length, frame)) __builtin_trap();
  if (e.length() != std::min<uint64_t>(frame, key_length - e.offset())) __builtin_trap();
}

// A valid push reaches a key: classify it as a server would, twice (the second is a
// duplicate or a mismatch), then sum it into itself.
void ServePush(const ferry::Message& m) {
  ferry::KeyState state;
  const int workers = 4;
  int rank = static_cast<int>(static_cast<uint32_t>(m.sender()) % workers);
  auto dtype = static_cast<ferry::DataType>(m.envelope.dtype());
  state.Classify(rank, m.envelope.round(), m.envelope.length(), dtype, m.envelope.tensor_hash(),
                 workers);
  state.Classify(rank, m.envelope.round() + 1, m.envelope.length() + 1, dtype, 0, workers);
  if (!m.payload.empty()) {
    ferry::SumInto(m.payload.data(), m.payload.data(),
                   m.payload.size() / ferry::DataTypeSize(dtype), dtype);
  }
}

// A valid ROWS_PUSH reaches a rows key: classified, its row ids checked against the
// header's total_rows, and (if they pass) summed with itself as two workers' pushes.
void ServeRows(const ferry::Message& m) {
  ferry::RowKeyState state;
  const int workers = 2;
  const ferry::proto::RowsHeader& h = m.envelope.rows();
  auto dtype = static_cast<ferry::DataType>(m.envelope.dtype());
  if (state.Classify(0, 0, h.total_rows(), h.row_elements(), dtype, m.envelope.tensor_hash(),
                     workers) != ferry::PushVerdict::kAccumulate) {
    __builtin_trap();  // a fresh key takes a first push of round 0
  }
  ferry::Message aligned = m;  // as the server does: ids are read as int64_t
  ferry::AlignRowsPayload(aligned);
  if (!state.CheckRowIds(ferry::RowIdsOf(aligned), h.num_rows()).empty()) return;
  ferry::RowsPush push{aligned.payload, h.num_rows(), {}};
  std::vector<ferry::Buffer> sums = ferry::SumRows({&push, &push}, h.row_elements(), dtype);
  if (sums.size() != 2 || sums[0].size() != h.num_rows() * h.row_elements() *
                                              ferry::DataTypeSize(dtype)) {
    __builtin_trap();
  }
}

// A valid compressed push is decoded as the server decodes it (refused with a reason, or
// the raw values it stands for), summed, and its sum compressed to the spec's size.
void ServeCompressedPush(const ferry::Message& m) {
  ferry::Request request;
  request.message = m;
  request.rank = static_cast<int>(static_cast<uint32_t>(m.sender()) % 4);
  ferry::SumCompression codec(1 << 20);
  if (!codec.DecodePush(request).empty()) return;
  const ferry::proto::Envelope& e = request.message.envelope;
  if (request.message.payload.size() != e.raw_length() || e.length() != e.raw_length()) {
    __builtin_trap();
  }
  ServePush(request.message);
  ferry::CompressionSpec spec;
  if (!ferry::CompressionSpec::Parse(e.compression(), &spec).ok()) __builtin_trap();
  const auto dtype = static_cast<ferry::DataType>(e.dtype());
  const ferry::Buffer wire =
      codec.CompressSum(e.key(), e.round(), e.compression(), dtype, request.message.payload);
  if (wire.size() != ferry::CompressedBytes(spec, e.raw_length() / ferry::DataTypeSize(dtype))) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> frames = SplitFrames(data, size);
  if (frames.empty()) return 0;
  ferry::Message m;
  std::string error;
  if (!ferry::ParseEnvelope(frames[0].data(), frames[0].size(), &m.envelope, &error)) return 0;
  std::string payload_bytes;
  if (frames.size() > 1) {
    payload_bytes = frames[1];
    m.payload = ferry::Buffer::CopyOf(payload_bytes.data(), payload_bytes.size());
  }
  error = ferry::ValidateMessage(m, 1 << 20).message();
  (void)ferry::Describe(m);
  if (!error.empty()) return 0;
  if (m.type() == ferry::proto::PUSH || m.type() == ferry::proto::PUSH_RESULT) {
    CheckFrameInvariants(m.envelope);
  }
  if (m.type() == ferry::proto::PUSH && !m.envelope.compression().empty()) {
    ServeCompressedPush(m);
  } else if (m.type() == ferry::proto::PUSH) {
    ServePush(m);
  } else if (m.type() == ferry::proto::ROWS_PUSH) {
    ServeRows(m);
  } else if (m.type() == ferry::proto::PUSH_FUSED) {
    // A valid fused push is split as the server splits it (zero-copy slices of the
    // frame), and every part must then be a valid push on its own.
    std::vector<ferry::Message> pushes;
    if (!ferry::SplitFusedPush(m, &pushes).ok()) __builtin_trap();
    for (ferry::Message& p : pushes) {
      if (!ferry::ValidateMessage(p, 1 << 20).ok()) __builtin_trap();
      ServePush(p);
    }
  }
  return 0;
}
