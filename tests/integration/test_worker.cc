// ferry-test-worker: the worker side of the integration tests (tests/integration).
//
// --mode=sums      declare --tensors tensors of sizes from 1 element to --max_bytes,
//                  push_pull all of them --rounds times (released in backprop order),
//                  and check every element exactly. Values depend on the worker's rank,
//                  the round, the tensor and the element, so a wrong offset, a stale
//                  round or a missing worker shows. Every other tensor is averaged.
//                  Prints the bytes its placement put on each server.
// --mode=mismatch  rank 0 and rank 1 declare tensor "mismatched" with different sizes;
//                  each must get an error naming it, and then tensor "after" must sum.
// --mode=join      uneven data: worker r pushes 3 + 2r rounds, then joins; sums and
//                  averages must cover exactly the workers still pushing; after the
//                  join every worker runs 2 more rounds together (rounds restart).
//                  Sparse rows alike: a row every worker pushes sums over the workers
//                  still pushing, a worker's own row holds its value alone.
// --mode=barriers  rounds of a barrier and a checked push_pull; rank 1 comes late to one
//                  barrier (--slow_barrier, --barrier_sleep_ms): scheduler failover tests
// --mode=loop      push_pull one tensor until an error (for failure tests); prints
//                  "round N" as it goes.
// --mode=deterministic  (3 workers, FERRY_DETERMINISTIC=1) values like 1e8, 1, -1e8
//                  whose float sum depends on the order of addition; each worker waits
//                  a rank- and --det_seed-dependent time before each round, so pushes
//                  arrive in different orders; every sum must equal the sum in rank
//                  order bit for bit. Prints "checksum X" over every result.
// --mode=async     (FERRY_ENABLE_ASYNC=1) round 0 sends the initial parameters, then
//                  --steps deltas at --step_sleep_ms apart, each reply checked against
//                  what can have been applied; after a barrier the parameters must be
//                  the initial ones plus every worker's every delta, exactly. Also checks
//                  that average, Broadcast and Join are refused. Prints "step N".
// --mode=order     scheduling order: --tensors small tensors (8 KiB) and one large
//                  "blocker" (1 MiB), declared last (least urgent); each round pushes the
//                  blocker, waits 50 ms (so it alone is in flight), then the others in
//                  reverse declaration order (ready order opposite to priority order),
//                  and checks every sum. The servers' TRACE log shows the arrival order.
// --mode=rows     sparse rows: tensor "embedding" [--rows_total, 8] float32; each round
//                  every worker pushes rows shared by all workers, rows only it pushes,
//                  rows spread over the whole tensor (overlapping by chance), duplicate
//                  ids, and (rank 1, round 2) no rows at all; checks every returned row
//                  exactly against the per-row totals computed locally from every
//                  worker's generator. Also: a row id out of range and a negative one
//                  are refused by name; a dense tensor keeps summing alongside.
// --mode=rows_bytes  bytes on the wire: tensor "huge" [1000000, 16] float32 (64 MB
//                  dense); PushPullRows of 10 rows, then of 1000 rows; prints the
//                  worker's bytes sent for each and fails unless they grow with the rows
//                  and stay far below the dense size.
// --mode=rows_mismatch  rank 0 declares "rows_mismatched" [1000, 8], the others [1000, 4];
//                  every worker's PushPullRows must fail naming it, and then tensor
//                  "after" must still sum.
// --mode=rows_timeout  rank 0 calls PushPullRows, the others never do: rank 0 must get a
//                  timeout (FERRY_OP_TIMEOUT_MS) naming the operation, not hang.
// --mode=elastic  (FERRY_ELASTIC=1) training as ferry.torch.elastic runs it, for the elastic
//                  tests: a "model" of float32 integers (tensor "elastic_a", 300000
//                  elements over every server; "elastic_b", 1000; sparse rows of
//                  "elastic_rows" [1000, 4]), --rounds steps. Each step every worker
//                  pushes values of (step, element, rank), checks every sum exactly against
//                  the current size() (the rows against the totals of every rank's pushes,
//                  computed here), and adds the sums to its model. Every --commit_every
//                  steps it commits (a copy of model and step). On kMembershipChanged it
//                  restores the commit, calls Reset(), and takes rank 0's model and step
//                  (Broadcast), as Horovod Elastic's restore() and sync(). At each commit
//                  it asks whether workers wait to join (HostsUpdated): if so it admits
//                  them (Reset) and takes rank 0's state; a worker that joined starts with
//                  that. Prints "step N"
//                  as it goes (after --loop_sleep_ms each), "reset epoch E rank R size S
//                  step N" at each reset; then every worker joins (join()), and prints
//                  "OK elastic steps=N resets=K checksum=X joined_last=R" (X hashes the
//                  model: equal on every worker that finished).
// --repartition=R:B,...  (sums mode) before round R call SetScheduling(B, 4 B): the
//                  partition size changes mid-run; sums must stay exact.
// Exit codes: 0 all as expected, 1 a Ferry error, 3 a wrong value or missing error.

#include <gflags/gflags.h>
#include <glog/logging.h>

#include <chrono>
#include <cmath>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>
#include <map>
#include <string>
#include <vector>

#include "common/cluster/role_main.h"
#include "common/util/error.h"
#include "worker/worker.h"

DEFINE_string(mode, "sums",
              "sums, mismatch, refused, join, loop, deterministic, async, order, rows, "
              "rows_bytes, compression or compression_mismatch (and more: see Run)");
