// Tests of the scheduling block of Config (FERRY_SCHEDULING_POLICY and its companions,
// common/config/config.h): defaults, values, refusals that name the variable, and the
// derived partition size and credit.

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "common/config/config.h"
#include "common/util/error.h"

namespace ferry {
namespace {

using Env = std::map<std::string, std::string>;

Config Read(const Env& extra) {
  Env env = {{"DMLC_ROLE", "worker"},       {"DMLC_NUM_WORKER", "2"},
             {"DMLC_NUM_SERVER", "1"},      {"DMLC_PS_ROOT_URI", "127.0.0.1"},
             {"DMLC_PS_ROOT_PORT", "9000"}, {"DMLC_NODE_HOST", "127.0.0.1"}};
  for (const auto& [k, v] : extra) env[k] = v;
  return Config::FromEnvironment(MapEnvironment(env));
}

void ExpectInvalid(const Env& extra, const std::string& variable) {
  try {
    Read(extra);
    ADD_FAILURE() << "accepted; expected an error naming " << variable;
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    EXPECT_NE(std::string(e.what()).find(variable), std::string::npos) << e.what();
  }
}

TEST(ConfigSchedulingTest, Defaults) {
  Config c = Read({});
  EXPECT_EQ(c.scheduling.policy, SchedulingPolicy::kCredit);
  EXPECT_EQ(c.scheduling.fusion_bytes, 262144);
  EXPECT_EQ(c.scheduling.p3_slice_bytes, 160000);
  EXPECT_EQ(c.scheduling.bucket_bytes, 25 << 20);
  EXPECT_EQ(c.scheduling.bucket_timeout_ms, 5);
  EXPECT_EQ(c.diagnostics.trace_dir, "");
  EXPECT_FALSE(c.scheduling.autotune);
  EXPECT_EQ(c.scheduling.autotune_steps, 3);
  EXPECT_TRUE(c.scheduling.autotune_partition_bytes.empty());
  EXPECT_TRUE(c.scheduling.autotune_credits.empty());
  EXPECT_EQ(c.scheduling.InitialPartitionBytes(), 1048576);
  EXPECT_EQ(c.scheduling.CreditBytesFor(1048576), 4 * 1048576);  // 4 partitions, as BytePS counts
  EXPECT_NE(c.Summary().find("policy=credit"), std::string::npos);
}

TEST(ConfigSchedulingTest, Values) {
  Config c = Read({{"FERRY_SCHEDULING_POLICY", "p3"},
                   {"FERRY_P3_SLICE_BYTES", "65536"},
                   {"FERRY_FUSION_BYTES", "0"},
                   {"FERRY_BUCKET_BYTES", "1048576"},
                   {"FERRY_BUCKET_TIMEOUT_MS", "0"},
                   {"FERRY_TRACE_DIR", "/tmp/t"},
                   {"FERRY_AUTOTUNE", "1"},
                   {"FERRY_AUTOTUNE_STEPS", "5"},
                   {"FERRY_AUTOTUNE_PARTITION_BYTES", "8192,1048576"},
                   {"FERRY_AUTOTUNE_CREDITS", "1,16"},
                   {"FERRY_SCHEDULING_CREDIT_BYTES", "100000"}});
  EXPECT_EQ(c.scheduling.policy, SchedulingPolicy::kP3);
  EXPECT_EQ(c.scheduling.InitialPartitionBytes(), 65536);  // p3 cuts slices
  EXPECT_EQ(c.scheduling.fusion_bytes, 0);
  EXPECT_EQ(c.scheduling.bucket_bytes, 1048576);
  EXPECT_EQ(c.scheduling.bucket_timeout_ms, 0);
  EXPECT_EQ(c.diagnostics.trace_dir, "/tmp/t");
  EXPECT_TRUE(c.scheduling.autotune);
  EXPECT_EQ(c.scheduling.autotune_steps, 5);
  EXPECT_EQ(c.scheduling.autotune_partition_bytes, (std::vector<int64_t>{8192, 1048576}));
  EXPECT_EQ(c.scheduling.autotune_credits, (std::vector<int64_t>{1, 16}));
  EXPECT_EQ(c.scheduling.CreditBytesFor(65536),
            100000);  // given in bytes: independent of partitions
  for (const char* p : {"fifo", "priority", "credit", "fifo-bucket", "mercury", "trirace"}) {
    EXPECT_STREQ(SchedulingPolicyName(Read({{"FERRY_SCHEDULING_POLICY", p}}).scheduling.policy), p);
  }
}

// trirace: credit for the partitions (the window, fusion), mercury's frames below them, and
// the sends' link scheduling, which every policy but the two readiness-order ones has.
TEST(ConfigSchedulingTest, TriraceIsCreditWithFramesAndLinkScheduling) {
  Config c = Read({{"FERRY_SCHEDULING_POLICY", "trirace"}});
  EXPECT_EQ(c.transport.frame_bytes, 262144);
  EXPECT_EQ(c.transport.watermark_bytes, 524288);
  EXPECT_EQ(c.transport.tcp_notsent_lowat, 131072);
  EXPECT_TRUE(c.transport.control_lane);
  EXPECT_FALSE(Read({{"FERRY_SCHEDULING_POLICY", "trirace"}, {"FERRY_CONTROL_LANE", "0"}})
                   .transport.control_lane)
      << "a value set is kept";
  EXPECT_FALSE(Read({{"FERRY_SCHEDULING_POLICY", "mercury"}}).transport.control_lane);
  EXPECT_TRUE(CreditLike(c.scheduling.policy));
  EXPECT_FALSE(CreditLike(SchedulingPolicy::kMercury));
  for (SchedulingPolicy p : {SchedulingPolicy::kTrirace, SchedulingPolicy::kCredit,
                             SchedulingPolicy::kPriority, SchedulingPolicy::kMercury,
                             SchedulingPolicy::kP3, SchedulingPolicy::kUsbyte,
                             SchedulingPolicy::kProphet}) {
    EXPECT_TRUE(SchedulesLinks(p)) << SchedulingPolicyName(p);
  }
  EXPECT_FALSE(SchedulesLinks(SchedulingPolicy::kFifo));
  EXPECT_FALSE(SchedulesLinks(SchedulingPolicy::kFifoBucket));
  ExpectInvalid({{"FERRY_SCHEDULING_POLICY", "tri-race"}}, "FERRY_SCHEDULING_POLICY");
}

TEST(ConfigSchedulingTest, TheDefaultPolicyTakesTriracesTransportOnSends) {
  const Config c = Read({});
  EXPECT_EQ(c.scheduling.policy, SchedulingPolicy::kCredit);
  EXPECT_EQ(c.transport.frame_bytes, 0) << "not before sends are seen";
  EXPECT_EQ(c.transport.watermark_bytes, 0);
  EXPECT_EQ(c.scheduling.trirace_on_sends.frame_bytes, 262144);
  EXPECT_EQ(c.scheduling.trirace_on_sends.watermark_bytes, 524288);
  EXPECT_EQ(c.scheduling.trirace_on_sends.tcp_notsent_lowat, 131072);
  EXPECT_NE(c.Summary().find("policy=credit (trirace once sends are seen)"), std::string::npos);
  // A policy set, even the default's, is kept as it is.
  const Config set = Read({{"FERRY_SCHEDULING_POLICY", "credit"}});
  EXPECT_FALSE(set.scheduling.trirace_on_sends.any());
  EXPECT_EQ(set.Summary().find("trirace once"), std::string::npos);
  EXPECT_FALSE(Read({{"FERRY_ENABLE_ASYNC", "1"}}).scheduling.trirace_on_sends.any());
  // Values set stay: frames off set, then the watermark follows the 64 KiB floor.
  const Config no_frames = Read({{"FERRY_FRAME_BYTES", "0"}, {"FERRY_TCP_NOTSENT_LOWAT", "0"}});
  EXPECT_EQ(no_frames.scheduling.trirace_on_sends.frame_bytes, 0);
  EXPECT_EQ(no_frames.scheduling.trirace_on_sends.watermark_bytes, 131072);
  EXPECT_EQ(no_frames.scheduling.trirace_on_sends.tcp_notsent_lowat, 0);
}

TEST(ConfigSchedulingTest, MercuryTurnsOnFramesAndTheWatermarkUnlessSet) {
  Config c = Read({{"FERRY_SCHEDULING_POLICY", "mercury"}});
  EXPECT_EQ(c.transport.frame_bytes, 262144);
  EXPECT_EQ(c.transport.watermark_bytes, 524288);
  EXPECT_EQ(c.transport.tcp_notsent_lowat, 131072);
  c = Read({{"FERRY_SCHEDULING_POLICY", "mercury"},
            {"FERRY_FRAME_BYTES", "65536"},
            {"FERRY_TRANSPORT_WATERMARK_BYTES", "0"}});
  EXPECT_EQ(c.transport.frame_bytes, 65536);
  EXPECT_EQ(c.transport.watermark_bytes, 0) << "a value set, even 0, is kept";
  c = Read({{"FERRY_SCHEDULING_POLICY", "credit"}});
  EXPECT_EQ(c.transport.frame_bytes, 0);
  EXPECT_EQ(c.transport.watermark_bytes, 0);
  EXPECT_EQ(c.transport.tcp_notsent_lowat, 0);
  ExpectInvalid({{"FERRY_FRAME_BYTES", "1000"}}, "FERRY_FRAME_BYTES");
  ExpectInvalid({{"FERRY_FRAME_BYTES", "4100"}}, "FERRY_FRAME_BYTES");
  ExpectInvalid({{"FERRY_FRAME_BYTES", "4096"}, {"FERRY_PARTITION_BYTES", "1073741824"},
                 {"FERRY_MAX_MESSAGE_BYTES", "1099511627776"}},
                "FERRY_FRAME_BYTES");
}

TEST(ConfigSchedulingTest, TheWindowFollowsTheNetworkOnlyWhenAsked) {
  Config c = Read({});
  EXPECT_FALSE(c.scheduling.window_bdp);  // measured: not better than the fixed credit yet
  EXPECT_TRUE(Read({{"FERRY_WINDOW", "bdp"}}).scheduling.window_bdp);
  EXPECT_EQ(c.scheduling.window_gain, 2.0);
  EXPECT_EQ(c.scheduling.window_min_bytes, 1 << 20);
  EXPECT_EQ(c.scheduling.window_max_bytes, 64 << 20);
  EXPECT_TRUE(c.scheduling.autotune_window_gains.empty());
  EXPECT_TRUE(c.scheduling.autotune_frame_bytes.empty());
  for (const char* credit : {"FERRY_SCHEDULING_CREDIT", "BYTEPS_SCHEDULING_CREDIT",
                             "FERRY_SCHEDULING_CREDIT_BYTES"}) {
    EXPECT_FALSE(Read({{credit, "8"}}).scheduling.window_bdp) << credit << " keeps it fixed";
    EXPECT_TRUE(Read({{credit, "8"}, {"FERRY_WINDOW", "bdp"}}).scheduling.window_bdp)
        << "FERRY_WINDOW=bdp wins over " << credit << " (which is then the first window)";
  }
  c = Read({{"FERRY_WINDOW", "fixed"},
            {"FERRY_WINDOW_GAIN", "1.5"},
            {"FERRY_WINDOW_MIN_BYTES", "65536"},
            {"FERRY_WINDOW_MAX_BYTES", "65536"},
            {"FERRY_AUTOTUNE_WINDOW_GAINS", "1,2.5,4"},
            {"FERRY_AUTOTUNE_FRAME_BYTES", "0,65536,262144"}});
  EXPECT_FALSE(c.scheduling.window_bdp);
  EXPECT_EQ(c.scheduling.window_gain, 1.5);
  EXPECT_EQ(c.scheduling.window_min_bytes, 65536);
  EXPECT_EQ(c.scheduling.window_max_bytes, 65536);
  EXPECT_EQ(c.scheduling.autotune_window_gains, (std::vector<double>{1, 2.5, 4}));
  EXPECT_EQ(c.scheduling.autotune_frame_bytes, (std::vector<int64_t>{0, 65536, 262144}));
  ExpectInvalid({{"FERRY_WINDOW", "bbr"}}, "FERRY_WINDOW");
  ExpectInvalid({{"FERRY_WINDOW_GAIN", "0"}}, "FERRY_WINDOW_GAIN");
  ExpectInvalid({{"FERRY_WINDOW_MIN_BYTES", "100"}}, "FERRY_WINDOW_MIN_BYTES");
  ExpectInvalid({{"FERRY_WINDOW_MAX_BYTES", "65536"}}, "FERRY_WINDOW_MAX_BYTES");  // < min
  ExpectInvalid({{"FERRY_AUTOTUNE_WINDOW_GAINS", "1,,2"}}, "FERRY_AUTOTUNE_WINDOW_GAINS");
  ExpectInvalid({{"FERRY_AUTOTUNE_WINDOW_GAINS", "100"}}, "FERRY_AUTOTUNE_WINDOW_GAINS");
  ExpectInvalid({{"FERRY_AUTOTUNE_WINDOW_GAINS", "1,2"}, {"FERRY_AUTOTUNE_CREDITS", "2,4"}},
                "FERRY_AUTOTUNE_CREDITS");
  ExpectInvalid({{"FERRY_AUTOTUNE_FRAME_BYTES", "4100"}}, "FERRY_AUTOTUNE_FRAME_BYTES");
  ExpectInvalid({{"FERRY_AUTOTUNE_FRAME_BYTES", "2048"}}, "FERRY_AUTOTUNE_FRAME_BYTES");
  ExpectInvalid({{"FERRY_MAX_MESSAGE_BYTES", "2000000"}, {"FERRY_AUTOTUNE_FRAME_BYTES", "4194304"}},
                "FERRY_AUTOTUNE_FRAME_BYTES (4194304)");
}

TEST(ConfigSchedulingTest, PartitionsSizedByTime) {
  const Config::Scheduling unset = Read({}).scheduling;
  EXPECT_EQ(unset.partition_ms, Config::Scheduling::kDefaultPartitionMs) << "on by default";
  EXPECT_GT(unset.partition_ms, 0);
  EXPECT_FALSE(unset.partition_ms_set) << "the default, which stands aside on loopback";
  // A size the user chose or has searched is not resized by the default.
  EXPECT_EQ(Read({{"FERRY_PARTITION_BYTES", "262144"}}).scheduling.partition_ms, 0);
  EXPECT_EQ(Read({{"BYTEPS_PARTITION_BYTES", "262144"}}).scheduling.partition_ms, 0);
  // The search is centred on the time-sized partition unless it lists its sizes.
  EXPECT_EQ(Read({{"FERRY_AUTOTUNE", "1"}}).scheduling.partition_ms,
            Config::Scheduling::kDefaultPartitionMs);
  EXPECT_EQ(Read({{"FERRY_AUTOTUNE", "1"}, {"FERRY_AUTOTUNE_PARTITION_BYTES", "65536,262144"}})
                .scheduling.partition_ms,
            0);
  EXPECT_EQ(Read({{"FERRY_AUTOTUNE", "1"}, {"FERRY_PARTITION_MS", "4"}}).scheduling.partition_ms,
            4);
  // A set value is the user's, everywhere: with a chosen size it only lowers it.
  const Config::Scheduling set =
      Read({{"FERRY_PARTITION_MS", "4"}, {"FERRY_PARTITION_BYTES", "4194304"}}).scheduling;
  EXPECT_EQ(set.partition_ms, 4);
  EXPECT_TRUE(set.partition_ms_set);
  EXPECT_EQ(set.partition_bytes, 4194304);
  EXPECT_EQ(Read({{"FERRY_PARTITION_MS", "0"}}).scheduling.partition_ms, 0) << "0: off";
  EXPECT_EQ(Read({{"FERRY_PARTITION_MS", "0.5"}}).scheduling.partition_ms, 0.5);
  ExpectInvalid({{"FERRY_PARTITION_MS", "-1"}}, "FERRY_PARTITION_MS");
  ExpectInvalid({{"FERRY_PARTITION_MS", "soon"}}, "FERRY_PARTITION_MS");
  ExpectInvalid({{"FERRY_PARTITION_MS", "4"},
                 {"FERRY_AUTOTUNE", "1"},
                 {"FERRY_AUTOTUNE_PARTITION_BYTES", "65536"}},
                "cannot be used with FERRY_AUTOTUNE_PARTITION_BYTES");
}

TEST(ConfigSchedulingTest, Refusals) {
  ExpectInvalid({{"FERRY_SCHEDULING_POLICY", "bytescheduler"}}, "FERRY_SCHEDULING_POLICY");
  ExpectInvalid({{"FERRY_FUSION_BYTES", "-1"}}, "FERRY_FUSION_BYTES");
  ExpectInvalid({{"FERRY_P3_SLICE_BYTES", "100"}}, "FERRY_P3_SLICE_BYTES");
  ExpectInvalid({{"FERRY_BUCKET_BYTES", "lots"}}, "FERRY_BUCKET_BYTES");
  ExpectInvalid({{"FERRY_AUTOTUNE", "maybe"}}, "FERRY_AUTOTUNE");
  ExpectInvalid({{"FERRY_AUTOTUNE_STEPS", "1"}}, "FERRY_AUTOTUNE_STEPS");
  ExpectInvalid({{"FERRY_AUTOTUNE_PARTITION_BYTES", "8192,,16384"}},
                "FERRY_AUTOTUNE_PARTITION_BYTES");
  ExpectInvalid({{"FERRY_AUTOTUNE_PARTITION_BYTES", "512"}}, "FERRY_AUTOTUNE_PARTITION_BYTES");
  ExpectInvalid({{"FERRY_AUTOTUNE_CREDITS", "2, 4"}}, "FERRY_AUTOTUNE_CREDITS");
  ExpectInvalid({{"FERRY_AUTOTUNE_CREDITS", "0"}}, "FERRY_AUTOTUNE_CREDITS");
  // Every message a worker may send must fit the servers' limit.
  ExpectInvalid(
      {{"FERRY_SCHEDULING_POLICY", "fifo-bucket"}, {"FERRY_MAX_MESSAGE_BYTES", "20000000"}},
      "FERRY_BUCKET_BYTES (26214400)");
  ExpectInvalid({{"FERRY_PARTITION_BYTES", "65536"},
                 {"FERRY_MAX_MESSAGE_BYTES", "200000"},
                 {"FERRY_FUSION_BYTES", "300000"}},
                "FERRY_FUSION_BYTES");
  ExpectInvalid({{"FERRY_PARTITION_BYTES", "65536"},
                 {"FERRY_MAX_MESSAGE_BYTES", "200000"},
                 {"FERRY_FUSION_BYTES", "65536"},
                 {"FERRY_AUTOTUNE_PARTITION_BYTES", "65536,262144"}},
                "FERRY_AUTOTUNE_PARTITION_BYTES");
  // The bucket size does not matter unless the policy is fifo-bucket.
  EXPECT_NO_THROW(Read({{"FERRY_MAX_MESSAGE_BYTES", "20000000"}}));
}

}  // namespace
}  // namespace ferry
