#include "server/server_counters.h"

#include "common/metrics/series.h"
#include "common/util/strings.h"

namespace ferry {

const char* RefusalName(Refusal r) {
  static const char* const kNames[] = {"mismatch", "bad_message", "not_a_worker", "wrong_connection",
                                       "not_yet_in_cluster", "retired", "mode_mismatch"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(Refusal::kCount));
  return kNames[static_cast<int>(r)];
}

ServerCounters::ServerCounters() {
  for (int r = 0; r < static_cast<int>(Refusal::kCount); ++r) {
    const char* reason = RefusalName(static_cast<Refusal>(r));
    refused[r] = &registry.Register(StrCat("refused.", reason), Refused(reason));
  }
}

SeriesDeclaration ServerCounters::Refused(const char* reason) {
  const metrics::Series& s = metrics::RefusedMessages();
  return SeriesDeclaration{s.name, s.help, "reason", reason};
}

}  // namespace ferry