DEFINE_string(compression, "", "compression mode: FERRY_COMPRESSION of every worker");
DEFINE_string(expect_error, "", "refused mode: words the push_pull's error must contain");
DEFINE_int32(tensors, 40, "tensors (sums mode)");
DEFINE_int64(max_bytes, 64ll << 20, "largest tensor in bytes (sums mode)");
DEFINE_int32(rounds, 20, "rounds (sums mode)");
DEFINE_int32(loop_sleep_ms, 20, "pause between rounds (loop mode): compute time");
DEFINE_int32(loop_rounds, 0, "loop mode: stop after this many rounds and shut down (0: never)");
DEFINE_int32(det_seed, 0, "deterministic mode: shifts each rank's delay per round");
DEFINE_int32(det_delay_ms, 4, "deterministic mode: delay unit before a round's pushes");
DEFINE_int32(steps, 200, "async mode: deltas each worker pushes");
DEFINE_int32(step_sleep_ms, 10, "async mode: pause between steps");
DEFINE_int64(rows_total, 100000, "rows mode: rows of the embedding tensor");
DEFINE_int32(commit_every, 3, "elastic mode: steps between commits");
DEFINE_int32(slow_barrier, 2, "barriers mode: the barrier before which rank 1 sleeps");
DEFINE_int32(barrier_sleep_ms, 3000, "barriers mode: how long rank 1 sleeps before it");
DEFINE_int32(slow_rank, -1, "backup mode: the rank that sleeps --slow_ms before each round");
DEFINE_int32(slow_ms, 300, "backup mode: see --slow_rank");
DEFINE_bool(catch_up, false, "backup mode: a rank left out sits the next round out");
DEFINE_string(repartition, "", "sums mode: ROUND:PARTITION_BYTES,... (SetScheduling before ROUND)");

