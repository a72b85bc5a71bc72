#include "server/gpu/gpu_summer.h"

#include <utility>

namespace ferry {

Buffer GpuSummer::FinishAndWait(uint64_t key) {
  Buffer result;
  Finish(key, [&result](Buffer sum) { result = std::move(sum); });
  Drain();
  return result;
}

}  // namespace ferry
