// ferry-sim's workloads from traces (sim/trace_workload.h): hand-written traces of two
// workers read back as layers (order, bytes, medians, warm-up skipped, compute without a
// gradient folded, Ferry's own tensors left out), and the errors for what is missing.

#include "sim/trace_workload.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/util/error.h"
#include "sim/cli.h"

namespace ferry {
namespace {

std::string TempDir() {
  char dir[] = "/tmp/ferry-trace-workload-test-XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  return dir;
}

struct TraceDir {
  std::string dir = TempDir();
  ~TraceDir() { std::filesystem::remove_all(dir); }
  void Write(const std::string& name, const std::string& text) const {
    std::ofstream(dir + "/" + name) << text;
  }
};

std::string Step(int n, int64_t ts) {
  return StrCat("{\"ph\":\"i\",\"s\":\"p\",\"name\":\"step ", n,
                "\",\"pid\":0,\"tid\":0,\"ts\":", ts, ",\"args\":{}}");
}

std::string Compute(const std::string& tensor, bool backward, int64_t ts, int64_t dur) {
  return StrCat("{\"ph\":\"X\",\"cat\":\"compute\",\"name\":\"", tensor,
                "\",\"pid\":0,\"tid\":1048576,\"ts\":", ts, ",\"dur\":", dur,
                ",\"args\":{\"phase\":\"", backward ? "backward" : "forward", "\",\"tensor\":\"",
                tensor, "\"}}");
}

// A partition's slice with its stages, as worker/trace.h writes it.
std::string Partition(const std::string& tensor, int part, int64_t ts, uint64_t bytes,
                      int priority) {
  const std::string name = StrCat(tensor, "[", part, "]");
  auto edge = [&](const char* ph, const std::string& n, int64_t at, const std::string& args) {
    return StrCat("{\"ph\":\"", ph, "\",\"cat\":\"partition\",\"id\":7,\"name\":\"", n,
                  "\",\"pid\":0,\"tid\":0,\"ts\":", at, args, "}");
  };
  return StrCat(edge("b", name, ts,
                     StrCat(",\"args\":{\"key\":1,\"server\":0,\"bytes\":", bytes,
                            ",\"priority\":", priority, ",\"round\":0,\"fused\":false}")),
                ",\n", edge("b", "queue", ts, ""), ",\n", edge("e", "queue", ts + 1, ""), ",\n",
                edge("e", name, ts + 5, ""));
}

std::string Document(const std::vector<std::string>& events, bool closed = true) {
  std::string out =
      "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n"
      "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":0,\"args\":{\"name\":\"w\"}}";
  for (const std::string& e : events) out += ",\n" + e;
  return out + (closed ? "\n]}\n" : "");
}

// One worker's iteration starting at `s` (a "step" mark): backward (fc, then conv, with the
// compute-only "relu" between), the pushes, then forward (conv, relu, fc).
void Iteration(std::vector<std::string>* ev, int64_t s, int64_t fc_fwd, uint64_t fc_bytes) {
  ev->push_back(Compute("train_sim/1/fc", true, s, 30));
  ev->push_back(Partition("train_sim/1/fc", 0, s + 30, fc_bytes / 2, -1));
  ev->push_back(Partition("train_sim/1/fc", 1, s + 31, fc_bytes / 2, -1));
  ev->push_back(Compute("relu", true, s + 30, 6));
  ev->push_back(Compute("train_sim/0/conv", true, s + 36, 20));
  ev->push_back(Partition("train_sim/0/conv", 0, s + 56, 256, 0));
  ev->push_back(Partition("__ferry__/binding/host_ids", 0, s + 60, 999, 5));
  ev->push_back(Compute("train_sim/0/conv", false, s + 100, 10));
  ev->push_back(Compute("relu", false, s + 110, 4));
  ev->push_back(Compute("train_sim/1/fc", false, s + 120, fc_fwd));
}

// Steps at 10000, 11000, 12000, 13000: the iteration from 10000 is warm-up, those from
// 11000 and 12000 count, nothing before the first mark or after the last does.
std::string Worker(int64_t fc_fwd, bool closed = true) {
  std::vector<std::string> ev;
  Iteration(&ev, 5000, 999, 12);  // before the first mark
  ev.push_back(Step(1, 10000));
  Iteration(&ev, 10000, 500, 12);  // warm-up
  ev.push_back(Step(2, 11000));
  Iteration(&ev, 11000, fc_fwd, 800);
  ev.push_back(Step(3, 12000));
  Iteration(&ev, 12000, fc_fwd, 800);
  ev.push_back(Step(4, 13000));
  Iteration(&ev, 13000, 999, 12);  // after the last mark
  return Document(ev, closed);
}

TEST(TraceWorkloadTest, ReadsLayersFromTwoWorkers) {
  TraceDir d;
  d.Write("ferry-worker-0.json", Worker(40));
  d.Write("ferry-worker-1.json", Worker(60, /*closed=*/false));  // killed: read up to the end
  d.Write("notes.txt", "not a trace");
  Workload w = LoadTraceWorkload(d.dir);
  EXPECT_EQ(w.model, std::filesystem::path(d.dir).filename().string());
  ASSERT_EQ(w.layers.size(), 2u);
  // Forward order; ferry-train-sim's prefix gone; relu's compute in conv's (the layer
  // before it), Ferry's own tensor left out.
  EXPECT_EQ(w.layers[0].name, "conv");
  EXPECT_EQ(w.layers[0].bytes, 256u);
  EXPECT_DOUBLE_EQ(w.layers[0].fwd_ms, 0.014);
  EXPECT_DOUBLE_EQ(w.layers[0].bwd_ms, 0.026);
  EXPECT_EQ(w.layers[1].name, "fc");
  EXPECT_EQ(w.layers[1].bytes, 800u);           // two partitions of one iteration
  EXPECT_DOUBLE_EQ(w.layers[1].fwd_ms, 0.050);  // median of 40, 40, 60, 60 us
  EXPECT_DOUBLE_EQ(w.layers[1].bwd_ms, 0.030);
}

TEST(TraceWorkloadTest, TensorsWithoutForwardSpansFollowByPriority) {
  TraceDir d;
  std::vector<std::string> ev;
  for (int n = 1; n <= 3; ++n) {
    const int64_t s = 1000 * n;
    ev.push_back(Step(n, s));
    ev.push_back(Compute("b", true, s + 1, 10));
    ev.push_back(Partition("b", 0, s + 11, 40, -1));
    ev.push_back(Partition("loss", 0, s + 20, 4, -7));
    ev.push_back(Partition("a", 0, s + 30, 400, -3));
  }
  ev.push_back(Step(4, 4000));
  d.Write("ferry-worker-0.json", Document(ev));
  Workload w = LoadTraceWorkload(d.dir);
  ASSERT_EQ(w.layers.size(), 3u);
  EXPECT_EQ(w.layers[0].name, "b");
  EXPECT_EQ(w.layers[1].name, "a");
  EXPECT_EQ(w.layers[2].name, "loss");
  EXPECT_DOUBLE_EQ(w.layers[0].bwd_ms, 0.010);
  EXPECT_EQ(w.layers[1].fwd_ms + w.layers[1].bwd_ms, 0.0);
}

// The error's code and that its message names each of `parts`.
void ExpectRefused(const std::string& dir, const std::vector<std::string>& parts) {
  try {
    LoadTraceWorkload(dir);
    ADD_FAILURE() << "read a workload from " << dir;
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig) << e.what();
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(TraceWorkloadTest, RefusesWhatIsMissingNamingTheFile) {
  TraceDir empty;
  ExpectRefused(empty.dir, {empty.dir, "no ferry-worker-<rank>.json"});

  TraceDir no_compute;
  std::vector<std::string> ev = {Step(1, 0), Partition("a", 0, 10, 4, 0), Step(2, 100)};
  no_compute.Write("ferry-worker-0.json", Document(ev));
  ExpectRefused(no_compute.dir, {no_compute.dir + "/ferry-worker-0.json", "no compute spans",
                                 "ferry-train-sim or ferry.torch of this version"});

  TraceDir one_step;
  ev = {Step(1, 0), Compute("a", true, 5, 5), Partition("a", 0, 10, 4, 0)};
  one_step.Write("ferry-worker-3.json", Document(ev));
  ExpectRefused(one_step.dir, {"ferry-worker-3.json", "no whole iteration"});

  TraceDir no_partitions;
  ev = {Step(1, 0), Compute("a", true, 5, 5), Step(2, 100)};
  no_partitions.Write("ferry-worker-0.json", Document(ev));
  ExpectRefused(no_partitions.dir, {"ferry-worker-0.json", "no partitions"});

  TraceDir broken;
  broken.Write("ferry-worker-0.json", "{\"traceEvents\":[{\"ph\":\"i\",\"ts\":}]}");
  ExpectRefused(broken.dir, {"ferry-worker-0.json", "not valid JSON at byte 31"});

  // Cut off where a whole event is not the last thing: after the comma before the next
  // event, or within one.
  TraceDir cut_at_comma;
  cut_at_comma.Write("ferry-worker-0.json", Worker(40, /*closed=*/false) + ",\n");
  ExpectRefused(cut_at_comma.dir, {"ferry-worker-0.json", "not valid JSON at byte"});
  TraceDir cut_in_event;
  cut_in_event.Write("ferry-worker-0.json",
                     Worker(40, /*closed=*/false) + ",\n{\"ph\":\"X\",\"args\":{}");
  ExpectRefused(cut_in_event.dir, {"ferry-worker-0.json", "not valid JSON at byte"});

  TraceDir not_an_array;
  not_an_array.Write("ferry-worker-0.json", "{\"traceEvents\":{}}");
  ExpectRefused(not_an_array.dir, {"ferry-worker-0.json", "\"traceEvents\" is not an array"});

  TraceDir other;
  other.Write("ferry-worker-0.json", "{\"events\":[]}");
  ExpectRefused(other.dir, {"ferry-worker-0.json", "traceEvents"});
}

TEST(TraceWorkloadTest, CommandLineReadsADirectoryAsTraces) {
  TraceDir d;
  d.Write("ferry-worker-0.json", Worker(40));
  sim::CliOptions o =
      sim::ParseCommandLine({"--workload", d.dir, "--workers", "2"}, "/nonexistent");
  ASSERT_EQ(o.sim.workload.layers.size(), 2u);
  EXPECT_EQ(o.sim.workload.layers[1].bytes, 800u);
}

}  // namespace
}  // namespace ferry
