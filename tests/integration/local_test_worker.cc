// ferry-local-test-worker: one process of a local group (worker/local/local_group.h) for
// tests/integration/local_group_test.cc. Run as FERRY_LOCAL_SIZE copies per machine.
//
// --mode=sums  --tensors tensors of 1 .. --max_elems floats (and one int32 tensor),
//              push_pulled --rounds times, all in flight together; every element is
//              checked exactly against the sum (or average, every other tensor) over
//              every rank. Then a broadcast from global rank --bcast_root, a barrier,
//              and "OK rounds=N rank=R size=S local=L/LS".
// --mode=die   push_pull one tensor in a loop ("round N"); the process of global rank
//              --die_rank kills itself (SIGKILL) at round --die_round, or with
//              --stall_ms > 0 stops calling Ferry that long instead, then goes on; the
//              others must end with an error.
// --mode=mismatch  global rank 1 push_pulls tensor "m" with 11 elements, the others with
//              10: its group must fail with an error saying the local ranks disagree.
// --mode=device_refused  push_pull of a host pointer as a device tensor: every rank must
//              get a FerryError at once (printed "REFUSED: <message>"; the reason
//              depends on the build: no NCCL, no GPU, not device memory), then a host
//              push_pull must still work.
// Exit codes: 0 as expected, 1 a Ferry error, 3 a wrong value.

#include <gflags/gflags.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "common/config/config.h"
#include "common/util/error.h"
#include "worker/local/local_group.h"

DEFINE_string(mode, "sums", "sums or die");
DEFINE_int32(tensors, 6, "float tensors (sums mode)");
DEFINE_int32(max_elems, 300000, "elements of the largest tensor (sums mode)");
DEFINE_int32(rounds, 5, "rounds (sums mode)");
DEFINE_int32(bcast_root, 3, "global rank broadcasting (sums mode)");
DEFINE_int32(die_rank, 1, "die mode: the global rank that kills itself");
DEFINE_int32(die_round, 3, "die mode: the round at which it does");
DEFINE_int32(stall_ms, 0, "die mode: stall this long instead of dying");

