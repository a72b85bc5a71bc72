// Tests of worker/reserved_tensor_names.h: one convention for Ferry's own tensors, and
// the refusal of user tensors in that namespace.
#include "worker/reserved_tensor_names.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace ferry {
namespace {

TEST(ReservedTensorNamesTest, OneConvention) {
  EXPECT_EQ(ReservedTensorName(reserved::kAutotune), "__ferry__/autotune");
  EXPECT_EQ(ReservedTensorName(reserved::kBroadcast, "fc.weight"), "__ferry__/broadcast/fc.weight");
  EXPECT_EQ(ReservedTensorName(reserved::kLocalBarrier), "__ferry__/local_barrier");
  EXPECT_EQ(ReservedTensorName(reserved::kDevice, "w"), "__ferry__/device/w");
  EXPECT_EQ(ReservedTensorName(reserved::kBinding, "host_ids"), "__ferry__/binding/host_ids");
  // The kinds never collide with each other.
  std::set<std::string> kinds;
  for (auto kind : {reserved::kBroadcast, reserved::kAutotune, reserved::kLocalBarrier,
                    reserved::kDevice, reserved::kBinding}) {
    EXPECT_TRUE(kinds.insert(std::string(kind)).second) << kind;
    EXPECT_TRUE(IsReservedTensorName(ReservedTensorName(kind, "x")));
  }
}

TEST(ReservedTensorNamesTest, UserNamesPass) {
  for (const char* name : {"fc.weight", "", "__ferry__", "_ferry__/x", "__broadcast__/x",
                           "x/__ferry__/y", "ferry.init.host_ids"}) {
    EXPECT_FALSE(IsReservedTensorName(name)) << name;
    EXPECT_NO_THROW(CheckUserTensorName("push_pull", name)) << name;
  }
}

TEST(ReservedTensorNamesTest, ReservedNamesAreRefusedByName) {
  for (const std::string& name :
       {ReservedTensorName(reserved::kBroadcast, "w"), ReservedTensorName(reserved::kAutotune),
        std::string("__ferry__/"), std::string("__ferry__/mine")}) {
    try {
      CheckUserTensorName("broadcast", name);
      ADD_FAILURE() << name << " was accepted";
    } catch (const FerryError& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_EQ(std::string(e.what()),
                "broadcast of '" + name +
                    "': tensor names starting with '__ferry__/' are reserved for Ferry's own "
                    "tensors; rename the tensor");
    }
  }
}

TEST(ReservedTensorNamesTest, TheBindingsOwnTensorsPass) {
  // ferry.torch's host-id exchange travels through the public push_pull.
  EXPECT_NO_THROW(
      CheckUserTensorName("push_pull", ReservedTensorName(reserved::kBinding, "host_ids")));
}

}  // namespace
}  // namespace ferry
