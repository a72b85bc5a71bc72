// UrgencyThreshold (worker/urgency.h): the most urgent 10% of the partitions started, by
// priority, ties at the threshold counted as urgent.

#include "worker/urgency.h"

#include <gtest/gtest.h>

namespace ferry {
namespace {

TEST(UrgencyThresholdTest, TheMostUrgentTenthOfThePartitions) {
  UrgencyThreshold u;
  EXPECT_TRUE(u.Urgent(-1000));  // nothing seen: everything is urgent
  // 100 layers of 10 partitions each, priorities 0 (last layer) .. 99 (input layer).
  for (int layer = 0; layer < 100; ++layer) u.Observe(layer, 10);
  EXPECT_EQ(u.threshold(), 90);  // layers 90..99: 100 of 1000 partitions
  EXPECT_TRUE(u.Urgent(99));
  EXPECT_TRUE(u.Urgent(90));
  EXPECT_FALSE(u.Urgent(89));
}

TEST(UrgencyThresholdTest, OneBigUrgentTensorIsTheWholeShare) {
  UrgencyThreshold u;
  u.Observe(7, 300);  // the most urgent tensor: 300 of 400 partitions
  u.Observe(3, 100);
  EXPECT_EQ(u.threshold(), 7);
  EXPECT_FALSE(u.Urgent(3));
}

TEST(UrgencyThresholdTest, OnePriorityForEverythingMakesEverythingUrgent) {
  UrgencyThreshold u;
  for (int i = 0; i < 500; ++i) u.Observe(0);
  EXPECT_TRUE(u.Urgent(0));
}

}  // namespace
}  // namespace ferry
