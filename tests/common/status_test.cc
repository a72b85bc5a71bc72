// Status, the error helpers and the string helpers (common/util).

#include "common/util/status.h"

#include <gtest/gtest.h>

#include <string>

#include "common/util/error.h"
#include "common/util/strings.h"

namespace ferry {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.ToString(), "ok");
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_NO_THROW(s.ThrowIfError());
}

TEST(StatusTest, ErrorKeepsCodeAndExactMessage) {
  Status s = BadMessageError("payload of 8 bytes exceeds the limit of 4");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kBadMessage);
  EXPECT_EQ(s.message(), "payload of 8 bytes exceeds the limit of 4");
  EXPECT_EQ(s.ToString(), "bad message: payload of 8 bytes exceeds the limit of 4");
  try {
    s.ThrowIfError();
    FAIL() << "no throw";
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBadMessage);
    EXPECT_STREQ(e.what(), "payload of 8 bytes exceeds the limit of 4");
  }
}

TEST(StringsTest, Helpers) {
  EXPECT_EQ(StrCat("key ", 3, " of ", 4.5), "key 3 of 4.5");
  EXPECT_TRUE(StrContains("tensor 3 partition 1", "partition"));
  EXPECT_FALSE(StrContains("tensor", "partition"));
  EXPECT_TRUE(StartsWith("gpu:1", "gpu:"));
  EXPECT_FALSE(StartsWith("gp", "gpu:"));
  EXPECT_EQ(AsciiToLower("TrUe"), "true");
  EXPECT_EQ(AsciiToUpper("warn"), "WARN");
}

TEST(ErrorTest, EnforceBuildsTheMessage) {
  try {
    FERRY_ENFORCE(1 + 1 == 3, ErrorCode::kInvalidArgument, "count ", 2, " is not ", 3);
    FAIL() << "no throw";
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "count 2 is not 3");
  }
}

}  // namespace
}  // namespace ferry
