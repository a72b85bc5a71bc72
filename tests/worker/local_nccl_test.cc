// LocalNccl's step protocol (worker/local/local_nccl.h) on the CUDA/NCCL stub
// (tests/stubs/cuda_nccl: host memory, communicators that really meet and really sum),
// built where FERRY_NCCL_STUB=ON. The L local ranks are L backends in this process, wired
// as LocalRoot and LocalPeer wire them: the root's SendStep calls each peer's RunStep in
// order (the socket's order), the root's GO comes once every rank submitted a round, a
// backend's OnFailure fails every rank (the owner's FAIL), and the machine's push_pull is
// FakeMachine, which finishes sums on its own thread, out of order, or fails them.

#include "worker/local/local_nccl.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/reduce/reduce.h"
#include "common/util/clock.h"
#include "common/util/mutex.h"
#include "common/util/status.h"
#include "tests/stubs/cuda_nccl/cuda_nccl_stub.h"
#include "tests/support/process_group.h"

namespace ferry {
namespace {

using Step = LocalNccl::Step;

int64_t Backstop() { return 20000L * testing::TimeScale(); }  // a deadline no test reaches
int64_t Short() { return 400L * testing::DetectionScale(); }  // a deadline a test waits out

// Device memory of the stub (cudaMalloc), freed with the object.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { EXPECT_EQ(cudaMalloc(&p_, bytes), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

// The root's machine push_pull (the Worker's PushPullAsync): the sum over `machines`
// machines, each of which summed what this one did (so `machines` x the local sum). Sums
// finish on its own thread in a shuffled order; a push_pull may be made to fail or to
// throw, and sums may be held back.
class FakeMachine {
 public:
  explicit FakeMachine(int machines) : machines_(machines) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~FakeMachine() { Stop(); }

  LocalNccl::MachinePushPull PushPull() {
    return [this](const DeviceTensor& t, void* host, LocalNccl::MachineDone done) {
      MutexLock lock(mu_);
      ++started_;
      if (!throw_next_.empty()) {
        const std::string why = throw_next_;
        throw_next_.clear();
        throw FerryError(ErrorCode::kInternal, why);
      }
      pending_.push_back(Sum{t, host, std::move(done), fail_next_});
      fail_next_.clear();
      cv_.NotifyAll();
    };
  }
  void FailNext(const std::string& error) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    fail_next_ = error;
  }
  void ThrowNext(const std::string& error) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    throw_next_ = error;
  }
  void Hold(bool hold) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    held_ = hold;
    cv_.NotifyAll();
  }
  // Waits until `n` push_pulls started; false after the deadline.
  bool WaitStarted(int n) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return cv_.WaitFor(mu_, Millis(Backstop()), [&]() REQUIRES(mu_) {
      return started_ >= n && pending_.size() >= size_t(n);
    });
  }
  // The Worker's destructor: no `done` after this; held sums are dropped.
  void Stop() EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      stopping_ = true;
      cv_.NotifyAll();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct Sum {
    DeviceTensor t;
    void* host;
    LocalNccl::MachineDone done;
    std::string error;
  };

  void Loop() EXCLUDES(mu_) {
    std::mt19937 random(7);
    MutexLock lock(mu_);
    for (;;) {
      cv_.Wait(mu_, [&]() REQUIRES(mu_) { return stopping_ || (!held_ && !pending_.empty()); });
      if (stopping_) return;
      // Out of order: the BROADCASTs follow the machines' sums, not the REDUCEs.
      auto it = pending_.begin() + random() % pending_.size();
      Sum s = std::move(*it);
      pending_.erase(it);
      MutexUnlock unlock(mu_);
      if (s.error.empty() && s.t.count > 0) Scale(s.host, machines_, s.t.count, s.t.dtype);
      std::this_thread::sleep_for(std::chrono::microseconds(random() % 500));
      s.done(s.error);
    }
  }

  const int machines_;
  Mutex mu_;    // guards everything below
  CondVar cv_;  // signalled on a push_pull, Hold and Stop
  std::deque<Sum> pending_ GUARDED_BY(mu_);
  std::string fail_next_ GUARDED_BY(mu_);
  std::string throw_next_ GUARDED_BY(mu_);
  int started_ GUARDED_BY(mu_) = 0;
  bool held_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// L backends wired as the local group wires them.
