// ShmSegment (worker/local/shm_segment.h): the name lives only until the other side has
// mapped it, and the creator's destructor removes a name nobody mapped.

#include "worker/local/shm_segment.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "common/util/error.h"

namespace ferry {
namespace {

bool Linked(const std::string& name) { return access(("/dev/shm" + name).c_str(), F_OK) == 0; }

std::string UniqueName(const char* what) {
  return "/ferry-test-" + std::to_string(getpid()) + "-" + what;
}

TEST(ShmSegmentTest, TheSecondMapperUnlinksAndBothSeeTheSameBytes) {
  const std::string name = UniqueName("pair");
  auto a = ShmSegment::Create(name, 4096);
  EXPECT_TRUE(Linked(name));
  auto b = ShmSegment::OpenAndUnlink(name, 4096);
  EXPECT_FALSE(Linked(name));
  std::memcpy(a->data(), "hello", 6);
  EXPECT_STREQ(static_cast<const char*>(b->data()), "hello");
  a->Unlink();  // the creator's confirmation: the name is already gone, no error
  EXPECT_FALSE(Linked(name));
}

TEST(ShmSegmentTest, TheCreatorRemovesANameNobodyMapped) {
  const std::string name = UniqueName("orphan");
  {
    auto a = ShmSegment::Create(name, 128);
    EXPECT_TRUE(Linked(name));
  }
  EXPECT_FALSE(Linked(name));
}

TEST(ShmSegmentTest, ErrorsNameTheSegment) {
  const std::string name = UniqueName("missing");
  try {
    ShmSegment::OpenAndUnlink(name, 64);
    FAIL() << "mapped a segment that does not exist";
  } catch (const FerryError& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
  auto a = ShmSegment::Create(name, 64);
  EXPECT_THROW(ShmSegment::Create(name, 64), FerryError);  // O_EXCL: never someone else's
  try {
    ShmSegment::OpenAndUnlink(name, 1 << 20);  // smaller than announced
    FAIL() << "mapped a segment smaller than announced";
  } catch (const FerryError& e) {
    EXPECT_NE(std::string(e.what()).find("expected 1048576"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ferry
