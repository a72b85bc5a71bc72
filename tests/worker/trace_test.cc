// Tests of the worker's Chrome-trace writer (worker/trace.h): the file is valid JSON
// (checked by a strict little parser here), in the Trace Event Format, with each
// partition's stages as nested async slices in order, instants, compute spans, and
// escaped names.

#include "worker/trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/util/clock.h"
#include "common/util/error.h"
#include "tests/support/json.h"

namespace ferry {
namespace {

std::string TempDir() {
  char dir[] = "/tmp/ferry-trace-test-XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  return dir;
}

testing::Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  testing::Json j;
  testing::JsonParser p(text.str());
  EXPECT_TRUE(p.Parse(&j)) << "not valid JSON near byte " << p.at() << " of " << path;
  return j;
}

TEST(TraceTest, WritesValidChromeTraceJson) {
  std::string dir = TempDir();
  std::string path;
  {
    Trace trace(dir, 3);
    path = trace.path();
    EXPECT_EQ(path, dir + "/ferry-worker-3.json");
    int64_t t0 = NowUs();
    trace.Instant("step 1", t0, "{}");
    PartitionTimes p;
    p.tensor = "layer \"1\"\\weight\n";  // quotes, backslash, control character
    p.partition = 2;
    p.key = 77;
    p.server = 1;
    p.bytes = 4096;
    p.priority = -1;
    p.round = 5;
    p.fused = true;
    p.ready_us = t0 + 10;
    p.sent_us = t0 + 20;
    p.acked_us = t0 + 30;
    p.result_us = t0 + 50;
    p.done_us = t0 + 55;
    trace.Partition(p);
    p.acked_us = 0;  // answered with the sum at once: no "server" stage
    p.fused = false;
    trace.Partition(p);
    trace.Instant("scheduling", t0 + 60, "{\"partition_bytes\":1024}");
  }  // the destructor closes the document
  testing::Json j = ReadJson(path);
  ASSERT_EQ(j.kind, testing::Json::kObject);
  EXPECT_EQ(j["displayTimeUnit"].str, "ms");
  const std::vector<testing::Json>& ev = j["traceEvents"].items;
  ASSERT_EQ(ev.size(), 1u + 1 + 10 + 8 + 1);  // metadata, instant, 2 partitions, instant
  EXPECT_EQ(ev[0]["ph"].str, "M");
  EXPECT_EQ(ev[0]["args"]["name"].str, "worker 3");
  EXPECT_EQ(ev[1]["ph"].str, "i");
  EXPECT_EQ(ev[1]["name"].str, "step 1");
  // The first partition: its slice, then queue, push, server, return, nested in order.
  std::vector<std::string> names, phases;
  double last_ts = -1;
  for (size_t i = 2; i < 12; ++i) {
    EXPECT_EQ(ev[i]["cat"].str, "partition");
    EXPECT_EQ(ev[i]["id"].number, 1);
    EXPECT_EQ(ev[i]["pid"].number, 3);
    EXPECT_EQ(ev[i]["tid"].number, 1);
    EXPECT_GE(ev[i]["ts"].number, last_ts) << "stages out of time order";
    last_ts = ev[i]["ts"].number;
    names.push_back(ev[i]["name"].str);
    phases.push_back(ev[i]["ph"].str);
  }
  const std::string part = "layer \"1\"\\weight\n[2]";
  EXPECT_EQ(names, (std::vector<std::string>{part, "queue", "queue", "push", "push", "server",
                                             "server", "return", "return", part}));
  EXPECT_EQ(phases, (std::vector<std::string>{"b", "b", "e", "b", "e", "b", "e", "b", "e", "e"}));
  EXPECT_EQ(ev[2]["args"]["key"].number, 77);
  EXPECT_EQ(ev[2]["args"]["bytes"].number, 4096);
  EXPECT_EQ(ev[2]["args"]["priority"].number, -1);
  EXPECT_EQ(ev[2]["args"]["round"].number, 5);
  EXPECT_TRUE(ev[2]["args"]["fused"].b);
  EXPECT_EQ(ev[6]["ts"].number - ev[5]["ts"].number, 10);  // push: sent -> acknowledged
  EXPECT_EQ(ev[12]["id"].number, 2);
  EXPECT_FALSE(ev[12]["args"]["fused"].b);
  EXPECT_EQ(ev[17]["name"].str, "return");  // no "server" stage without an ack
  EXPECT_EQ(ev.back()["name"].str, "scheduling");
  EXPECT_EQ(ev.back()["args"]["partition_bytes"].number, 1024);
  std::remove(path.c_str());
  rmdir(dir.c_str());
}

TEST(TraceTest, ComputeSpansAreCompleteEventsOnTheComputeThread) {
  std::string dir = TempDir();
  std::string path;
  int64_t t0 = 0;
  {
    Trace trace(dir, 1);
    path = trace.path();
    t0 = NowUs();
    trace.Compute("fc.weight", /*backward=*/false, t0 + 100, t0 + 350);
    trace.Compute("fc \"b\"", /*backward=*/true, t0 + 400, t0 + 390);  // empty: dur 0
    // A name is the program's bytes: invalid UTF-8 becomes U+FFFD, the file still parses.
    trace.Compute(std::string("conv\xff\xfe.w\xc3\xa9"), /*backward=*/true, t0 + 500, t0 + 510);
  }
  testing::Json j = ReadJson(path);
  const std::vector<testing::Json>& ev = j["traceEvents"].items;
  ASSERT_EQ(ev.size(), 1u + 1 + 3);  // process name, the compute thread's name, 3 spans
  EXPECT_EQ(ev[4]["name"].str, "conv\xef\xbf\xbd\xef\xbf\xbd.w\xc3\xa9");  // é kept
  EXPECT_EQ(ev[1]["ph"].str, "M");
  EXPECT_EQ(ev[1]["name"].str, "thread_name");
  EXPECT_EQ(ev[1]["tid"].number, Trace::kComputeTid);
  EXPECT_EQ(ev[1]["args"]["name"].str, "compute");
  EXPECT_EQ(ev[2]["ph"].str, "X");
  EXPECT_EQ(ev[2]["cat"].str, "compute");
  EXPECT_EQ(ev[2]["name"].str, "fc.weight");
  EXPECT_EQ(ev[2]["pid"].number, 1);
  EXPECT_EQ(ev[2]["tid"].number, Trace::kComputeTid);
  EXPECT_EQ(ev[2]["dur"].number, 250);
  EXPECT_GE(ev[2]["ts"].number, 100);  // since the trace opened, before t0
  EXPECT_EQ(ev[2]["args"]["phase"].str, "forward");
  EXPECT_EQ(ev[2]["args"]["tensor"].str, "fc.weight");
  EXPECT_EQ(ev[3]["name"].str, "fc \"b\"");
  EXPECT_EQ(ev[3]["args"]["phase"].str, "backward");
  EXPECT_EQ(ev[3]["args"]["tensor"].str, "fc \"b\"");
  EXPECT_EQ(ev[3]["dur"].number, 0);
  EXPECT_EQ(ev[3]["ts"].number - ev[2]["ts"].number, 300);
  std::remove(path.c_str());
  rmdir(dir.c_str());
}

TEST(TraceTest, MissingDirectoryIsCreatedWithItsParents) {
  const std::string top = StrCat(::testing::TempDir(), "/ferry-trace-missing-", getpid());
  const std::string dir = top + "/a/b";
  {
    Trace trace(dir, 3);
    trace.Close();
  }
  EXPECT_TRUE(std::filesystem::is_regular_file(dir + "/ferry-worker-3.json"));
  std::filesystem::remove_all(top);
}

void ExpectConfigError(const std::string& dir, const std::string& says) {
  try {
    Trace trace(dir, 0);
    FAIL() << "opened a trace in " << dir;
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    EXPECT_NE(std::string(e.what()).find("FERRY_TRACE_DIR='" + dir + "'"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(TraceTest, AFileIsNotADirectory) {
  const std::string file = StrCat(::testing::TempDir(), "/ferry-trace-file-", getpid());
  std::ofstream(file) << "x";
  ExpectConfigError(file, "cannot create it as a directory");
  ExpectConfigError(file + "/below", "cannot create it as a directory");
  std::remove(file.c_str());
}

TEST(TraceTest, UnwritablePlaceIsAConfigurationError) {
  if (geteuid() == 0) {  // root writes anywhere: /proc refuses even root
    ExpectConfigError("/proc/ferry-trace", "cannot create it as a directory");
    return;
  }
  ExpectConfigError("/ferry-trace-not-allowed", "cannot create it as a directory");
}

}  // namespace
}  // namespace ferry