class Group {
 public:
  // `peer_timeout_ms`: the peers' FERRY_OP_TIMEOUT_MS where it differs from the root's.
  Group(int local_size, FakeMachine& machine, int machines, int64_t op_timeout_ms,
        int64_t peer_timeout_ms = 0)
      : drop_(local_size, false) {
    for (int r = 0; r < local_size; ++r) {
      auto on_failure = [this](const std::string& reason) { FailAll(reason); };
      ranks_.push_back(
          r == 0 ? LocalNccl::Create(
                       0, local_size, op_timeout_ms, local_size * machines, machine.PushPull(),
                       [this](Step step, const std::string& name, uint64_t seq,
                              const std::string& id) { SendStep(step, name, seq, id); },
                       on_failure)
                 : LocalNccl::Create(r, local_size,
                                     peer_timeout_ms > 0 ? peer_timeout_ms : op_timeout_ms, 0,
                                     nullptr, nullptr, on_failure));
    }
  }
  ~Group() { StopAll(); }

  int size() const { return static_cast<int>(ranks_.size()); }
  LocalNccl& rank(int r) { return *ranks_[r]; }

  // Rank r's call: queued there, then counted by the root, which starts the round (GO)
  // once every rank made that call.
  uint64_t Submit(int r, const DeviceTensor& t) EXCLUDES(mu_) {
    const uint64_t ticket = ranks_[r]->Submit(t);
    MutexLock lock(mu_);
    std::vector<int>& calls = calls_[t.name];
    calls.resize(ranks_.size());
    ++calls[r];
    if (*std::min_element(calls.begin(), calls.end()) > started_[t.name]) {
      ++started_[t.name];
      ranks_[0]->Go(t.name);
    }
    return ticket;
  }
  // The root's step messages to peer p are lost from now on.
  void DropStepsTo(int p) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    drop_[p] = true;
  }
  std::vector<std::string> failures() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return failures_;
  }
  // The owners' shutdown: every backend's Stop, the root's first.
  void StopAll() {
    for (auto& r : ranks_) r->Stop();
  }

 private:
  void SendStep(Step step, const std::string& name, uint64_t seq, const std::string& id)
      EXCLUDES(mu_) {
    std::vector<bool> drop;
    {
      MutexLock lock(mu_);
      drop = drop_;
    }
    for (size_t p = 1; p < ranks_.size(); ++p) {
      if (!drop[p]) ranks_[p]->RunStep(step, name, seq, id);
    }
  }
  void FailAll(const std::string& reason) EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      failures_.push_back(reason);
    }
    for (auto& r : ranks_) r->Fail(reason);
  }

  std::vector<std::unique_ptr<LocalNccl>> ranks_;                  // made before any call
  Mutex mu_;                                                       // guards everything below
  std::map<std::string, std::vector<int>> calls_ GUARDED_BY(mu_);  // calls by name and rank
  std::map<std::string, int> started_ GUARDED_BY(mu_);             // rounds started by name
  std::vector<bool> drop_ GUARDED_BY(mu_);
  std::vector<std::string> failures_ GUARDED_BY(mu_);  // OnFailure's reasons
};

// A tensor of the tests: its values on rank r in round n are small integers, so that
// every sum and (for these sizes) average is exact.
struct Spec {
  std::string name;
  DataType dtype;
  uint64_t count;
  bool average;
  bool in_place;
};

double Value(int rank, int round, int tensor, uint64_t i) {
  return static_cast<double>((i * 3 + tensor * 5 + rank * 7 + round * 11) % 16 + 1);
}

void Fill(std::vector<char>& host, const Spec& s, int rank, int round, int tensor) {
  host.resize(s.count * DataTypeSize(s.dtype));
  for (uint64_t i = 0; i < s.count; ++i) {
    const double v = Value(rank, round, tensor, i);
    switch (s.dtype) {
      case DataType::kFloat32:
        reinterpret_cast<float*>(host.data())[i] = static_cast<float>(v);
        break;
      case DataType::kFloat64:
        reinterpret_cast<double*>(host.data())[i] = v;
        break;
      case DataType::kInt32:
        reinterpret_cast<int32_t*>(host.data())[i] = static_cast<int32_t>(v);
        break;
      default:
        FAIL() << "no test values for " << DataTypeName(s.dtype);
    }
  }
}

double Element(const std::vector<char>& host, DataType dtype, uint64_t i) {
  switch (dtype) {
    case DataType::kFloat32:
      return reinterpret_cast<const float*>(host.data())[i];
    case DataType::kFloat64:
      return reinterpret_cast<const double*>(host.data())[i];
    case DataType::kInt32:
      return reinterpret_cast<const int32_t*>(host.data())[i];
    default:
      return NAN;
  }
}