namespace ferry {
namespace {

constexpr int kExitWrong = 3;

float Value(int rank, int round, int tensor, uint64_t i) {
  return static_cast<float>((i * 3 + tensor * 5 + rank * 7 + round * 11) % 16 + 1);
}

uint64_t Elems(int t) {
  if (t == 0) return 1;
  return std::max<uint64_t>(
      1, static_cast<uint64_t>(FLAGS_max_elems) >> (2 * (FLAGS_tensors - 1 - t)));
}

int Sums(Collective& g) {
  const int size = g.size(), rank = g.rank();
  std::vector<std::vector<float>> data(FLAGS_tensors);
  for (int t = 0; t < FLAGS_tensors; ++t) {
    g.DeclareTensor("t" + std::to_string(t), DataType::kFloat32, {static_cast<int64_t>(Elems(t))});
  }
  std::vector<int32_t> ints(1000);
  for (int round = 0; round < FLAGS_rounds; ++round) {
    std::vector<Handle> handles;
    for (int t = 0; t < FLAGS_tensors; ++t) {
      data[t].resize(Elems(t));
      for (uint64_t i = 0; i < data[t].size(); ++i) data[t][i] = Value(rank, round, t, i);
      handles.push_back(g.PushPullAsync("t" + std::to_string(t), data[t].data(), data[t].data(),
                                        DataType::kFloat32, data[t].size(), t % 2 == 1));
    }
    for (size_t i = 0; i < ints.size(); ++i)
      ints[i] = static_cast<int32_t>(rank * 1000 + i + round);
    g.PushPull("ints", ints.data(), ints.data(), DataType::kInt32, ints.size(), false);
    g.PushPull("empty", nullptr, nullptr, DataType::kFloat64, 0, true);  // no elements at all
    for (Handle h : handles) g.Wait(h);
    for (int t = 0; t < FLAGS_tensors; ++t) {
      for (uint64_t i = 0; i < data[t].size(); ++i) {
        float want = 0;
        for (int r = 0; r < size; ++r) want += Value(r, round, t, i);
        if (t % 2 == 1) want = want * static_cast<float>(1.0 / size);
        if (data[t][i] != want) {
          std::printf("WRONG tensor %d round %d element %llu: %g, expected %g\n", t, round,
                      static_cast<unsigned long long>(i), data[t][i], want);
          return kExitWrong;
        }
      }
    }
    for (size_t i = 0; i < ints.size(); ++i) {
      int64_t want = 0;
      for (int r = 0; r < size; ++r) want += r * 1000 + static_cast<int64_t>(i) + round;
      if (ints[i] != want) {
        std::printf("WRONG ints round %d element %zu: %d, expected %lld\n", round, i, ints[i],
                    static_cast<long long>(want));
        return kExitWrong;
      }
    }
    g.StepBoundary();
  }
  std::vector<float> b(4097);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(rank * 100000 + i);
  g.Broadcast("bcast", b.data(), DataType::kFloat32, b.size(), FLAGS_bcast_root);
  for (size_t i = 0; i < b.size(); ++i) {
    if (b[i] != static_cast<float>(FLAGS_bcast_root * 100000 + i)) {
      std::printf("WRONG broadcast element %zu: %g\n", i, b[i]);
      return kExitWrong;
    }
  }
  g.Barrier();
  std::printf("OK rounds=%d rank=%d size=%d local=%d/%d\n", FLAGS_rounds, rank, size,
              g.local_rank(), g.local_size());
  return 0;
}

int Die(Collective& g) {
  std::vector<float> v(100000, 1.0f);
  for (int round = 0;; ++round) {
    if (g.rank() == FLAGS_die_rank && round == FLAGS_die_round && FLAGS_stall_ms > 0) {
      std::printf("stalling (pid %d)\n", getpid());
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(FLAGS_stall_ms));
    } else if (g.rank() == FLAGS_die_rank && round == FLAGS_die_round) {
      std::printf("killing myself (pid %d)\n", getpid());
      std::fflush(stdout);
      raise(SIGKILL);
    }
    g.PushPull("loop", v.data(), v.data(), DataType::kFloat32, v.size(), true);
    std::printf("round %d\n", round);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

int Mismatch(Collective& g) {
  std::vector<float> v(11, 1.0f);
  g.PushPull("m", v.data(), v.data(), DataType::kFloat32, g.rank() == 1 ? 11 : 10, false);
  std::printf("WRONG: the mismatched push_pull succeeded\n");
  return kExitWrong;
}

int DeviceRefused(Collective& g) {
  std::vector<float> v(10, 1.0f);
  try {
    g.PushPullDevice("d", v.data(), v.data(), DataType::kFloat32, v.size(), false);
    std::printf("WRONG: a host pointer passed as a device tensor was accepted\n");
    return kExitWrong;
  } catch (const FerryError& e) {
    std::printf("REFUSED: %s\n", e.what());
  }
  g.PushPull("h", v.data(), v.data(), DataType::kFloat32, v.size(), false);
  if (v[0] != static_cast<float>(g.size())) {
    std::printf("WRONG: host push_pull after the refusal gave %g\n", v[0]);
    return kExitWrong;
  }
  std::printf("OK rank=%d\n", g.rank());
  return 0;
}

int Main() {
  Config config = Config::FromEnvironment(ProcessEnvironment());
  std::unique_ptr<Collective> g = LocalGroup::Create(config);
  std::printf("rank %d of %d, local rank %d of %d, pid %d\n", g->rank(), g->size(), g->local_rank(),
              g->local_size(), getpid());
  std::fflush(stdout);
  const int code = FLAGS_mode == "die"        ? Die(*g)
                   : FLAGS_mode == "mismatch" ? Mismatch(*g)
                   : FLAGS_mode == "device_refused" ? DeviceRefused(*g)
                                              : Sums(*g);
  if (code != 0) return code;
  g->Shutdown();
  return 0;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  try {
    return ferry::Main();
  } catch (const ferry::FerryError& e) {
    std::printf("FERRY ERROR (%s): %s\n", ferry::ErrorCodeName(e.code()), e.what());
    std::fflush(stdout);
    return e.code() == ferry::ErrorCode::kInvalidConfig ? 2 : 1;
  }
}
