// ferry-local-device-test-worker: one process of a local group that push_pulls CUDA device
// tensors (LocalGroup::PushPullDevice, worker/local/local_nccl.h), for
// tests/integration/local_device_test.cc. Built only with NCCL (FERRY_HAVE_NCCL), real
// or the stub's (FERRY_NCCL_STUB=ON: "GPUs" of host memory, tests/stubs/cuda_nccl).
//
// On GPU FERRY_LOCAL_RANK % (visible GPUs): --tensors float32 tensors of 1 .. --max_elems
// elements and one int32 tensor, --rounds rounds each, every tensor on its own thread,
// started in an order that differs between ranks (odd ranks reverse it: the root's steps
// must put the NCCL rounds in one order, and machines must not wait on each other's
// order); the odd float tensors out of place and averaged. Every
// element is checked exactly against the sum (or average) over every rank. Then
// "OK rounds=N rank=R size=S local=L/LS gpu=G".
// Exit codes: 0 as expected, 1 a Ferry error, 3 a wrong value, 4 a CUDA error.

#include <cuda_runtime_api.h>
#include <gflags/gflags.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "common/config/config.h"
#include "common/util/error.h"
#include "worker/local/local_group.h"

DEFINE_int32(tensors, 4, "float tensors");
DEFINE_int32(max_elems, 1 << 20, "elements of the largest tensor");
DEFINE_int32(rounds, 3, "rounds");

namespace ferry {
namespace {

constexpr int kExitWrong = 3, kExitCuda = 4;

struct CudaError {
  std::string what;
};

void Check(cudaError_t r, const char* call) {
  if (r != cudaSuccess) throw CudaError{StrCat(call, ": ", cudaGetErrorString(r))};
}

template <typename T>
T* DeviceAlloc(uint64_t n) {
  void* p = nullptr;
  Check(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc");
  return static_cast<T*>(p);
}

float Value(int rank, int round, int tensor, uint64_t i) {
  return static_cast<float>((i * 3 + tensor * 5 + rank * 7 + round * 11) % 16 + 1);
}

uint64_t Elems(int t) {
  if (t == 0) return 1;
  return std::max<uint64_t>(1, static_cast<uint64_t>(FLAGS_max_elems) >> (t - 1));
}

// One float tensor's rounds; returns "" or what was wrong.
std::string FloatTensor(Collective& g, int gpu, int t) {
  Check(cudaSetDevice(gpu), "cudaSetDevice");  // the current GPU is per thread
  const uint64_t n = Elems(t);
  const bool average = t % 2 == 1, in_place = !average;
  float* in = DeviceAlloc<float>(n);
  float* out = DeviceAlloc<float>(n);
  std::vector<float> host(n);
  std::string wrong;
  for (int round = 0; round < FLAGS_rounds && wrong.empty(); ++round) {
    for (uint64_t i = 0; i < n; ++i) host[i] = Value(g.rank(), round, t, i);
    Check(cudaMemcpy(in, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
    float* result = in_place ? in : out;
    g.PushPullDevice("f" + std::to_string(t), in, result, DataType::kFloat32, n, average);
    Check(cudaMemcpy(host.data(), result, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
    for (uint64_t i = 0; i < n; ++i) {
      float want = 0;
      for (int r = 0; r < g.size(); ++r) want += Value(r, round, t, i);
      if (average) want /= static_cast<float>(g.size());
      if (host[i] != want) {
        wrong = StrCat("WRONG tensor ", t, " round ", round, " element ", i, ": ", host[i],
                       ", expected ", want);
        break;
      }
    }
  }
  cudaFree(in);
  cudaFree(out);
  return wrong;
}

std::string IntTensor(Collective& g, int gpu) {
  Check(cudaSetDevice(gpu), "cudaSetDevice");
  const uint64_t n = 1000;
  int32_t* d = DeviceAlloc<int32_t>(n);
  std::vector<int32_t> host(n);
  std::string wrong;
  for (int round = 0; round < FLAGS_rounds && wrong.empty(); ++round) {
    for (uint64_t i = 0; i < n; ++i) host[i] = g.rank() * 1000 + static_cast<int32_t>(i) + round;
    Check(cudaMemcpy(d, host.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice), "cudaMemcpy");
    g.PushPullDevice("ints", d, d, DataType::kInt32, n, false);
    Check(cudaMemcpy(host.data(), d, n * sizeof(int32_t), cudaMemcpyDeviceToHost), "cudaMemcpy");
    for (uint64_t i = 0; i < n; ++i) {
      int64_t want = 0;
      for (int r = 0; r < g.size(); ++r) want += r * 1000 + static_cast<int64_t>(i) + round;
      if (host[i] != want) {
        wrong =
            StrCat("WRONG ints round ", round, " element ", i, ": ", host[i], ", expected ", want);
        break;
      }
    }
  }
  cudaFree(d);
  return wrong;
}

int Main() {
  Config config = Config::FromEnvironment(ProcessEnvironment());
  int gpus = 0;
  Check(cudaGetDeviceCount(&gpus), "cudaGetDeviceCount");
  const int gpu = config.local.size > 1 ? config.local.rank % gpus : 0;
  Check(cudaSetDevice(gpu), "cudaSetDevice");
  std::unique_ptr<Collective> g = LocalGroup::Create(config);
  std::printf("rank %d of %d, local rank %d of %d, GPU %d of %d, pid %d\n", g->rank(), g->size(),
              g->local_rank(), g->local_size(), gpu, gpus, getpid());
  std::fflush(stdout);
  // Declared up front in one order (the ids every worker must agree on), then every
  // tensor on its own thread; odd ranks (local ranks of a machine, and machines of one
  // rank each) start them in the opposite order.
  const int n = FLAGS_tensors + 1;
  for (int t = 0; t < FLAGS_tensors; ++t) {
    g->DeclareTensor("f" + std::to_string(t), DataType::kFloat32,
                     {static_cast<int64_t>(Elems(t))});
  }
  g->DeclareTensor("ints", DataType::kInt32, {1000});
  std::vector<std::string> results(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int k = 0; k < n; ++k) {
    const int t = g->rank() % 2 == 0 ? k : n - 1 - k;
    threads.emplace_back([&, t] {
      try {
        results[t] = t == FLAGS_tensors ? IntTensor(*g, gpu) : FloatTensor(*g, gpu, t);
      } catch (const FerryError& e) {
        errors[t] = StrCat("FERRY ERROR (", ErrorCodeName(e.code()), "): ", e.what());
      } catch (const CudaError& e) {
        errors[t] = StrCat("CUDA ERROR: ", e.what);
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& th : threads) th.join();
  int code = 0;
  for (int t = 0; t < n; ++t) {
    if (!errors[t].empty()) {
      std::printf("%s\n", errors[t].c_str());
      code = errors[t].rfind("CUDA", 0) == 0 ? kExitCuda : 1;
    } else if (!results[t].empty()) {
      std::printf("%s\n", results[t].c_str());
      code = kExitWrong;
    }
  }
  std::fflush(stdout);
  if (code != 0) return code;
  g->Shutdown();
  std::printf("OK rounds=%d rank=%d size=%d local=%d/%d gpu=%d\n", FLAGS_rounds, g->rank(),
              g->size(), g->local_rank(), g->local_size(), gpu);
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
  } catch (const ferry::CudaError& e) {
    std::printf("CUDA ERROR: %s\n", e.what.c_str());
    std::fflush(stdout);
    return ferry::kExitCuda;
  }
}