namespace ferry {

constexpr int kExitWrong = 3;

// Also for test_worker_compression.cc.
int ExpectRefusedThenServed(Worker& w, const char* name, uint64_t count, const std::string& words) {
  std::vector<float> data(count, 1.0f);
  try {
    w.PushPull(name, data.data(), data.data(), DataType::kFloat32, count, false);
    std::fprintf(stderr, "no error for tensor '%s'\n", name);
    return kExitWrong;
  } catch (const FerryError& e) {
    std::printf("error as expected: %s\n", e.what());
    if (std::string(e.what()).find(words) == std::string::npos) return kExitWrong;
  }
  std::vector<float> after(1000, static_cast<float>(w.rank() + 1));
  w.PushPull("after", after.data(), after.data(), DataType::kFloat32, after.size(), false);
  float expected = w.size() * (w.size() + 1) / 2.0f;
  for (float v : after) {
    if (v != expected) return kExitWrong;
  }
  std::printf("OK other keys still served\n");
  return 0;
}

// test_worker_compression.cc
int RunCompression(Worker& w, const std::string& spec, int rounds);
int RunCompressionMismatch(Worker& w);
// test_worker_backup.cc
int RunBackup(Worker& w, int rounds, int slow_rank, int slow_ms, bool catch_up);

namespace {

float Value(int rank, int round, int tensor, uint64_t i) {
  return static_cast<float>((i * 3 + tensor * 5 + rank * 7 + round * 11) % 16 + 1);
}

// --repartition: round -> partition bytes.
std::map<int, int64_t> ParseRepartition() {
  std::map<int, int64_t> out;
  std::string s = FLAGS_repartition;
  for (size_t at = 0; at < s.size();) {
    size_t end = s.find(',', at);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(at, end - at);
    size_t colon = item.find(':');
    out[std::stoi(item.substr(0, colon))] = std::stoll(item.substr(colon + 1));
    at = end + 1;
  }
  return out;
}

int RunSums(Worker& w) {
  // Sizes grow geometrically from 1 element to max_bytes; odd element counts so that
  // partitions rarely align with tensor boundaries.
  std::vector<uint64_t> counts;
  double max_count = static_cast<double>(FLAGS_max_bytes / 4);
  for (int t = 0; t < FLAGS_tensors; ++t) {
    double f = FLAGS_tensors > 1 ? static_cast<double>(t) / (FLAGS_tensors - 1) : 1.0;
    uint64_t c = static_cast<uint64_t>(std::pow(max_count, f));
    if (t > 0 && t < FLAGS_tensors - 1 && c % 2 == 0) c += 1;
    counts.push_back(std::max<uint64_t>(1, c));
  }
  for (int t = 0; t < FLAGS_tensors; ++t) {
    w.DeclareTensor(StrCat("layer", t), DataType::kFloat32, {static_cast<int64_t>(counts[t])});
  }
  std::vector<std::vector<float>> in(FLAGS_tensors), out(FLAGS_tensors);
  for (int t = 0; t < FLAGS_tensors; ++t) {
    in[t].resize(counts[t]);
    out[t].resize(counts[t]);
  }
  const int n = w.size();
  std::map<int, int64_t> repartition = ParseRepartition();
  for (int round = 0; round < FLAGS_rounds; ++round) {
    if (repartition.count(round)) {
      int64_t bytes = repartition[round];
      w.SetScheduling(bytes, 4 * bytes);
      std::printf("round %d: partition %lld bytes\n", round, static_cast<long long>(bytes));
    }
    std::vector<Handle> handles(FLAGS_tensors);
    for (int t = FLAGS_tensors - 1; t >= 0; --t) {  // gradients become ready in reverse
      bool average = t % 2 == 1;
      for (uint64_t i = 0; i < counts[t]; ++i) {
        // Averaged tensors push n * value, so the average is an exact integer.
        in[t][i] = Value(w.rank(), round, t, i) * (average ? n : 1);
      }
      handles[t] = w.PushPullAsync(StrCat("layer", t), in[t].data(), out[t].data(),
                                   DataType::kFloat32, counts[t], average);
    }
    for (int t = 0; t < FLAGS_tensors; ++t) w.Wait(handles[t]);
    const CounterValues s = w.Counters();
    const uint64_t send_releases = CounterValue(s, "send_releases");
    const uint64_t partitions_pushed = CounterValue(s, "partitions_pushed");
    const uint64_t resends = CounterValue(s, "resends");
    const uint64_t frames = CounterValue(s, "frames_pushed");
    const uint64_t lent = CounterValue(s, "payloads_lent");
    // Every payload handed to ZeroMQ (first sends and resends, partitions or frames) was
    // released; without frames, one per partition and resend.
    if (send_releases != lent || (frames == 0 && lent != partitions_pushed + resends) ||
        (frames > 0 && lent < frames + resends)) {
      std::fprintf(
          stderr,
          "round %d: %llu partitions pushed (%llu frames, %llu resent, %llu lent) but %llu released by ZeroMQ\n", round,
          static_cast<unsigned long long>(partitions_pushed), static_cast<unsigned long long>(frames),
          static_cast<unsigned long long>(resends), static_cast<unsigned long long>(lent),
          static_cast<unsigned long long>(send_releases));
      return kExitWrong;
    }
    for (int t = 0; t < FLAGS_tensors; ++t) {
      for (uint64_t i = 0; i < counts[t]; ++i) {
        float expected = 0;
        for (int r = 0; r < n; ++r) expected += Value(r, round, t, i);
        if (out[t][i] != expected) {
          std::fprintf(stderr, "WRONG round %d tensor %d element %llu: got %g expected %g\n", round,
                       t, static_cast<unsigned long long>(i), out[t][i], expected);
          return kExitWrong;
        }
      }
    }
    std::printf("round %d exact\n", round);
    std::fflush(stdout);
  }
  // What this worker's placement put on each server (the placement tests compare it
  // with the bytes each server counted).
  uint64_t tensor_bytes = 0;
  for (uint64_t c : counts) tensor_bytes += c * sizeof(float);
  std::string placed;
  for (uint64_t b : w.PlacedBytes()) placed += StrCat(placed.empty() ? "" : ",", b);
  std::printf("placed bytes per server: %s; tensor bytes %llu\n", placed.c_str(),
              static_cast<unsigned long long>(tensor_bytes));
  const CounterValues s = w.Counters();
  std::printf("OK rounds=%d partitions=%llu zero_copy_payloads=%llu\n", FLAGS_rounds,
              static_cast<unsigned long long>(CounterValue(s, "partitions_pushed")),
              static_cast<unsigned long long>(CounterValue(s, "van.payloads_sent_zero_copy")));
  return 0;
}

// A push_pull of tensor `name` with `count` floats must fail with an error containing
// `words`, then another tensor must still be summed exactly.

int RunMismatch(Worker& w) {
  return ExpectRefusedThenServed(w, "mismatched", w.rank() == 0 ? 100 : 200, "'mismatched'");
}

// Tensor "refused" of --max_bytes, which the servers refuse (the test sets them up to).
int RunRefused(Worker& w) {
  return ExpectRefusedThenServed(w, "refused", FLAGS_max_bytes / sizeof(float), FLAGS_expect_error);
}

int RunLoop(Worker& w) {
  std::vector<float> data(1 << 16);
  for (int round = 0; FLAGS_loop_rounds == 0 || round < FLAGS_loop_rounds; ++round) {
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>((i + round) % 5 + w.rank());
    w.PushPull("loop", data.data(), data.data(), DataType::kFloat32, data.size(), false);
    for (size_t i = 0; i < data.size(); ++i) {
      float expected = static_cast<float>(w.size() * ((i + round) % 5) + w.size() * (w.size() - 1) / 2);
      if (data[i] != expected) {
        std::fprintf(stderr, "WRONG round %d element %zu: got %g expected %g\n", round, i, data[i],
                     expected);
        return kExitWrong;
      }
    }
    std::printf("round %d\n", round);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(FLAGS_loop_sleep_ms));
  }
  std::printf("OK loop rounds=%d\n", FLAGS_loop_rounds);
  return 0;
}

int CheckAll(const std::vector<float>& v, float expected, const char* what, int round);

// --mode=barriers: --rounds rounds of a barrier then a checked push_pull; before barrier
// --slow_barrier rank 1 sleeps --barrier_sleep_ms, so the others wait in it.
int RunBarriers(Worker& w) {
  std::vector<float> data(1024);
  for (int round = 0; round < FLAGS_rounds; ++round) {
    if (w.rank() == 1 && round == FLAGS_slow_barrier) {
      std::this_thread::sleep_for(std::chrono::milliseconds(FLAGS_barrier_sleep_ms));
    }
    const auto start = std::chrono::steady_clock::now();
    w.Barrier();
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - start).count();
    std::fill(data.begin(), data.end(), static_cast<float>(w.rank() + round));
    w.PushPull("barriers", data.data(), data.data(), DataType::kFloat32, data.size(), false);
    const float expected = static_cast<float>(w.size() * round + w.size() * (w.size() - 1) / 2);
    if (int code = CheckAll(data, expected, "barriers", round)) return code;
    std::printf("barrier %d waited %lld ms\n", round, static_cast<long long>(waited));
    std::fflush(stdout);
  }
  std::printf("OK barriers=%d\n", FLAGS_rounds);
  return 0;
}

