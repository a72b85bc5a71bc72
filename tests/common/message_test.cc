// Tests of the message helpers (common/transport/message.h): key packing, the checks
// ValidateMessage applies to everything that arrives from the network, envelope
// parsing and the log description.

#include "common/transport/message.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/transport/rows_message.h"
#include "common/util/strings.h"

namespace ferry {
namespace {

constexpr uint64_t kLimit = 1 << 20;

// A valid PUSH of `floats` float32 elements.
Message GoodPush(size_t floats = 16) {
  Message m = MakeMessage(proto::PUSH, 5);
  m.envelope.set_key(MakeKey(3, 1));
  m.envelope.set_round(2);
  m.envelope.set_dtype(proto::FLOAT32);
  m.envelope.set_request_id(42);
  m.payload = Buffer::Allocate(floats * sizeof(float));
  m.envelope.set_length(m.payload.size());
  return m;
}

TEST(MessageTest, KeyRoundTrip) {
  const uint32_t values[] = {0u, 1u, 2u, 77u, 0x7fffffffu, 0x80000000u, 0xfffffffeu, 0xffffffffu};
  for (uint32_t tensor : values) {
    for (uint32_t partition : values) {
      uint64_t key = MakeKey(tensor, partition);
      EXPECT_EQ(KeyTensor(key), tensor);
      EXPECT_EQ(KeyPartition(key), partition);
    }
  }
  EXPECT_EQ(MakeKey(0, 0), 0u);
  EXPECT_EQ(MakeKey(1, 0), 1ull << 32);
  EXPECT_EQ(MakeKey(0, 1), 1u);
  EXPECT_EQ(MakeKey(0xffffffffu, 0xffffffffu), ~0ull);
  EXPECT_EQ(KeyName(MakeKey(3, 1)), "tensor 3 partition 1");
}

TEST(MessageTest, MakeMessageFillsVersionTypeSender) {
  Message m = MakeMessage(proto::HEARTBEAT, 7);
  EXPECT_EQ(m.envelope.version(), kProtocolVersion);
  EXPECT_EQ(m.type(), proto::HEARTBEAT);
  EXPECT_EQ(m.sender(), 7);
  EXPECT_TRUE(m.payload.empty());
  EXPECT_TRUE(ValidateMessage(m, kLimit).ok());
}

TEST(MessageTest, AcceptsValidMessages) {
  EXPECT_TRUE(ValidateMessage(GoodPush(), kLimit).ok());

  // A push of no elements carries no payload frame.
  Message empty_push = MakeMessage(proto::PUSH, 1);
  empty_push.envelope.set_dtype(proto::FLOAT64);
  EXPECT_TRUE(ValidateMessage(empty_push, kLimit).ok());

  Message result = MakeMessage(proto::PUSH_RESULT, 1);
  result.envelope.set_dtype(proto::INT64);
  result.payload = Buffer::Allocate(24);
  result.envelope.set_length(24);
  EXPECT_TRUE(ValidateMessage(result, kLimit).ok());

  // Exactly at the limit is allowed.
  Message at_limit = GoodPush(kLimit / sizeof(float));
  EXPECT_TRUE(ValidateMessage(at_limit, kLimit).ok());

  Message reg = MakeMessage(proto::REGISTER, -1);
  reg.envelope.mutable_register_request()->set_role(proto::WORKER);
  EXPECT_TRUE(ValidateMessage(reg, kLimit).ok());
  Message table = MakeMessage(proto::NODE_TABLE, 0);
  table.envelope.mutable_node_table()->set_your_id(3);
  EXPECT_TRUE(ValidateMessage(table, kLimit).ok());
  Message barrier = MakeMessage(proto::BARRIER, 2);
  barrier.envelope.mutable_barrier()->set_group(proto::GROUP_WORKERS);
  EXPECT_TRUE(ValidateMessage(barrier, kLimit).ok());
  Message failed = MakeMessage(proto::NODE_FAILED, 0);
  failed.envelope.mutable_failure()->set_node_id(4);
  EXPECT_TRUE(ValidateMessage(failed, kLimit).ok());
  Message error = MakeMessage(proto::ERROR, 1);
  error.envelope.mutable_error()->set_reason("x");
  EXPECT_TRUE(ValidateMessage(error, kLimit).ok());
  for (proto::MessageType t : {proto::BARRIER_RELEASE, proto::HEARTBEAT, proto::HEARTBEAT_ACK,
                               proto::FINALIZE, proto::SHUTDOWN, proto::PUSH_ACK}) {
    SCOPED_TRACE(MessageTypeName(t));
    EXPECT_TRUE(ValidateMessage(MakeMessage(t, 1), kLimit).ok());
  }
}

// The frame at `offset` of a float32 key of `key_length` bytes cut in `frame_bytes`.
Message Frame(uint64_t key_length, uint64_t frame_bytes, uint64_t offset, uint64_t length) {
  Message m = GoodPush(length / sizeof(float));
  SetFrame(&m.envelope, offset, key_length, frame_bytes);
  return m;
}

TEST(MessageTest, FramesFollowTheirCut) {
  EXPECT_EQ(FrameCount(1000, 256), 4u);
  EXPECT_EQ(FrameCount(1024, 256), 4u);
  EXPECT_EQ(FrameCount(1024, 0), 1u);
  EXPECT_EQ(FrameCount(0, 256), 1u);
  // The most frames a key may have (kMaxFramesPerKey): the last frame is valid, one more is not.
  EXPECT_TRUE(
      ValidateMessage(Frame(kMaxFramesPerKey * 8, 8, (kMaxFramesPerKey - 1) * 8, 8), kLimit).ok());
  EXPECT_FALSE(ValidateMessage(Frame(kMaxFramesPerKey * 8 + 8, 8, 0, 8), kLimit).ok());
  // Whole keys: frame_bytes 0, offset 0, key_length 0 or the length.
  EXPECT_TRUE(ValidateMessage(GoodPush(), kLimit).ok());
  EXPECT_TRUE(ValidateMessage(Frame(64, 0, 0, 64), kLimit).ok());
  EXPECT_EQ(FrameKeyLength(GoodPush().envelope), 64u);
  EXPECT_EQ(FrameSize(GoodPush().envelope), 64u);
  // A 1000-byte key in 256-byte frames: 256, 256, 256, 232.
  for (uint64_t offset : {0u, 256u, 512u}) {
    EXPECT_TRUE(ValidateMessage(Frame(1000, 256, offset, 256), kLimit).ok()) << offset;
  }
  const Message last = Frame(1000, 256, 768, 232);
  EXPECT_TRUE(ValidateMessage(last, kLimit).ok());
  EXPECT_EQ(FrameSize(last.envelope), 256u);
  EXPECT_EQ(FrameKeyLength(last.envelope), 1000u);
  struct Bad {
    Message m;
    const char* why;
  };
  const Bad bad[] = {
      {Frame(64, 0, 16, 48), "must be at offset 0"},
      {Frame(128, 0, 0, 64), "says the key has 128"},
      {Frame(1000, 256, 1024, 0), "past the key"},
      {Frame(1000, 256, 1000, 0), "past the key"},
      {Frame(0, 256, 0, 256), "past the key"},
      {Frame(1000, 256, 128, 256), "not a multiple of the frame size"},
      {Frame(1000, 256, 256, 128), "128 bytes where the frame has 256"},  // short middle frame
      {Frame(1000, 256, 768, 256), "256 bytes where the frame has 232"},  // last frame too long
      {Frame(1000, 254, 0, 252), "not a whole number of float32"},
      {Frame(kLimit * 4, kLimit * 2, 0, 256), "exceeds the limit"},
      {Frame(1ull << 40, 256, 0, 256), "exceeds the limit of 1048576"},  // FrameCount would wrap
      {Frame(65536 * 8 + 8, 8, 0, 8), "more than 65536 frames of 8"},
  };
  for (const Bad& b : bad) {
    const std::string error = ValidateMessage(b.m, kLimit).message();
    EXPECT_TRUE(StrContains(error, b.why)) << error << " (expected: " << b.why << ")";
    EXPECT_TRUE(StrContains(error, "tensor 3 partition 1 round 2 at offset")) << error;
  }
}

TEST(MessageTest, RejectsWrongVersion) {
  for (uint32_t version : {0u, 1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u, 9u, 10u, 11u, 12u, kProtocolVersion + 1, 1000u}) {
    Message m = GoodPush();
    m.envelope.set_version(version);
    std::string error = ValidateMessage(m, kLimit).message();
    EXPECT_TRUE(StrContains(error, "version")) << error;
  }
  // A peer of an earlier release (version 2: before frames) is told apart by the number.
  Message v2 = GoodPush();
  v2.envelope.set_version(2);
  EXPECT_TRUE(
      StrContains(ValidateMessage(v2, kLimit).message(), "protocol version 2 (this node speaks 13)"))
      << ValidateMessage(v2, kLimit).message();
}

TEST(MessageTest, ACompressedPayloadStandsForWholeElements) {
  Message m = GoodPush();  // float32
  m.envelope.set_compression("onebit");
  m.envelope.set_raw_length(4000);
  m.payload = Buffer::Allocate(4 + 125);  // not a multiple of 4: compressed bytes
  m.envelope.set_length(m.payload.size());
  EXPECT_TRUE(ValidateMessage(m, kLimit).ok()) << ValidateMessage(m, kLimit).message();
  m.envelope.set_raw_length(4001);
  EXPECT_TRUE(StrContains(ValidateMessage(m, kLimit).message(), "standing for 4001 bytes"));
  m.envelope.set_raw_length(kLimit + 4);
  EXPECT_TRUE(StrContains(ValidateMessage(m, kLimit).message(), "within the limit"));
  m.envelope.set_raw_length(4000);
  SetFrame(&m.envelope, 0, 8000, 4000);  // compressed keys are never cut in frames
  EXPECT_FALSE(ValidateMessage(m, kLimit).ok());
  SetFrame(&m.envelope, 0, 64, 0);  // a whole key that says it has other bytes (fuzzer)
  EXPECT_TRUE(StrContains(ValidateMessage(m, kLimit).message(), "says the key has 64"))
      << ValidateMessage(m, kLimit).message();
}

TEST(MessageTest, RejectsUnknownReduceOp) {
  Message m = GoodPush();
  m.envelope.set_reduce_op(proto::REDUCE_PRODUCT);
  EXPECT_TRUE(ValidateMessage(m, kLimit).ok());
  m.envelope.set_reduce_op(static_cast<proto::ReduceOpProto>(9));
  EXPECT_TRUE(StrContains(ValidateMessage(m, kLimit).message(), "unknown reduce op 9"))
      << ValidateMessage(m, kLimit).message();
}

TEST(MessageTest, StallNeedsItsBody) {
  Message bare = MakeMessage(proto::STALL, 0);
  EXPECT_TRUE(StrContains(ValidateMessage(bare, kLimit).message(), "STALL without its body"))
      << ValidateMessage(bare, kLimit).message();
  Message stall = MakeMessage(proto::STALL, 0);
  stall.envelope.mutable_stall()->set_message("stall: barrier");
  EXPECT_TRUE(ValidateMessage(stall, kLimit).ok());
  // A heartbeat may carry a report, or nothing (servers).
  Message heartbeat = MakeMessage(proto::HEARTBEAT, 3);
  EXPECT_TRUE(ValidateMessage(heartbeat, kLimit).ok());
  heartbeat.envelope.mutable_stall_report()->set_idle_ms(5);
  EXPECT_TRUE(ValidateMessage(heartbeat, kLimit).ok());
}

TEST(MessageTest, RejectsUnknownType) {
  Message m = MakeMessage(static_cast<proto::MessageType>(77), 1);
  std::string error = ValidateMessage(m, kLimit).message();
  EXPECT_TRUE(StrContains(error, "unknown message type 77")) << error;

  Message zero = MakeMessage(proto::MESSAGE_TYPE_UNSPECIFIED, 1);
  error = ValidateMessage(zero, kLimit).message();
  EXPECT_TRUE(StrContains(error, "unknown message type 0")) << error;

  Message negative = MakeMessage(static_cast<proto::MessageType>(-3), 1);
  EXPECT_FALSE(ValidateMessage(negative, kLimit).ok());
  EXPECT_EQ(ValidateMessage(negative, kLimit).code(), ErrorCode::kBadMessage);

  EXPECT_EQ(MessageTypeName(proto::PUSH), "PUSH");
  EXPECT_EQ(MessageTypeName(proto::REGISTER), "REGISTER");
  EXPECT_EQ(MessageTypeName(77), "type 77");
}

TEST(MessageTest, RejectsControlMessageWithoutBody) {
  for (proto::MessageType t : {proto::REGISTER, proto::NODE_TABLE, proto::BARRIER,
                               proto::NODE_FAILED, proto::ERROR}) {
    SCOPED_TRACE(MessageTypeName(t));
    Message m = MakeMessage(t, 1);
    std::string error = ValidateMessage(m, kLimit).message();
    EXPECT_TRUE(StrContains(error, "without its body")) << error;
    EXPECT_TRUE(StrContains(error, MessageTypeName(t))) << error;
  }
  // The wrong body is as bad as none.
  Message m = MakeMessage(proto::REGISTER, 1);
  m.envelope.mutable_barrier();
  EXPECT_TRUE(StrContains(ValidateMessage(m, kLimit).message(), "without its body"));
}

TEST(MessageTest, RejectsPayloadOnControlMessage) {
  for (proto::MessageType t : {proto::HEARTBEAT, proto::BARRIER_RELEASE, proto::PUSH_ACK,
                               proto::SHUTDOWN}) {
    SCOPED_TRACE(MessageTypeName(t));
    Message m = MakeMessage(t, 1);
    m.payload = Buffer::Allocate(8);
    std::string error = ValidateMessage(m, kLimit).message();
    EXPECT_TRUE(StrContains(error, "with a payload frame")) << error;
  }
  Message error_msg = MakeMessage(proto::ERROR, 1);
  error_msg.envelope.mutable_error()->set_code(5);
  error_msg.payload = Buffer::Allocate(4);
  EXPECT_TRUE(StrContains(ValidateMessage(error_msg, kLimit).message(), "with a payload frame"));
}

TEST(MessageTest, RejectsLengthMismatch) {
  Message m = GoodPush(16);
  m.envelope.set_length(60);
  std::string error = ValidateMessage(m, kLimit).message();
  EXPECT_TRUE(StrContains(error, "length field 60")) << error;
  EXPECT_TRUE(StrContains(error, "64 bytes")) << error;

  Message no_payload = GoodPush(16);
  no_payload.payload = Buffer();
  EXPECT_FALSE(ValidateMessage(no_payload, kLimit).ok());

  Message longer = GoodPush(16);
  longer.envelope.set_length(128);
  EXPECT_FALSE(ValidateMessage(longer, kLimit).ok());
}

TEST(MessageTest, RejectsUnknownDtype) {
  for (int dtype : {6, 42, -1}) {
    SCOPED_TRACE(dtype);
    Message m = GoodPush();
    m.envelope.set_dtype(static_cast<proto::DataTypeProto>(dtype));
    std::string error = ValidateMessage(m, kLimit).message();
    EXPECT_TRUE(StrContains(error, "unknown dtype")) << error;
  }
}

TEST(MessageTest, RejectsPartialElements) {
  struct Case {
    proto::DataTypeProto dtype;
    size_t bytes;
  };
  const Case bad[] = {{proto::FLOAT32, 6},  {proto::FLOAT32, 1}, {proto::FLOAT16, 3},
                      {proto::BFLOAT16, 5}, {proto::FLOAT64, 12}, {proto::INT32, 2},
                      {proto::INT64, 20}};
  for (const Case& c : bad) {
    SCOPED_TRACE(c.bytes);
    Message m = MakeMessage(proto::PUSH, 1);
    m.envelope.set_dtype(c.dtype);
    m.payload = Buffer::Allocate(c.bytes);
    m.envelope.set_length(c.bytes);
    std::string error = ValidateMessage(m, kLimit).message();
    EXPECT_TRUE(StrContains(error, "not a whole number")) << error;
  }
  const Case good[] = {{proto::FLOAT16, 6}, {proto::BFLOAT16, 2}, {proto::FLOAT64, 16},
                       {proto::INT32, 12},  {proto::INT64, 24}};
  for (const Case& c : good) {
    Message m = MakeMessage(proto::PUSH_RESULT, 1);
    m.envelope.set_dtype(c.dtype);
    m.payload = Buffer::Allocate(c.bytes);
    m.envelope.set_length(c.bytes);
    EXPECT_TRUE(ValidateMessage(m, kLimit).ok());
  }
}

TEST(MessageTest, RejectsPayloadAboveLimit) {
  Message m = GoodPush(kLimit / sizeof(float) + 1);
  std::string error = ValidateMessage(m, kLimit).message();
  EXPECT_TRUE(StrContains(error, "exceeds the limit")) << error;
  EXPECT_TRUE(ValidateMessage(m, kLimit + sizeof(float)).ok());
}

TEST(MessageTest, ParseEnvelope) {
  Message m = GoodPush();
  m.envelope.set_priority(-3);
  m.envelope.set_tensor_hash(0x1234567890abcdefull);
  std::string wire = m.envelope.SerializeAsString();

  proto::Envelope parsed;
  std::string error;
  ASSERT_TRUE(ParseEnvelope(wire.data(), wire.size(), &parsed, &error)) << error;
  EXPECT_EQ(parsed.version(), kProtocolVersion);
  EXPECT_EQ(parsed.type(), proto::PUSH);
  EXPECT_EQ(parsed.sender(), 5);
  EXPECT_EQ(parsed.key(), MakeKey(3, 1));
  EXPECT_EQ(parsed.round(), 2u);
  EXPECT_EQ(parsed.request_id(), 42u);
  EXPECT_EQ(parsed.length(), 64u);
  EXPECT_EQ(parsed.priority(), -3);
  EXPECT_EQ(parsed.tensor_hash(), 0x1234567890abcdefull);

  // A control body survives too.
  Message reg = MakeMessage(proto::REGISTER, -1);
  reg.envelope.mutable_register_request()->set_host("10.0.0.1");
  reg.envelope.mutable_register_request()->set_port(1234);
  wire = reg.envelope.SerializeAsString();
  ASSERT_TRUE(ParseEnvelope(wire.data(), wire.size(), &parsed, &error)) << error;
  EXPECT_EQ(parsed.body_case(), proto::Envelope::kRegisterRequest);
  EXPECT_EQ(parsed.register_request().host(), "10.0.0.1");
  EXPECT_EQ(parsed.register_request().port(), 1234);
}

TEST(MessageTest, ParseEnvelopeRejectsGarbage) {
  proto::Envelope parsed;
  std::string error;
  // "garbage": 'g' (0x67) is field 12 with wire type 7, which does not exist.
  const std::string garbage = "garbage";
  EXPECT_FALSE(ParseEnvelope(garbage.data(), garbage.size(), &parsed, &error));
  EXPECT_TRUE(StrContains(error, "not a valid Ferry envelope")) << error;

  // A varint that never ends.
  const std::vector<uint8_t> endless(16, 0xff);
  error.clear();
  EXPECT_FALSE(ParseEnvelope(endless.data(), endless.size(), &parsed, &error));
  EXPECT_FALSE(error.empty());

  // A length-delimited field (register_request, field 20) longer than the frame.
  const uint8_t truncated[] = {0xa2, 0x01, 0x7f, 0x00};
  error.clear();
  EXPECT_FALSE(ParseEnvelope(truncated, sizeof truncated, &parsed, &error));
  EXPECT_FALSE(error.empty());

  // A valid message cut short.
  std::string wire = GoodPush().envelope.SerializeAsString();
  ASSERT_GT(wire.size(), 2u);
  error.clear();
  EXPECT_FALSE(ParseEnvelope(wire.data(), wire.size() - 1, &parsed, &error)) << wire.size();

  // Frames above 1 MiB are refused before parsing.
  std::string huge(size_t{1} << 21, '\0');
  error.clear();
  EXPECT_FALSE(ParseEnvelope(huge.data(), huge.size(), &parsed, &error));
  EXPECT_TRUE(StrContains(error, "exceeds")) << error;
}

TEST(MessageTest, DescribeMentionsTheKey) {
  Message m = GoodPush();
  std::string d = Describe(m);
  EXPECT_TRUE(StrContains(d, "PUSH")) << d;
  EXPECT_TRUE(StrContains(d, "node 5")) << d;
  EXPECT_TRUE(StrContains(d, "tensor 3 partition 1")) << d;
  EXPECT_TRUE(StrContains(d, "round 2")) << d;
  EXPECT_TRUE(StrContains(d, "64 bytes")) << d;
  EXPECT_TRUE(StrContains(d, "request 42")) << d;

  std::string h = Describe(MakeMessage(proto::HEARTBEAT, 9));
  EXPECT_TRUE(StrContains(h, "HEARTBEAT")) << h;
  EXPECT_TRUE(StrContains(h, "node 9")) << h;
}

// A valid ROWS_PUSH of `rows` rows of 4 float32 elements of a 100-row tensor.
Message GoodRowsPush(uint64_t rows = 3) {
  Message m = MakeMessage(proto::ROWS_PUSH, 5);
  m.envelope.set_key(RowsKey(3, 1));
  m.envelope.set_dtype(proto::FLOAT32);
  m.envelope.set_request_id(43);
  m.envelope.mutable_rows()->set_num_rows(rows);
  m.envelope.mutable_rows()->set_row_elements(4);
  m.envelope.mutable_rows()->set_total_rows(100);
  if (rows > 0) m.payload = Buffer::Allocate(rows * (8 + 4 * sizeof(float)));
  m.envelope.set_length(m.payload.size());
  return m;
}

TEST(MessageTest, RowsMessagesAreCheckedAgainstTheirHeader) {
  EXPECT_TRUE(ValidateMessage(GoodRowsPush(), kLimit).ok());
  EXPECT_TRUE(ValidateMessage(GoodRowsPush(0), kLimit).ok());  // a round with no rows
  Message no_body = GoodRowsPush();
  no_body.envelope.clear_rows();
  EXPECT_TRUE(
      StrContains(ValidateMessage(no_body, kLimit).message(), "ROWS_PUSH without its body"));
  Message short_payload = GoodRowsPush();
  short_payload.envelope.mutable_rows()->set_num_rows(4);
  EXPECT_TRUE(StrContains(ValidateMessage(short_payload, kLimit).message(),
                          "4 rows of 4 float32 elements"));
  Message empty_rows = GoodRowsPush();
  empty_rows.envelope.mutable_rows()->set_row_elements(0);
  EXPECT_TRUE(StrContains(ValidateMessage(empty_rows, kLimit).message(), "rows of 0 elements"));
  Message no_tensor = GoodRowsPush();
  no_tensor.envelope.mutable_rows()->set_total_rows(0);
  EXPECT_TRUE(StrContains(ValidateMessage(no_tensor, kLimit).message(), "a tensor of 0 rows"));
  Message overflow = GoodRowsPush();
  overflow.envelope.mutable_rows()->set_num_rows(1ull << 62);
  EXPECT_FALSE(ValidateMessage(overflow, kLimit).ok());
  overflow.envelope.mutable_rows()->set_num_rows(1);
  overflow.envelope.mutable_rows()->set_row_elements(1ull << 63);
  EXPECT_FALSE(ValidateMessage(overflow, kLimit).ok());
  EXPECT_TRUE(
      StrContains(ValidateMessage(GoodRowsPush(50000), kLimit).message(), "exceeds the limit"));
  // A result carries the values only (no ids).
  Message result = MakeMessage(proto::ROWS_RESULT, 1);
  result.envelope.set_dtype(proto::FLOAT16);
  result.envelope.mutable_rows()->set_num_rows(3);
  result.envelope.mutable_rows()->set_row_elements(5);
  result.payload = Buffer::Allocate(3 * 5 * 2);
  result.envelope.set_length(result.payload.size());
  EXPECT_TRUE(ValidateMessage(result, kLimit).ok());
  result.payload = Buffer::Allocate(3 * 5 * 2 + 3 * 8);
  result.envelope.set_length(result.payload.size());
  EXPECT_FALSE(ValidateMessage(result, kLimit).ok());
  EXPECT_EQ(Describe(GoodRowsPush()),
            "ROWS_PUSH from node 5 request 43 rows of tensor 3 on server 1 round 0 3 rows, 72 bytes");
}

TEST(MessageTest, RowsPayloadBytesRefusesOverflow) {
  uint64_t bytes = 0;
  EXPECT_TRUE(RowsPayloadBytes(10, 16, DataType::kFloat32, true, &bytes));
  EXPECT_EQ(bytes, 10u * (8 + 64));
  EXPECT_TRUE(RowsPayloadBytes(10, 16, DataType::kFloat16, false, &bytes));
  EXPECT_EQ(bytes, 320u);
  EXPECT_FALSE(RowsPayloadBytes(1, 1ull << 62, DataType::kFloat32, false, &bytes));
  EXPECT_FALSE(RowsPayloadBytes(1ull << 61, 1, DataType::kFloat64, true, &bytes));
}

}  // namespace
}  // namespace ferry
