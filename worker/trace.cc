#include "worker/trace.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "common/util/clock.h"
#include "common/util/error.h"
#include "common/util/json_quote.h"

namespace ferry {

Trace::Trace(const std::string& dir, int rank)
    : path_(StrCat(dir, "/ferry-worker-", rank, ".json")), rank_(rank), origin_us_(NowUs()) {
  std::error_code ec;  // an output folder: made with its parents, as users expect
  std::filesystem::create_directories(dir, ec);
  FERRY_ENFORCE(!ec, ErrorCode::kInvalidConfig, "invalid configuration: FERRY_TRACE_DIR='", dir,
                "': cannot create it as a directory: ", ec.message());
  out_.open(path_, std::ios::out | std::ios::trunc);
  FERRY_ENFORCE(out_.good(), ErrorCode::kInvalidConfig, "invalid configuration: FERRY_TRACE_DIR='",
                dir, "': cannot write ", path_, ": ", std::strerror(errno));
  out_ << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  MutexLock lock(mu_);
  Event(StrCat("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":", rank_,
               ",\"args\":{\"name\":", JsonQuote(StrCat("worker ", rank_)), "}}"));
}

Trace::~Trace() { Close(); }

void Trace::Event(const std::string& json) {
  if (closed_) return;
  if (!first_) out_ << ",\n";
  first_ = false;
  out_ << json;
}

void Trace::Partition(const PartitionTimes& p) {
  MutexLock lock(mu_);
  const uint64_t id = next_id_++;
  auto edge = [&](const char* ph, const std::string& name, int64_t at_us,
                  const std::string& args) REQUIRES(mu_) {
    Event(StrCat("{\"ph\":\"", ph, "\",\"cat\":\"partition\",\"id\":", id, ",\"name\":", name,
                 ",\"pid\":", rank_, ",\"tid\":", p.server, ",\"ts\":", at_us - origin_us_, args,
                 "}"));
  };
  auto stage = [&](const char* name, int64_t from_us, int64_t to_us) REQUIRES(mu_) {
    edge("b", JsonQuote(name), from_us, "");
    edge("e", JsonQuote(name), to_us, "");
  };
  const std::string name = JsonQuote(StrCat(p.tensor, "[", p.partition, "]"));
  edge("b", name, p.ready_us,
       StrCat(",\"args\":{\"key\":", p.key, ",\"server\":", p.server, ",\"bytes\":", p.bytes,
              ",\"priority\":", p.priority, ",\"round\":", p.round,
              ",\"fused\":", p.fused ? "true" : "false", "}"));
  stage("queue", p.ready_us, p.sent_us);
  stage("push", p.sent_us, p.acked_us ? p.acked_us : p.result_us);
  if (p.acked_us) stage("server", p.acked_us, p.result_us);
  stage("return", p.result_us, p.done_us);
  edge("e", name, p.done_us, "");
}

void Trace::Instant(const std::string& name, int64_t at_us, const std::string& args_json) {
  MutexLock lock(mu_);
  Event(StrCat("{\"ph\":\"i\",\"s\":\"p\",\"name\":", JsonQuote(name), ",\"pid\":", rank_,
               ",\"tid\":0,\"ts\":", at_us - origin_us_, ",\"args\":", args_json, "}"));
}

void Trace::Compute(const std::string& tensor, bool backward, int64_t begin_us, int64_t end_us) {
  MutexLock lock(mu_);
  if (!compute_named_) {
    compute_named_ = true;
    Event(StrCat("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":", rank_,
                 ",\"tid\":", kComputeTid, ",\"args\":{\"name\":\"compute\"}}"));
  }
  const std::string name = JsonQuote(tensor);
  Event(StrCat("{\"ph\":\"X\",\"cat\":\"compute\",\"name\":", name, ",\"pid\":", rank_,
               ",\"tid\":", kComputeTid, ",\"ts\":", begin_us - origin_us_,
               ",\"dur\":", std::max<int64_t>(0, end_us - begin_us), ",\"args\":{\"phase\":\"",
               backward ? "backward" : "forward", "\",\"tensor\":", name, "}}"));
}

void Trace::Close() {
  MutexLock lock(mu_);
  if (closed_) return;
  closed_ = true;
  out_ << "\n]}\n";
  out_.close();
}

}  // namespace ferry