int RunOrder(Worker& w) {
  const int small = FLAGS_tensors;
  std::vector<std::vector<float>> data(small + 1);
  for (int t = 0; t <= small; ++t) {
    data[t].resize(t < small ? 2048 : 262144);
    w.DeclareTensor(t < small ? StrCat("order", t) : std::string("blocker"), DataType::kFloat32,
                    {static_cast<int64_t>(data[t].size())});
  }
  for (int round = 0; round < FLAGS_rounds; ++round) {
    std::vector<Handle> handles(small + 1);
    for (int t = small; t >= 0; --t) {
      std::fill(data[t].begin(), data[t].end(), static_cast<float>(w.rank() + t + round));
      handles[t] = w.PushPullAsync(t < small ? StrCat("order", t) : std::string("blocker"),
                                   data[t].data(), data[t].data(), DataType::kFloat32,
                                   data[t].size(), false);
      // The blocker goes alone: it holds the whole credit while the others queue up.
      if (t == small) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    for (int t = 0; t <= small; ++t) w.Wait(handles[t]);
    for (int t = 0; t <= small; ++t) {
      float expected = static_cast<float>(w.size() * (t + round) + w.size() * (w.size() - 1) / 2);
      if (CheckAll(data[t], expected, "order", round)) return kExitWrong;
    }
  }
  const CounterValues s = w.Counters();
  std::printf("OK order rounds=%d fused_messages=%llu partitions_fused=%llu\n", FLAGS_rounds,
              static_cast<unsigned long long>(CounterValue(s, "fused_messages")),
              static_cast<unsigned long long>(CounterValue(s, "partitions_fused")));
  return 0;
}

int CheckAll(const std::vector<float>& v, float expected, const char* what, int round) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != expected) {
      std::fprintf(stderr, "WRONG %s round %d element %zu: got %g expected %g\n", what, round, i,
                   v[i], expected);
      return kExitWrong;
    }
  }
  return 0;
}

int RunJoin(Worker& w) {
  const int n = w.size();
  auto rounds_of = [](int rank) { return 3 + 2 * rank; };
  std::vector<float> sum(1000), avg(3000);
  // Sparse rows too: row 0 by everyone, row 100 + rank by this worker alone (2 elements).
  w.DeclareTensor("join/rows", DataType::kFloat32, {1000, 2});
  const std::vector<int64_t> rows = {0, 100 + w.rank()};
  std::vector<float> row_values(4), row_sums(4);
  for (int round = 0; round < rounds_of(w.rank()); ++round) {
    std::fill(sum.begin(), sum.end(), static_cast<float>(w.rank() + 1));
    std::fill(avg.begin(), avg.end(), static_cast<float>(w.rank() + 1));
    std::fill(row_values.begin(), row_values.end(), static_cast<float>(w.rank() + 1));
    Handle hs = w.PushPullAsync("join/sum", sum.data(), sum.data(), DataType::kFloat32, sum.size(), false);
    Handle ha = w.PushPullAsync("join/avg", avg.data(), avg.data(), DataType::kFloat32, avg.size(), true);
    Handle hr = w.PushPullRowsAsync("join/rows", rows.data(), rows.size(), row_values.data(),
                                    row_sums.data(), DataType::kFloat32, false);
    w.Wait(hs);
    w.Wait(ha);
    w.Wait(hr);
    float total = 0;
    int active = 0;
    for (int r = 0; r < n; ++r) {
      if (rounds_of(r) > round) {
        total += r + 1;
        ++active;
      }
    }
    const float mine = static_cast<float>(w.rank() + 1);
    // As Horovod: a joined worker counts as zeros, the average divides by size() (the
    // worker multiplies by 1/size in float32, as this does).
    const float average = total * static_cast<float>(1.0 / n);
    if (active < 1 || CheckAll(sum, total, "sum", round) || CheckAll(avg, average, "average", round) ||
        CheckAll({row_sums[0], row_sums[1]}, total, "shared row", round) ||
        CheckAll({row_sums[2], row_sums[3]}, mine, "own row", round)) {
      return kExitWrong;
    }
  }
  w.Join();
  for (int round = 0; round < 2; ++round) {  // the next epoch: everyone again
    std::fill(sum.begin(), sum.end(), static_cast<float>(w.rank() + 1));
    w.PushPull("join/sum", sum.data(), sum.data(), DataType::kFloat32, sum.size(), false);
    if (CheckAll(sum, n * (n + 1) / 2.0f, "sum after join", round)) return kExitWrong;
    std::fill(row_values.begin(), row_values.end(), static_cast<float>(w.rank() + 1));
    w.PushPullRows("join/rows", rows.data(), rows.size(), row_values.data(), row_sums.data(),
                   DataType::kFloat32, false);
    if (CheckAll({row_sums[0], row_sums[1]}, n * (n + 1) / 2.0f, "shared row after join",
                 round)) {
      return kExitWrong;
    }
  }
  std::printf("OK join rounds=%d\n", rounds_of(w.rank()));
  return 0;
}

// --- deterministic ---------------------------------------------------------------

// The six orders of (1e8, 1, -1e8) over ranks 0..2, scaled: whichever order of addition
// differs from rank order changes some element's sum. Ranks above 2 push small integers.
float OrderSensitiveValue(int rank, int round, uint64_t i) {
  static const float kOrders[6][3] = {{1e8f, 1.0f, -1e8f}, {1e8f, -1e8f, 1.0f},
                                      {1.0f, 1e8f, -1e8f}, {1.0f, -1e8f, 1e8f},
                                      {-1e8f, 1e8f, 1.0f}, {-1e8f, 1.0f, 1e8f}};
  if (rank > 2) return static_cast<float>(rank);
  return kOrders[(i + static_cast<uint64_t>(round)) % 6][rank] * static_cast<float>(1 + i % 5);
}

