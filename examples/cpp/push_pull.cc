// The README's C++ example as a program: one tensor push_pulled (averaged) over every rank
// of the job, then checked. It talks to the job through the Collective interface
// (worker/collective.h), so it runs unchanged as one process per worker
// (FERRY_LOCAL_SIZE=1) or as a local group of processes per machine:
//
//   scripts/local-cluster -s 1 -w 2 -- build/bin/ferry-example-push-pull
//   (or per machine: scripts/ferry-launch --local-size 2 build/bin/ferry-example-push-pull)
//
// Rank r contributes (r + 1 + i) x size() to element i, so the average is exactly
// size() x (size() + 1) / 2 + size() x i: the program exits 1 on any other value, 0 after
// printing "OK rank=R size=S".

#include <cstdio>
#include <memory>
#include <vector>

#include "common/util/error.h"
#include "worker/local/local_group.h"

int main() try {
  std::unique_ptr<ferry::Collective> ferry =
      ferry::LocalGroup::Create(ferry::Config::FromEnvironment(ferry::ProcessEnvironment()));
  const int n = 100000, size = ferry->size();
  std::vector<float> grad(n);
  for (int i = 0; i < n; ++i) grad[i] = static_cast<float>((ferry->rank() + 1 + i) * size);

  ferry->DeclareTensor("conv1.weight", ferry::DataType::kFloat32, {n});  // forward order
  ferry::Handle h = ferry->PushPullAsync("conv1.weight", grad.data(), grad.data(),
                                         ferry::DataType::kFloat32, n, /*average=*/true);
  ferry->Wait(h);  // grad now holds the average over all ranks

  for (int i = 0; i < n; ++i) {
    const float expected = static_cast<float>(size * (size + 1) / 2 + size * i);
    if (grad[i] != expected) {
      std::fprintf(stderr, "WRONG element %d: %g, expected %g\n", i, grad[i], expected);
      return 1;
    }
  }
  std::printf("OK rank=%d size=%d\n", ferry->rank(), size);
  ferry->Shutdown();
  return 0;
} catch (const ferry::FerryError& e) {
  std::fprintf(stderr, "ferry: %s\n", e.what());
  return 1;
}