// One rank's tensor of one round: its device buffers and ticket.
struct Call {
  int tensor = 0;
  int round = 0;
  std::unique_ptr<DeviceBuffer> in, out;
  uint64_t ticket = 0;
};

// Every rank, on its own thread, submits every tensor of every round (in an order of its
// own: rotated by its rank, reversed on odd ranks), then waits for each; every element of
// every output is checked against the sum over ranks and machines.
void RunAndCheck(Group& g, const std::vector<Spec>& specs, int rounds, int machines) {
  const int L = g.size();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(L);
  for (int r = 0; r < L; ++r) {
    threads.emplace_back([&, r] {
      std::vector<Call> calls;
      for (int n = 0; n < rounds; ++n) {
        for (int k = 0; k < static_cast<int>(specs.size()); ++k) {
          int t = (k + r) % static_cast<int>(specs.size());
          if (r % 2 == 1) t = static_cast<int>(specs.size()) - 1 - t;
          const Spec& s = specs[t];
          Call c;
          c.tensor = t;
          c.round = n;
          const size_t bytes = s.count * DataTypeSize(s.dtype);
          std::vector<char> host;
          Fill(host, s, r, n, t);
          if (bytes > 0) {
            c.in = std::make_unique<DeviceBuffer>(bytes);
            if (!s.in_place) c.out = std::make_unique<DeviceBuffer>(bytes);
            cudaMemcpy(c.in->get(), host.data(), bytes, cudaMemcpyHostToDevice);
          }
          DeviceTensor d;
          d.name = s.name;
          d.input = c.in ? c.in->get() : nullptr;
          d.output = c.out ? c.out->get() : (c.in ? c.in->get() : nullptr);
          d.dtype = s.dtype;
          d.count = s.count;
          d.average = s.average;
          c.ticket = g.Submit(r, d);
          calls.push_back(std::move(c));
        }
      }
      for (Call& c : calls) {
        const Spec& s = specs[c.tensor];
        try {
          g.rank(r).Wait(c.ticket);
        } catch (const FerryError& e) {
          errors[r] += StrCat("rank ", r, " '", s.name, "' round ", c.round, ": ", e.what(), "\n");
          continue;
        }
        std::vector<char> host(s.count * DataTypeSize(s.dtype));
        if (!host.empty()) {
          cudaMemcpy(host.data(), c.out ? c.out->get() : c.in->get(), host.size(),
                     cudaMemcpyDeviceToHost);
        }
        for (uint64_t i = 0; i < s.count; ++i) {
          double want = 0;
          for (int q = 0; q < L; ++q) want += machines * Value(q, c.round, c.tensor, i);
          if (s.average) want /= L * machines;
          const double got = Element(host, s.dtype, i);
          if (std::abs(got - want) > 1e-6 * want) {
            errors[r] += StrCat("rank ", r, " '", s.name, "' round ", c.round, " element ", i, ": ",
                                got, ", expected ", want, "\n");
            break;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < L; ++r) EXPECT_EQ(errors[r], "") << "local rank " << r;
}

const std::vector<Spec>& Tensors() {
  static const std::vector<Spec> specs = {
      {"one", DataType::kFloat32, 1, false, true},
      {"averaged", DataType::kFloat32, 1000, true, false},
      // Over the stub's 1 MiB slices: the collectives run in several.
      {"large", DataType::kFloat32, 300001, false, true},
      {"ints", DataType::kInt32, 777, false, false},
      {"doubles", DataType::kFloat64, 5000, true, true},
      {"empty", DataType::kFloat32, 0, false, true},
  };
  return specs;
}

class LocalNcclTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { cuda_nccl_stub::SetDeviceCount(1); }
};

TEST_P(LocalNcclTest, EveryRankGetsTheExactSumsAndAveragesOfRoundsStartedInAnyOrder) {
  const int allocations = cuda_nccl_stub::LiveAllocations();
  {
    FakeMachine machine(2);
    Group g(GetParam(), machine, 2, Backstop());
    RunAndCheck(g, Tensors(), 3, 2);
    EXPECT_EQ(g.failures(), std::vector<std::string>());
    g.StopAll();
    machine.Stop();
  }
  // The pinned buffers, streams and events went with the backends.
  EXPECT_EQ(cuda_nccl_stub::LiveAllocations(), allocations);
}

INSTANTIATE_TEST_SUITE_P(LocalRanks, LocalNcclTest, ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return StrCat("L", info.param);
                         });

// Submits `name` (count float32s) on every rank of g but `skip`, each on its own thread,
// and returns what each rank's Wait threw ("" for none; the skipped rank's stays "").
std::vector<std::string> SubmitAndWait(Group& g, const std::string& name, uint64_t count,
                                       int skip = -1) {
  std::vector<std::string> thrown(g.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < g.size(); ++r) {
    if (r == skip) continue;
    threads.emplace_back([&, r] {
      DeviceBuffer b(count * sizeof(float));
      DeviceTensor t;
      t.name = name;
      t.input = t.output = b.get();
      t.count = count;
      try {
        g.rank(r).Wait(g.Submit(r, t));
      } catch (const FerryError& e) {
        thrown[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return thrown;
}

// Kernels of an aborted communicator end late, so that CUDA work a backend left on its
// stream after a round ended would still be there when the test looks.
class LocalNcclFailureTest : public ::testing::Test {
 protected:
  void SetUp() override { cuda_nccl_stub::SetAbortLatency(50); }
  void TearDown() override { cuda_nccl_stub::SetAbortLatency(0); }
};

// Once every rank's Wait returned, no CUDA work is left that could touch the buffers.
void ExpectNoWorkLeft() {
  EXPECT_EQ(cuda_nccl_stub::BusyStreams(), 0) << "a stream still runs work of a round that ended";
}

TEST_F(LocalNcclFailureTest, AFailedMachinePushPullFailsEveryRanksWaitNamingIt) {
  FakeMachine machine(1);
  Group g(3, machine, 1, Backstop());
  machine.FailNext("server 2 refused key 'w': out of memory");
  for (const std::string& e : SubmitAndWait(g, "w", 100)) {
    EXPECT_NE(e.find("server 2 refused key 'w'"), std::string::npos) << e;
  }
  ASSERT_EQ(g.failures().size(), 1u);
  // Every later call fails with it at once.
  for (const std::string& e : SubmitAndWait(g, "v", 10)) {
    EXPECT_NE(e.find("server 2 refused key 'w'"), std::string::npos) << e;
  }
}

TEST_F(LocalNcclFailureTest, AMachinePushPullThatCannotStartFailsEveryRank) {
  FakeMachine machine(1);
  Group g(2, machine, 1, Backstop());
  machine.ThrowNext("the Worker shut down");
  for (const std::string& e : SubmitAndWait(g, "w", 100)) {
    EXPECT_NE(e.find("the Worker shut down"), std::string::npos) << e;
  }
}

TEST_F(LocalNcclFailureTest, ARankThatNeverCallsTimesOutTheOthersNamingTheTensor) {
  FakeMachine machine(1);
  Group g(3, machine, 1, Short());
  const std::vector<std::string> thrown = SubmitAndWait(g, "grad.7", 10, /*skip=*/2);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(thrown[r].find("push_pull of device tensor 'grad.7' did not start within"),
              std::string::npos)
        << thrown[r];
  }
  EXPECT_FALSE(g.failures().empty());  // the owner heard, and failed the group
}

TEST_F(LocalNcclFailureTest, APeerThatMissesItsReduceTimesOutTheRootsNcclReduce) {
  // The peer's own deadline (its tensor without a REDUCE) is longer here, so that the
  // root's, in its ncclReduce that waits for the peer, ends the round.
  FakeMachine machine(1);
  Group g(2, machine, 1, Short(), 4 * Short());
  for (const std::string& e : SubmitAndWait(g, "first", 10)) EXPECT_EQ(e, "");
  g.DropStepsTo(1);
  for (const std::string& e : SubmitAndWait(g, "x", 1000)) {
    EXPECT_NE(e.find("NCCL backend of local rank 0"), std::string::npos) << e;
    EXPECT_NE(e.find("ncclReduce of 'x' did not finish by its deadline"), std::string::npos) << e;
  }
  ASSERT_EQ(g.failures().size(), 1u);
  // The root's kernel waited for the peer, with the copy of the sum queued behind it:
  // both were over before the root's Wait returned.
  ExpectNoWorkLeft();
}

TEST_F(LocalNcclFailureTest, AFailedNcclCallOnAPeerFailsEveryRankNamingTheCall) {
  FakeMachine machine(1);
  Group g(3, machine, 1, Backstop());
  for (const std::string& e : SubmitAndWait(g, "first", 10)) EXPECT_EQ(e, "");
  cuda_nccl_stub::FailNextCall("ncclBroadcast", 2, "injected: NVLink error");
  // The root's ncclBroadcast waits for local rank 2, which failed: the root's poll of the
  // group's failure ends it, and it aborts its communicator.
  for (const std::string& e : SubmitAndWait(g, "w", 1000)) {
    EXPECT_NE(e.find("NCCL backend of local rank 2"), std::string::npos) << e;
    EXPECT_NE(e.find("NCCL call ncclBroadcast failed"), std::string::npos) << e;
    EXPECT_NE(e.find("injected: NVLink error"), std::string::npos) << e;
  }
  ExpectNoWorkLeft();
}

TEST_F(LocalNcclFailureTest, AFailedSetUpOfTheCommunicatorFailsEveryRank) {
  FakeMachine machine(1);
  Group g(2, machine, 1, Backstop());
  cuda_nccl_stub::FailNextCall("ncclCommInitRankConfig", 1, "injected: no shared memory");
  for (const std::string& e : SubmitAndWait(g, "w", 10)) {
    EXPECT_NE(e.find("NCCL call ncclCommInitRankConfig failed"), std::string::npos) << e;
  }
}

TEST_F(LocalNcclFailureTest, ALostStepMessageFailsThePeerNamingIt) {
  FakeMachine machine(1);
  Group g(2, machine, 1, Backstop());
  DeviceBuffer b(sizeof(float));
  DeviceTensor t;
  t.name = "w";
  t.input = t.output = b.get();
  t.count = 1;
  const uint64_t ticket = g.rank(1).Submit(t);
  g.rank(1).RunStep(Step::kReduce, "w", 2, "");  // REDUCE 1 never came
  try {
    g.rank(1).Wait(ticket);
    ADD_FAILURE() << "Wait returned";
  } catch (const FerryError& e) {
    EXPECT_NE(std::string(e.what()).find("REDUCE number 2 of device tensor 'w' after REDUCE 0"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(LocalNcclFailureTest, ShutdownWhileRoundsAreInFlightFailsEveryWait) {
  const int allocations = cuda_nccl_stub::LiveAllocations();
  {
    FakeMachine machine(1);
    machine.Hold(true);  // every round waits for its machine sum
    auto g = std::make_unique<Group>(3, machine, 1, Backstop());
    std::vector<std::vector<std::string>> thrown(4);
    std::vector<std::thread> threads;
    for (int k = 0; k < 4; ++k) {
      threads.emplace_back([&, k] { thrown[k] = SubmitAndWait(*g, StrCat("t", k), 1000 * k); });
    }
    ASSERT_TRUE(machine.WaitStarted(4));  // reduced on every rank; the sums are out
    g->StopAll();                         // the owners' order: Stop, then the machine
    for (auto& t : threads) t.join();
    for (const auto& by_rank : thrown) {
      for (const std::string& e : by_rank) {
        EXPECT_NE(e.find("the group shut down"), std::string::npos) << e;
      }
    }
    ExpectNoWorkLeft();
    machine.Hold(false);  // sums that come after Stop change nothing
    machine.Stop();
    g.reset();
    EXPECT_TRUE(g == nullptr);
  }
  EXPECT_EQ(cuda_nccl_stub::LiveAllocations(), allocations);
}

TEST(LocalNcclCheckTest, RefusesHostMemoryASecondGpuAndAMachineWithoutGpus) {
  FakeMachine machine(1);
  Group g(1, machine, 1, Backstop());
  std::vector<float> host(4);
  DeviceTensor t;
  t.name = "h";
  t.input = t.output = host.data();
  t.count = host.size();
  try {
    g.rank(0).Submit(t);
    ADD_FAILURE() << "host memory accepted";
  } catch (const FerryError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("is not CUDA device memory"), std::string::npos);
  }
  cuda_nccl_stub::SetDeviceCount(2);
  DeviceBuffer first(16);
  cudaSetDevice(1);
  DeviceBuffer second(16);
  cudaSetDevice(0);
  t.input = t.output = first.get();
  g.rank(0).Wait(g.Submit(0, t));
  t.input = t.output = second.get();
  try {
    g.rank(0).Submit(t);
    ADD_FAILURE() << "a second GPU accepted";
  } catch (const FerryError& e) {
    EXPECT_NE(std::string(e.what()).find("one GPU per local rank"), std::string::npos);
  }
  cuda_nccl_stub::SetDeviceCount(0);
  try {
    g.rank(0).Submit(t);
    ADD_FAILURE() << "no GPU, accepted";
  } catch (const FerryError& e) {
    EXPECT_NE(std::string(e.what()).find("no usable GPU here"), std::string::npos);
  }
  cuda_nccl_stub::SetDeviceCount(1);
}

}  // namespace
}  // namespace ferry