uint64_t Fnv1a(uint64_t h, const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

int RunDeterministic(Worker& w) {
  const int n = w.size();
  const std::vector<uint64_t> counts = {1000, 300001};  // one partition; several
  std::vector<std::vector<float>> in(counts.size()), out(counts.size()), want(counts.size());
  for (size_t t = 0; t < counts.size(); ++t) {
    w.DeclareTensor(StrCat("det", t), DataType::kFloat32, {static_cast<int64_t>(counts[t])});
    in[t].resize(counts[t]);
    out[t].resize(counts[t]);
    want[t].resize(counts[t]);
  }
  uint64_t checksum = 14695981039346656037ull;
  for (int round = 0; round < FLAGS_rounds; ++round) {
    // Ranks wait different times, in a different order every round and every seed.
    const int slot = (w.rank() * 2 + round + FLAGS_det_seed) % n;
    std::this_thread::sleep_for(std::chrono::milliseconds(slot * FLAGS_det_delay_ms));
    std::vector<Handle> handles;
    for (size_t t = 0; t < counts.size(); ++t) {
      for (uint64_t i = 0; i < counts[t]; ++i) in[t][i] = OrderSensitiveValue(w.rank(), round, i);
      handles.push_back(w.PushPullAsync(StrCat("det", t), in[t].data(), out[t].data(),
                                        DataType::kFloat32, counts[t], false));
    }
    for (Handle h : handles) w.Wait(h);
    for (size_t t = 0; t < counts.size(); ++t) {
      for (uint64_t i = 0; i < counts[t]; ++i) {
        float sum = OrderSensitiveValue(0, round, i);
        for (int r = 1; r < n; ++r) sum += OrderSensitiveValue(r, round, i);  // rank order
        want[t][i] = sum;
      }
      if (std::memcmp(out[t].data(), want[t].data(), counts[t] * sizeof(float)) != 0) {
        for (uint64_t i = 0; i < counts[t]; ++i) {
          if (std::memcmp(&out[t][i], &want[t][i], sizeof(float)) != 0) {
            std::fprintf(stderr, "WRONG round %d tensor %zu element %llu: got %.9g, rank order gives %.9g\n",
                         round, t, static_cast<unsigned long long>(i), out[t][i], want[t][i]);
            break;
          }
        }
        return kExitWrong;
      }
      checksum = Fnv1a(checksum, out[t].data(), counts[t] * sizeof(float));
    }
  }
  std::printf("OK deterministic rounds=%d checksum %016llx\n", FLAGS_rounds,
              static_cast<unsigned long long>(checksum));
  return 0;
}

// --- async -------------------------------------------------------------------------

float InitialValue(uint64_t i) { return static_cast<float>(i % 1000); }
float Delta(int rank, int step, uint64_t i) {
  return static_cast<float>((i + static_cast<uint64_t>(step + rank)) % 3 + 1);
}

template <typename F>
int ExpectRefused(const char* what, F call) {
  try {
    call();
  } catch (const FerryError& e) {
    if (std::string(e.what()).find("asynchronous") != std::string::npos) {
      std::printf("%s refused: %s\n", what, e.what());
      return 0;
    }
    std::fprintf(stderr, "%s refused for the wrong reason: %s\n", what, e.what());
    return kExitWrong;
  }
  std::fprintf(stderr, "%s was not refused in asynchronous mode\n", what);
  return kExitWrong;
}

int CheckAsyncRefusals(Worker& w) {
  std::vector<float> x(16, 1.0f);
  if (ExpectRefused("average", [&] {
        w.PushPull("async/refused", x.data(), x.data(), DataType::kFloat32, x.size(), true);
      }) ||
      ExpectRefused("broadcast", [&] { w.Broadcast("async/b", x.data(), DataType::kFloat32, 16, 0); }) ||
      ExpectRefused("join", [&] { w.Join(); })) {
    return kExitWrong;
  }
  return 0;
}

int RunAsync(Worker& w) {
  if (CheckAsyncRefusals(w)) return kExitWrong;
  const int n = w.size();
  const uint64_t count = 300001;
  std::vector<float> params(count), delta(count), own(count, 0.0f), total(count, 0.0f);
  for (int r = 0; r < n; ++r) {
    for (int step = 1; step <= FLAGS_steps; ++step) {
      for (uint64_t i = 0; i < count; ++i) total[i] += Delta(r, step, i);
    }
  }
  // Round 0: the initial parameters (the same on every worker, as after a common seed).
  for (uint64_t i = 0; i < count; ++i) delta[i] = InitialValue(i);
  w.PushPull("async/params", delta.data(), params.data(), DataType::kFloat32, count, false);
  for (int step = 1; step <= FLAGS_steps + 1; ++step) {
    const bool last = step > FLAGS_steps;  // after the barrier: a zero delta reads them
    if (last) {
      w.Barrier();
      std::fill(delta.begin(), delta.end(), 0.0f);
    } else {
      for (uint64_t i = 0; i < count; ++i) delta[i] = Delta(w.rank(), step, i);
    }
    w.PushPull("async/params", delta.data(), params.data(), DataType::kFloat32, count, false);
    for (uint64_t i = 0; i < count; ++i) {
      own[i] += delta[i];
      // Applied: all of this worker's deltas, and any of the others'. Exact at the end.
      const float applied = params[i] - InitialValue(i);
      const bool ok = last ? applied == total[i]
                           : applied >= own[i] && applied <= total[i] && applied == std::floor(applied);
      if (!ok) {
        std::fprintf(stderr, "WRONG step %d element %llu: parameters %.9g = initial %g + %.9g, "
                     "own deltas %g, all deltas %g\n", step, static_cast<unsigned long long>(i),
                     params[i], InitialValue(i), applied, own[i], total[i]);
        return kExitWrong;
      }
    }
    if (!last) std::printf("step %d\n", step);
    std::fflush(stdout);
    if (!last) std::this_thread::sleep_for(std::chrono::milliseconds(FLAGS_step_sleep_ms));
  }
  std::printf("OK async steps=%d final parameters exact\n", FLAGS_steps);
  return 0;
}

constexpr int64_t kRowDim = 8;

float RowValue(int rank, int round, int64_t row, int64_t k) {
  return static_cast<float>((row * 3 + k * 5 + rank * 7 + round * 11) % 16 + 1);
}

// Worker `rank`'s row ids in round `round` (deterministic: every worker can compute
// every other worker's list).
std::vector<int64_t> RowsOf(int rank, int round, int64_t total) {
  std::vector<int64_t> rows;
  if (rank == 1 && round == 2) return rows;  // an empty push still completes the round
  for (int64_t i = 0; i < 40; ++i) rows.push_back((i * 13 + round) % 64);  // shared
  // Only this worker pushes these (disjoint across workers for up to 160 rounds of a
  // 100000-row tensor).
  for (int64_t i = 0; i < 50; ++i) rows.push_back(total / 2 + rank * 10000 + round * 60 + i);
  for (int64_t i = 0; i < 300; ++i) rows.push_back((i * 7919 + round * 31 + rank * 13) % total);
  rows.push_back(total - 1);       // the last row, by every worker
  rows.push_back(rows[3]);         // duplicates: each occurrence adds
  rows.push_back(rows[45]);
  rows.push_back(rows[45]);
  std::reverse(rows.begin() + 10, rows.begin() + 30);  // not sorted
  return rows;
}

int CheckRowRefused(Worker& w, int64_t bad) {
  std::vector<int64_t> rows = {0, bad};
  std::vector<float> values(2 * kRowDim, 1.0f), out(2 * kRowDim);
  try {
    w.PushPullRows("embedding", rows.data(), rows.size(), values.data(), out.data(),
                   DataType::kFloat32, false);
  } catch (const FerryError& e) {
    std::string what = e.what();
    std::printf("error as expected: %s\n", e.what());
    if (what.find("'embedding'") == std::string::npos ||
        what.find("row id " + std::to_string(bad)) == std::string::npos) {
      return kExitWrong;
    }
    return 0;
  }
  std::fprintf(stderr, "no error for row id %lld\n", static_cast<long long>(bad));
  return kExitWrong;
}

int RunRows(Worker& w) {
  const int64_t total = FLAGS_rows_total;
  w.DeclareTensor("embedding", DataType::kFloat32, {total, kRowDim});
  w.DeclareTensor("dense", DataType::kFloat32, {1000});
  const int n = w.size();
  for (int round = 0; round < FLAGS_rounds; ++round) {
    if (round == 1) {
      if (CheckRowRefused(w, total) != 0 || CheckRowRefused(w, -1) != 0) return kExitWrong;
    }
    std::vector<int64_t> rows = RowsOf(w.rank(), round, total);
    std::vector<float> values(rows.size() * kRowDim), out(rows.size() * kRowDim, -1.0f);
    for (size_t j = 0; j < rows.size(); ++j) {
      for (int64_t k = 0; k < kRowDim; ++k) {
        values[j * kRowDim + k] = RowValue(w.rank(), round, rows[j], k);
      }
    }
    Handle h = w.PushPullRowsAsync("embedding", rows.data(), rows.size(), values.data(),
                                   out.data(), DataType::kFloat32, false);
    std::vector<float> dense(1000, static_cast<float>(w.rank() + round));
    w.PushPull("dense", dense.data(), dense.data(), DataType::kFloat32, dense.size(), false);
    w.Wait(h);
    // Expected: per row, the sum over every worker's every occurrence of it.
    std::map<int64_t, std::vector<float>> totals;
    for (int r = 0; r < n; ++r) {
      for (int64_t row : RowsOf(r, round, total)) {
        std::vector<float>& t = totals[row];
        t.resize(kRowDim, 0.0f);
        for (int64_t k = 0; k < kRowDim; ++k) t[k] += RowValue(r, round, row, k);
      }
    }
    for (size_t j = 0; j < rows.size(); ++j) {
      for (int64_t k = 0; k < kRowDim; ++k) {
        if (out[j * kRowDim + k] != totals[rows[j]][k]) {
          std::fprintf(stderr, "WRONG round %d position %zu row %lld element %lld: got %g expected %g\n",
                       round, j, static_cast<long long>(rows[j]), static_cast<long long>(k),
                       out[j * kRowDim + k], totals[rows[j]][k]);
          return kExitWrong;
        }
      }
    }
    const float dense_expected = n * round + n * (n - 1) / 2.0f;
    for (float v : dense) {
      if (v != dense_expected) return kExitWrong;
    }
    std::printf("round %d: %zu rows exact\n", round, rows.size());
    std::fflush(stdout);
  }
  const CounterValues s = w.Counters();
  std::printf("OK rows rounds=%d rows_pushed=%llu rows_bytes_pushed=%llu\n", FLAGS_rounds,
              static_cast<unsigned long long>(CounterValue(s, "rows_pushed")),
              static_cast<unsigned long long>(CounterValue(s, "rows_bytes_pushed")));
  return 0;
}

// Bytes this worker's transport sent during one PushPullRows of `count` rows.
uint64_t RowsCallBytes(Worker& w, int64_t count, int64_t total, int64_t dim) {
  std::vector<int64_t> rows(count);
  for (int64_t j = 0; j < count; ++j) rows[j] = (j * 999331) % total;  // distinct, every worker
  std::vector<float> values(count * dim, 1.0f), out(count * dim);
  // Bytes this worker sent, over sockets or through the shared-memory lane.
  auto sent = [&w] {
    const CounterValues c = w.Counters();
    return CounterValue(c, "van.bytes_sent") + CounterValue(c, "van.shm_bytes_sent");
  };
  const uint64_t before = sent();
  w.PushPullRows("huge", rows.data(), rows.size(), values.data(), out.data(), DataType::kFloat32,
                 false);
  for (int64_t j = 0; j < count * dim; ++j) {
    if (out[j] != static_cast<float>(w.size())) return 0;  // every worker sent 1.0 for it
  }
  return sent() - before;
}

int RunRowsBytes(Worker& w) {
  const int64_t total = 1000000, dim = 16;
  const uint64_t dense = total * dim * sizeof(float);
  w.DeclareTensor("huge", DataType::kFloat32, {total, dim});
  const uint64_t small = RowsCallBytes(w, 10, total, dim);
  const uint64_t large = RowsCallBytes(w, 1000, total, dim);
  const uint64_t row_wire = sizeof(int64_t) + dim * sizeof(float);
  std::printf("rows bytes: 10 rows %llu, 1000 rows %llu, dense %llu\n",
              static_cast<unsigned long long>(small), static_cast<unsigned long long>(large),
              static_cast<unsigned long long>(dense));
  // Each call: the rows (ids + values) plus one envelope per server (and perhaps a
  // heartbeat): nothing proportional to the tensor.
  const bool ok = small >= 10 * row_wire && small < 10 * row_wire + 4096 &&
                  large >= 1000 * row_wire && large < 1000 * row_wire + 4096 &&
                  large < dense / 500;
  if (!ok) {
    std::fprintf(stderr, "WRONG: bytes on the wire do not scale with the rows\n");
    return kExitWrong;
  }
  std::printf("OK rows bytes scale with rows\n");
  return 0;
}

int RunRowsMismatch(Worker& w) {
  const int64_t dim = w.rank() == 0 ? 8 : 4;
  w.DeclareTensor("rows_mismatched", DataType::kFloat32, {1000, dim});
  std::vector<int64_t> rows = {1, 2, 999};
  std::vector<float> values(rows.size() * dim, 1.0f), out(rows.size() * dim);
  try {
    w.PushPullRows("rows_mismatched", rows.data(), rows.size(), values.data(), out.data(),
                   DataType::kFloat32, false);
    std::fprintf(stderr, "no error for a mismatched rows tensor\n");
    return kExitWrong;
  } catch (const FerryError& e) {
    std::printf("error as expected: %s\n", e.what());
    if (std::string(e.what()).find("'rows_mismatched'") == std::string::npos) return kExitWrong;
  }
  std::vector<float> after(1000, static_cast<float>(w.rank() + 1));
  w.PushPull("after", after.data(), after.data(), DataType::kFloat32, after.size(), false);
  for (float v : after) {
    if (v != w.size() * (w.size() + 1) / 2.0f) return kExitWrong;
  }
  std::printf("OK other keys still served\n");
  return 0;
}

int RunRowsTimeout(Worker& w) {
  w.DeclareTensor("embedding", DataType::kFloat32, {1000, 8});
  if (w.rank() != 0) {
    // Past rank 0's deadline (FERRY_OP_TIMEOUT_MS=3000 in the test), then shut down.
    std::this_thread::sleep_for(std::chrono::milliseconds(5000));
    return 0;
  }
  std::vector<int64_t> rows = {5};
  std::vector<float> values(8, 1.0f), out(8);
  int code = kExitWrong;
  try {
    w.PushPullRows("embedding", rows.data(), rows.size(), values.data(), out.data(),
                   DataType::kFloat32, false);
    std::fprintf(stderr, "no timeout though no other worker pushed\n");
  } catch (const FerryError& e) {
    std::printf("error as expected: %s\n", e.what());
    if (e.code() == ErrorCode::kTimeout &&
        std::string(e.what()).find("push_pull_rows of tensor 'embedding'") != std::string::npos) {
      std::printf("OK rows timeout\n");
      code = 0;
    }
  }
  return code;
}

// --mode=elastic (see the file comment).
struct ElasticModel {
  std::vector<float> a = std::vector<float>(300000, 0.0f);
  std::vector<float> b = std::vector<float>(1000, 0.0f);
  std::vector<float> rows = std::vector<float>(1000 * 4, 0.0f);
  int64_t step = 0;
};

constexpr int64_t kElasticRows = 1000;

// The rows worker `rank` pushes at `step` (ids; its values are rank + 1 in every column).
std::vector<int64_t> ElasticRowsOf(int rank, int64_t step) {
  return {step % kElasticRows, (step * 13 + 100 * (rank + 1)) % kElasticRows};
}

// One step: every sum checked; the model takes them. Returns kExitWrong on a wrong value.
int ElasticStep(Worker& w, ElasticModel& m) {
  const int size = w.size();
  const int64_t step = m.step;
  auto pushed = [&](size_t i, int rank) {
    return static_cast<float>((i + static_cast<size_t>(step)) % 5 + static_cast<size_t>(rank) + 1);
  };
  // Alive until the process ends: after a membership change ZeroMQ may still read a push
  // queued for a dead server (worker.h, Reset()).
  static std::vector<float> a, b;
  a.resize(m.a.size());
  b.resize(m.b.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = pushed(i, w.rank());
  for (size_t i = 0; i < b.size(); ++i) b[i] = pushed(i, w.rank());
  Handle ha = w.PushPullAsync("elastic_a", a.data(), a.data(), DataType::kFloat32, a.size(), false);
  Handle hb = w.PushPullAsync("elastic_b", b.data(), b.data(), DataType::kFloat32, b.size(), false);
  const std::vector<int64_t> ids = ElasticRowsOf(w.rank(), step);
  std::vector<float> values(ids.size() * 4, static_cast<float>(w.rank() + 1));
  std::vector<float> rows_out(values.size(), -1.0f);
  w.PushPullRows("elastic_rows", ids.data(), ids.size(), values.data(), rows_out.data(),
                 DataType::kFloat32, false);
  w.Wait(ha);
  w.Wait(hb);
  for (auto* v : {&a, &b}) {
    for (size_t i = 0; i < v->size(); ++i) {
      float expected = 0;
      for (int r = 0; r < size; ++r) expected += pushed(i, r);
      if ((*v)[i] != expected) {
        std::fprintf(stderr, "WRONG step %lld element %zu: got %g expected %g (size %d)\n",
                     static_cast<long long>(step), i, (*v)[i], expected, size);
        return kExitWrong;
      }
    }
  }
  std::map<int64_t, float> totals;  // row -> every rank's pushes of it
  for (int r = 0; r < size; ++r) {
    for (int64_t row : ElasticRowsOf(r, step)) totals[row] += static_cast<float>(r + 1);
  }
  for (size_t j = 0; j < ids.size(); ++j) {
    for (int c = 0; c < 4; ++c) {
      if (rows_out[j * 4 + c] != totals[ids[j]]) {
        std::fprintf(stderr, "WRONG step %lld row %lld: got %g expected %g\n",
                     static_cast<long long>(step), static_cast<long long>(ids[j]),
                     rows_out[j * 4 + c], totals[ids[j]]);
        return kExitWrong;
      }
      // The model takes the row every worker pushed (ids[0]): the same on every worker.
      if (j == 0) m.rows[ids[j] * 4 + c] += rows_out[j * 4 + c];
    }
  }
  for (size_t i = 0; i < a.size(); ++i) m.a[i] += a[i];
  for (size_t i = 0; i < b.size(); ++i) m.b[i] += b[i];
  m.step++;
  return 0;
}

// Horovod Elastic's sync(): every worker takes rank 0's model and step.
void ElasticSync(Worker& w, ElasticModel& m) {
  w.Broadcast("elastic_sync_a", m.a.data(), DataType::kFloat32, m.a.size(), 0);
  w.Broadcast("elastic_sync_b", m.b.data(), DataType::kFloat32, m.b.size(), 0);
  w.Broadcast("elastic_sync_rows", m.rows.data(), DataType::kFloat32, m.rows.size(), 0);
  w.Broadcast("elastic_sync_step", &m.step, DataType::kInt64, 1, 0);
}

uint64_t ElasticChecksum(const ElasticModel& m) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  mix(m.a.data(), m.a.size() * sizeof(float));
  mix(m.b.data(), m.b.size() * sizeof(float));
  mix(m.rows.data(), m.rows.size() * sizeof(float));
  mix(&m.step, sizeof m.step);
  return h;
}

int RunElastic(Worker& w) {
  w.DeclareTensor("elastic_a", DataType::kFloat32, {300000});
  w.DeclareTensor("elastic_b", DataType::kFloat32, {1000});
  w.DeclareTensor("elastic_rows", DataType::kFloat32, {kElasticRows, 4});
  ElasticModel model, committed;
  int resets = 0;
  // A worker that joined a running job starts from rank 0's state.
  bool sync = w.epoch() > 0;
  if (sync) std::printf("joined at epoch %u as rank %d of %d\n", w.epoch(), w.rank(), w.size());
  while (model.step < FLAGS_rounds) {
    try {
      if (sync) {
        ElasticSync(w, model);
        sync = false;
      }
      if (int code = ElasticStep(w, model); code != 0) return code;
      w.StepBoundary();  // the live metrics' iteration time
      if (model.step % FLAGS_commit_every == 0) {
        committed = model;
        if (w.HostsUpdated()) {  // workers wait to join: admitted here, on every worker
          w.Reset();
          sync = true;
          std::printf("admitted at step %lld: epoch %u rank %d size %d\n",
                      static_cast<long long>(model.step), w.epoch(), w.rank(), w.size());
        }
      }
      std::printf("step %lld\n", static_cast<long long>(model.step));
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(FLAGS_loop_sleep_ms));
    } catch (const FerryError& e) {
      if (e.code() != ErrorCode::kMembershipChanged) throw;
      model = committed;  // restore()
      w.Reset();
      resets++;
      sync = true;
      std::printf("reset epoch %u rank %d size %d step %lld\n", w.epoch(), w.rank(), w.size(),
                  static_cast<long long>(model.step));
      std::fflush(stdout);
    }
  }
  // Every live worker joins at the end (join() counts the live workers only); a change
  // during the join would end this run with the error.
  const int last = w.Join();
  std::printf("OK elastic steps=%lld resets=%d checksum=%llx joined_last=%d\n",
              static_cast<long long>(model.step), resets,
              static_cast<unsigned long long>(ElasticChecksum(model)), last);
  return 0;
}

