// Writes the fuzzer's seed corpus: one file per real message kind, in the input
// layout of message_fuzz.cc. Usage: ferry-fuzz-seeds OUTPUT_DIR (tests/fuzz/corpus: run it
// again after a change to the wire, a new protocol version above all). Exits 1 when a seed
// is not as valid as it should be.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/compress/codec.h"
#include "common/transport/fused_push.h"
#include "common/transport/message.h"
#include "common/transport/rows_message.h"

namespace {

bool all_as_expected = true;

// Writes one seed. Every seed is a message a node accepts (ValidateMessage), but those
// written with `valid` false: a seed that stopped being valid (a new protocol version, a
// new rule) would teach the fuzzer only the refusal, so it fails the run.
void Write(const std::string& dir, const std::string& name, const ferry::Message& m,
           const std::string& payload, bool valid = true) {
  ferry::Message check = m;
  check.payload = ferry::Buffer::CopyOf(payload.data(), payload.size());
  const ferry::Status status = ferry::ValidateMessage(check, 1 << 20);
  if (status.ok() != valid) {
    std::fprintf(stderr, "seed %s: %s\n", name.c_str(),
                 valid ? status.message().c_str() : "valid, but written as refused");
    all_as_expected = false;
  }
  const std::string env = m.envelope.SerializeAsString();
  std::string out;
  out.push_back(static_cast<char>(payload.empty() ? 1 : 2));
  for (const std::string* f : {&env, &payload}) {
    if (f == &payload && payload.empty()) break;
    out.push_back(static_cast<char>(f->size() & 0xff));
    out.push_back(static_cast<char>((f->size() >> 8) & 0xff));
    out += *f;
  }
  std::ofstream(dir + "/" + name, std::ios::binary) << out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  using ferry::MakeMessage;
  namespace proto = ferry::proto;
  auto reg = MakeMessage(proto::REGISTER, -1);
  reg.envelope.mutable_register_request()->set_role(proto::WORKER);
  reg.envelope.mutable_register_request()->set_host("127.0.0.1");
  Write(dir, "register", reg, "");
  // A node of the previous release registering: refused on its version (the scheduler
  // answers it, see VanOptions::on_version_mismatch).
  auto reg_v2 = reg;
  reg_v2.envelope.set_version(2);
  Write(dir, "register_v2", reg_v2, "", /*valid=*/false);
  auto reg_v3 = reg;
  reg_v3.envelope.set_version(3);
  Write(dir, "register_v3", reg_v3, "", /*valid=*/false);
  auto table = MakeMessage(proto::NODE_TABLE, 0);
  auto* n = table.envelope.mutable_node_table()->add_nodes();
  n->set_id(1);
  n->set_role(proto::SERVER);
  n->set_host("127.0.0.1");
  n->set_port(9001);
  n->set_weight(1.0);
  Write(dir, "node_table", table, "");
  auto barrier = MakeMessage(proto::BARRIER, 3);
  barrier.envelope.mutable_barrier()->set_group(proto::GROUP_WORKERS);
  Write(dir, "barrier", barrier, "");
  Write(dir, "heartbeat", MakeMessage(proto::HEARTBEAT, 3), "");
  // The stall check (protocol 4): a worker's report, the scheduler's watch list and warning.
  auto report = MakeMessage(proto::HEARTBEAT, 3);
  auto* pending = report.envelope.mutable_stall_report()->add_pending();
  pending->set_label("push_pull of 'fc.weight'");
  pending->set_seq(3);
  pending->set_age_ms(31000);
  auto* count = report.envelope.mutable_stall_report()->add_counts();
  count->set_label("barrier");
  count->set_count(2);
  report.envelope.mutable_stall_report()->set_idle_ms(500);
  Write(dir, "heartbeat_stall_report", report, "");
  auto watch = MakeMessage(proto::HEARTBEAT_ACK, 0);
  watch.envelope.mutable_stall_watch()->set_report_after_ms(30000);
  watch.envelope.mutable_stall_watch()->add_labels("push_pull of 'fc.weight'");
  Write(dir, "heartbeat_ack_stall_watch", watch, "");
  auto stall = MakeMessage(proto::STALL, 0);
  stall.envelope.mutable_stall()->set_label("barrier");
  stall.envelope.mutable_stall()->set_seq(1);
  stall.envelope.mutable_stall()->set_waited_ms(61000);
  stall.envelope.mutable_stall()->add_missing_ranks(2);
  stall.envelope.mutable_stall()->set_message("stall: barrier ...");
  Write(dir, "stall", stall, "");
  auto release = MakeMessage(proto::BARRIER_RELEASE, 0);
  release.envelope.mutable_barrier()->set_group(proto::GROUP_JOIN);
  release.envelope.mutable_barrier()->set_last_rank(1);
  Write(dir, "barrier_release", release, "");
  auto join_barrier = MakeMessage(proto::BARRIER, 3);
  join_barrier.envelope.mutable_barrier()->set_group(proto::GROUP_JOIN);
  join_barrier.envelope.mutable_barrier()->set_join_position(2);
  join_barrier.envelope.mutable_barrier()->set_catalog_digest(0x0123456789abcdefull);
  Write(dir, "barrier_join", join_barrier, "");
  auto retire = MakeMessage(proto::RETIRE, 3);  // protocol 5: a name declared anew
  retire.envelope.set_key(ferry::MakeKey(9, 0));
  Write(dir, "retire", retire, "");
  Write(dir, "suspend", MakeMessage(proto::SUSPEND, 3), "");  // protocol 5: re-initialisation
  Write(dir, "resume", MakeMessage(proto::RESUME, 3), "");
  auto ready = MakeMessage(proto::SHM_READY, -1);  // protocol 6: the shared-memory lane
  ready.envelope.mutable_shm_probe()->set_hello_nonce(0x1122334455667788ull);
  ready.envelope.mutable_shm_probe()->set_probe_nonce(0x99aabbccddeeff00ull);
  Write(dir, "shm_ready", ready, "");
  auto described = MakeMessage(proto::PUSH, 3);  // a payload in shared memory: a descriptor
  described.envelope.set_key(ferry::MakeKey(2, 1));
  described.envelope.set_dtype(proto::FLOAT32);
  described.envelope.set_length(4096);
  described.envelope.mutable_shm_slot()->set_segment(1);
  described.envelope.mutable_shm_slot()->set_offset(64);
  described.envelope.mutable_shm_slot()->set_bytes(4096);
  // Valid only once the receiving Van's lane resolved it into a payload (shm_lane.h).
  Write(dir, "push_shm", described, "", /*valid=*/false);
  auto failed = MakeMessage(proto::NODE_FAILED, 0);
  failed.envelope.mutable_failure()->set_reason("server 1 died");
  Write(dir, "node_failed", failed, "");
  for (int dtype = 0; dtype < 6; ++dtype) {
    auto push = MakeMessage(proto::PUSH, 3);
    push.envelope.set_key(ferry::MakeKey(2, 1));
    push.envelope.set_round(7);
    push.envelope.set_dtype(static_cast<proto::DataTypeProto>(dtype));
    std::string payload(64, '\x01');
    push.envelope.set_length(payload.size());
    push.envelope.set_tensor_hash(0x1234);
    Write(dir, "push_dtype" + std::to_string(dtype), push, payload);
    if (dtype == 4) {  // protocol 4: combined by max instead of summed
      push.envelope.set_reduce_op(proto::REDUCE_MAX);
      Write(dir, "push_reduce_max", push, payload);
    }
  }
  // A fused push of three pushes (float16, float32, an empty int64 tensor), 22 bytes.
  std::vector<ferry::Message> parts;
  const int dtypes[] = {1, 0, 5};
  const size_t sizes[] = {6, 16, 0};
  for (int i = 0; i < 3; ++i) {
    auto part = MakeMessage(proto::PUSH, 3);
    part.envelope.set_request_id(10 + i);
    part.envelope.set_key(ferry::MakeLayoutKey(i, 1, 0));
    part.envelope.set_dtype(static_cast<proto::DataTypeProto>(dtypes[i]));
    part.envelope.set_length(sizes[i]);
    part.envelope.set_priority(-i);
    const std::string bytes(sizes[i], '\x03');
    if (sizes[i]) part.payload = ferry::Buffer::CopyOf(bytes.data(), bytes.size());
    parts.push_back(std::move(part));
  }
  const ferry::Message fused = ferry::MakeFusedPush(3, {&parts[0], &parts[1], &parts[2]});
  Write(dir, "push_fused", fused,
        std::string(static_cast<const char*>(fused.payload.data()), fused.payload.size()));
  // Frames (protocol 3): a key of 200 bytes in 64-byte frames; the second frame (bytes
  // 64..127) and the last, short one (bytes 192..199).
  for (uint64_t offset : {64, 192}) {
    auto frame = MakeMessage(proto::PUSH, 3);
    frame.envelope.set_request_id(12);
    frame.envelope.set_key(ferry::MakeKey(2, 1));
    frame.envelope.set_round(7);
    frame.envelope.set_dtype(proto::FLOAT32);
    ferry::SetFrame(&frame.envelope, offset, /*key_length=*/200, /*frame_bytes=*/64);
    const std::string bytes(std::min<uint64_t>(64, 200 - offset), '\x06');
    frame.envelope.set_length(bytes.size());
    Write(dir, offset == 64 ? "push_frame" : "push_frame_last", frame, bytes);
  }
  // Compressed pushes (protocol 10): 37 float32 values in every compressor's format.
  for (const char* text : {"onebit+ef", "topk:0.25", "randomk:0.25", "dither:8", "fp16"}) {
    ferry::CompressionSpec spec;
    ferry::CompressionSpec::Parse(text, &spec).ThrowIfError();
    std::vector<float> values(37);
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 7) - 3.0f;
    std::string bytes(ferry::CompressedBytes(spec, values.size()), '\0');
    ferry::CompressFloats(spec, values.data(), values.size(),
                          ferry::PushSeed(spec, ferry::MakeKey(4, 0), 2, 0),
                          reinterpret_cast<uint8_t*>(bytes.data()));
    auto push = MakeMessage(proto::PUSH, 3);
    push.envelope.set_request_id(21);
    push.envelope.set_key(ferry::MakeKey(4, 0));
    push.envelope.set_round(2);
    push.envelope.set_dtype(proto::FLOAT32);
    push.envelope.set_compression(spec.ToString());
    push.envelope.set_raw_length(values.size() * 4);
    push.envelope.set_length(bytes.size());
    std::string name = std::string("push_compressed_") + text;
    for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    Write(dir, name, push, bytes);
  }
  auto result = MakeMessage(proto::PUSH_RESULT, 1);
  result.envelope.set_length(16);
  Write(dir, "push_result", result, std::string(16, '\x02'));
  auto result_frame = MakeMessage(proto::PUSH_RESULT, 1);
  result_frame.envelope.set_request_id(12);
  result_frame.envelope.set_key(ferry::MakeKey(2, 1));
  result_frame.envelope.set_round(7);
  result_frame.envelope.set_dtype(proto::FLOAT32);
  ferry::SetFrame(&result_frame.envelope, /*offset=*/64, /*key_length=*/200, /*frame_bytes=*/64);
  result_frame.envelope.set_length(64);
  Write(dir, "push_result_frame", result_frame, std::string(64, '\x07'));
  auto ack = MakeMessage(proto::PUSH_ACK, 1);
  ack.envelope.set_request_id(9);
  ack.envelope.set_key(ferry::MakeKey(2, 1));
  Write(dir, "push_ack", ack, "");
  auto ack_frame = ack;  // the acknowledgement of one frame: its offset
  ack_frame.envelope.set_request_id(12);
  ack_frame.envelope.set_offset(64);
  Write(dir, "push_ack_frame", ack_frame, "");
  auto resend_sum = MakeMessage(proto::RESEND_SUM, 3);
  resend_sum.envelope.set_request_id(9);
  resend_sum.envelope.set_key(ferry::MakeKey(2, 1));
  resend_sum.envelope.set_round(4);
  Write(dir, "resend_sum", resend_sum, "");
  auto err = MakeMessage(proto::ERROR, 1);
  err.envelope.mutable_error()->set_reason("mismatch");
  Write(dir, "error", err, "");
  // Sparse rows: 3 rows (ids 4, 0, 4) of 2 float32 elements; the sums of the same rows.
  auto rows = MakeMessage(proto::ROWS_PUSH, 3);
  rows.envelope.set_request_id(11);
  rows.envelope.set_key(ferry::RowsKey(2, 1));
  rows.envelope.set_round(5);
  rows.envelope.set_dtype(proto::FLOAT32);
  rows.envelope.mutable_rows()->set_num_rows(3);
  rows.envelope.mutable_rows()->set_row_elements(2);
  rows.envelope.mutable_rows()->set_total_rows(10);
  std::string row_payload;
  for (int64_t id : {4, 0, 4}) row_payload.append(reinterpret_cast<const char*>(&id), sizeof id);
  row_payload.append(3 * 2 * sizeof(float), '\x04');
  rows.envelope.set_length(row_payload.size());
  Write(dir, "rows_push", rows, row_payload);
  auto rows_result = MakeMessage(proto::ROWS_RESULT, 1);
  rows_result.envelope.set_request_id(11);
  rows_result.envelope.set_key(ferry::RowsKey(2, 1));
  rows_result.envelope.set_dtype(proto::FLOAT32);
  rows_result.envelope.mutable_rows()->set_num_rows(3);
  rows_result.envelope.mutable_rows()->set_row_elements(2);
  rows_result.envelope.set_length(3 * 2 * sizeof(float));
  Write(dir, "rows_result", rows_result, std::string(3 * 2 * sizeof(float), '\x05'));
  return all_as_expected ? 0 : 1;
}
