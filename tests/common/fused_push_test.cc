// Tests of fused pushes (common/transport/fused_push.h): building, strict validation
// of everything a fused message says about its bytes, and zero-copy splitting.

#include "common/transport/fused_push.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/util/error.h"

namespace ferry {
namespace {

Message Push(uint64_t request, uint64_t key, DataType dtype, size_t bytes, uint8_t fill) {
  Message m = MakeMessage(proto::PUSH, 5);
  m.envelope.set_request_id(request);
  m.envelope.set_key(key);
  m.envelope.set_round(3);
  m.envelope.set_dtype(static_cast<proto::DataTypeProto>(dtype));
  m.envelope.set_length(bytes);
  m.envelope.set_priority(-static_cast<int>(request));
  m.envelope.set_tensor_hash(0xabc0 + request);
  if (bytes) {
    m.payload = Buffer::Allocate(bytes);
    std::memset(m.payload.data(), fill, bytes);
  }
  return m;
}

Message Fused(const std::vector<Message>& pushes) {
  std::vector<const Message*> ptrs;
  for (const Message& m : pushes) ptrs.push_back(&m);
  return MakeFusedPush(5, ptrs);
}

bool Has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(FusedPushTest, RoundTripSharesTheFrame) {
  std::vector<Message> pushes;
  pushes.push_back(Push(1, MakeKey(0, 0), DataType::kFloat16, 6, 0x11));  // odd offset after it
  pushes.push_back(Push(2, MakeLayoutKey(3, 2, 1), DataType::kFloat32, 16, 0x22));
  pushes.push_back(Push(3, MakeKey(4, 0), DataType::kInt64, 0, 0));  // empty tensor
  pushes.push_back(Push(4, MakeKey(5, 7), DataType::kFloat64, 8, 0x44));
  for (Message& m : pushes) m.envelope.set_backup_workers(2);  // the worker's setting
  pushes[1].envelope.set_average(true);                        // each push's own
  Message fused = Fused(pushes);
  EXPECT_EQ(fused.type(), proto::PUSH_FUSED);
  EXPECT_EQ(fused.envelope.request_id(), 1u);
  EXPECT_EQ(fused.envelope.length(), 30u);
  EXPECT_TRUE(ValidateMessage(fused, 1 << 20).ok());
  // The envelope survives the wire.
  Message wire;
  std::string bytes = fused.envelope.SerializeAsString();
  std::string error;
  ASSERT_TRUE(ParseEnvelope(bytes.data(), bytes.size(), &wire.envelope, &error)) << error;
  wire.payload = fused.payload;
  std::vector<Message> out;
  ASSERT_TRUE(SplitFusedPush(wire, &out).ok());
  ASSERT_EQ(out.size(), 4u);
  size_t at = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const proto::Envelope& a = out[i].envelope;
    const proto::Envelope& b = pushes[i].envelope;
    EXPECT_EQ(out[i].type(), proto::PUSH);
    EXPECT_EQ(a.sender(), 5);
    EXPECT_EQ(a.request_id(), b.request_id());
    EXPECT_EQ(a.key(), b.key());
    EXPECT_EQ(a.round(), b.round());
    EXPECT_EQ(a.dtype(), b.dtype());
    EXPECT_EQ(a.length(), b.length());
    EXPECT_EQ(a.priority(), b.priority());
    EXPECT_EQ(a.tensor_hash(), b.tensor_hash());
    EXPECT_EQ(a.average(), b.average()) << i;
    EXPECT_EQ(a.backup_workers(), 2u) << i;
    EXPECT_TRUE(ValidateMessage(out[i], 1 << 20).ok()) << i;
    ASSERT_EQ(out[i].payload.size(), pushes[i].payload.size());
    if (!out[i].payload.empty()) {
      // Zero copy: a slice of the fused frame, sharing its owner.
      EXPECT_EQ(out[i].payload.bytes(), wire.payload.bytes() + at);
      EXPECT_EQ(out[i].payload.owner(), wire.payload.owner());
      EXPECT_EQ(std::memcmp(out[i].payload.data(), pushes[i].payload.data(), a.length()), 0);
    }
    at += a.length();
  }
  EXPECT_TRUE(Has(Describe(fused), "of 4 pushes, 30 bytes")) << Describe(fused);
}

TEST(FusedPushTest, ValidationIsStrict) {
  std::vector<Message> pushes;
  pushes.push_back(Push(1, 1, DataType::kFloat32, 8, 1));
  pushes.push_back(Push(2, 2, DataType::kFloat32, 8, 2));
  const Message good = Fused(pushes);
  auto broken = [&](auto change) {
    Message m = good;
    change(m);
    return ValidateMessage(m, 1 << 20).message();
  };
  EXPECT_TRUE(Has(broken([](Message& m) { m.envelope.clear_fused_push(); }), "without its body"));
  EXPECT_TRUE(Has(broken([](Message& m) { m.envelope.mutable_fused_push()->clear_pushes(); }),
                  "with 0 pushes"));
  EXPECT_TRUE(Has(broken([](Message& m) { m.envelope.set_length(17); }), "length field 17"));
  EXPECT_TRUE(Has(
      broken([](Message& m) { m.envelope.mutable_fused_push()->mutable_pushes(1)->set_length(4); }),
      "add up to 12 bytes but the payload frame has 16"));
  EXPECT_TRUE(Has(broken([](Message& m) {
                    m.envelope.mutable_fused_push()->mutable_pushes(0)->set_length(12);
                  }),
                  "runs past the payload frame"));
  // Lengths that would overflow a sum of uint64s are caught one by one.
  EXPECT_TRUE(Has(broken([](Message& m) {
                    m.envelope.mutable_fused_push()->mutable_pushes(0)->set_length(~0ull - 3);
                  }),
                  "runs past"));
  EXPECT_TRUE(Has(broken([](Message& m) {
                    m.envelope.mutable_fused_push()->mutable_pushes(1)->set_length(6);
                    m.envelope.mutable_fused_push()->mutable_pushes(0)->set_length(10);
                  }),
                  "not a whole number of float32"));
  EXPECT_TRUE(Has(broken([](Message& m) {
                    m.envelope.mutable_fused_push()->mutable_pushes(1)->set_dtype(
                        static_cast<proto::DataTypeProto>(42));
                  }),
                  "unknown dtype 42"));
  EXPECT_TRUE(Has(ValidateMessage(good, 15).message(), "exceeds the limit of 15"));
  Message many = good;
  for (size_t i = 0; i < kMaxFusedPushes; ++i) {
    auto* s = many.envelope.mutable_fused_push()->add_pushes();
    s->set_length(0);
  }
  EXPECT_TRUE(Has(ValidateMessage(many, 1 << 20).message(), "pushes (1 to 4096 allowed)"));
  std::vector<Message> out = {Message()};
  EXPECT_FALSE(SplitFusedPush(many, &out).ok());
  EXPECT_TRUE(out.empty());
}

TEST(FusedPushTest, LayoutKeysNameTheirLayout) {
  EXPECT_EQ(MakeLayoutKey(3, 0, 1), MakeKey(3, 1));
  uint64_t key = MakeLayoutKey(3, 2, 5);
  EXPECT_EQ(KeyTensor(key), 3u);
  EXPECT_EQ(KeyLayout(key), 2u);
  EXPECT_NE(key, MakeKey(3, 5));
  EXPECT_EQ(KeyName(key), "tensor 3 partition 5 of layout 2");
  EXPECT_EQ(KeyName(MakeLayoutKey(7, 255, kMaxPartitionsPerTensor - 1)),
            "tensor 7 partition 16777215 of layout 255");
}

}  // namespace
}  // namespace ferry