int Run(const Config& config) {
  auto w = Worker::Create(config);
  int code;
  if (FLAGS_mode == "sums") {
    code = RunSums(*w);
  } else if (FLAGS_mode == "mismatch") {
    code = RunMismatch(*w);
  } else if (FLAGS_mode == "compression") {
    code = RunCompression(*w, FLAGS_compression, FLAGS_rounds);
  } else if (FLAGS_mode == "compression_mismatch") {
    code = RunCompressionMismatch(*w);
  } else if (FLAGS_mode == "refused") {
    code = RunRefused(*w);
  } else if (FLAGS_mode == "join") {
    code = RunJoin(*w);
  } else if (FLAGS_mode == "loop") {
    code = RunLoop(*w);
  } else if (FLAGS_mode == "barriers") {
    code = RunBarriers(*w);
  } else if (FLAGS_mode == "deterministic") {
    code = RunDeterministic(*w);
  } else if (FLAGS_mode == "async") {
    code = RunAsync(*w);
  } else if (FLAGS_mode == "order") {
    code = RunOrder(*w);
  } else if (FLAGS_mode == "rows") {
    code = RunRows(*w);
  } else if (FLAGS_mode == "rows_bytes") {
    code = RunRowsBytes(*w);
  } else if (FLAGS_mode == "rows_mismatch") {
    code = RunRowsMismatch(*w);
  } else if (FLAGS_mode == "rows_timeout") {
    code = RunRowsTimeout(*w);
  } else if (FLAGS_mode == "elastic") {
    code = RunElastic(*w);
  } else if (FLAGS_mode == "backup") {
    code = RunBackup(*w, FLAGS_rounds, FLAGS_slow_rank, FLAGS_slow_ms, FLAGS_catch_up);
  } else {
    std::fprintf(stderr, "unknown --mode=%s\n", FLAGS_mode.c_str());
    return 2;
  }
  if (code == 0) w->Shutdown();
  return code;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  const ferry::NodeRole role = ferry::NodeRole::kWorker;
  return ferry::RunRoleMain(argc, argv, &role, ferry::Run);
}
