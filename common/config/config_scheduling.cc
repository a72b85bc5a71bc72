// Config's scheduling settings (config_scheduling.h).

#include "common/config/config_scheduling.h"

#include <algorithm>
#include <string>

#include "common/util/error.h"
#include "common/util/strings.h"

namespace ferry::config_internal {
namespace {

// FERRY_WINDOW and its bounds, and the autotune lists over them.
void ReadWindow(const EnvReader& r, Config* c) {
  Config::Scheduling& s = c->scheduling;
  const std::string window = r.Str("FERRY_WINDOW", nullptr, s.window_bdp ? "bdp" : "fixed");
  if (window != "bdp" && window != "fixed") ThrowInvalidConfig("FERRY_WINDOW", window, "expected bdp or fixed");
  s.window_bdp = window == "bdp";
  s.window_gain = r.Double("FERRY_WINDOW_GAIN", s.window_gain, 0.25, 64.0);
  s.window_min_bytes = r.Int("FERRY_WINDOW_MIN_BYTES", nullptr, s.window_min_bytes, 4096, 1LL << 40);
  s.window_max_bytes = r.Int("FERRY_WINDOW_MAX_BYTES", nullptr, s.window_max_bytes, 4096, 1LL << 40);
  if (s.window_max_bytes < s.window_min_bytes) {
    ThrowInvalidConfig("FERRY_WINDOW_MAX_BYTES", std::to_string(s.window_max_bytes),
            StrCat("is below FERRY_WINDOW_MIN_BYTES (", s.window_min_bytes, ")"));
  }
  s.autotune_window_gains = r.DoubleList("FERRY_AUTOTUNE_WINDOW_GAINS", 0.25, 64.0);
  if (!s.autotune_window_gains.empty() && !s.autotune_credits.empty()) {
    ThrowInvalidConfig("FERRY_AUTOTUNE_WINDOW_GAINS", r.Str("FERRY_AUTOTUNE_WINDOW_GAINS", nullptr, ""),
            "cannot be searched with FERRY_AUTOTUNE_CREDITS (fixed credits): set one of them");
  }
  s.autotune_frame_bytes = r.IntList("FERRY_AUTOTUNE_FRAME_BYTES", 0, 1LL << 30);
  for (int64_t f : s.autotune_frame_bytes) {
    if (!ValidFrameBytes(f)) {
      ThrowInvalidConfig("FERRY_AUTOTUNE_FRAME_BYTES", std::to_string(f),
              "expected frame sizes that are 0 or multiples of 8 from 4096");
    }
  }
}

// What `trirace` gives the transport over the other policies: frames, a watermark and a
// small kernel send queue, each unless set (the kernel's unsent share small too, so the
// order is the order on the wire; measured: docs/benchmarks.md, "Frames, streaming
// aggregation and mercury"), so that a point-to-point send overtakes a gradient at a
// frame's granularity. Zero where the transport already has one.
Config::Scheduling::SendsTransport TriraceTransport(const EnvReader& r, const Config& c) {
  Config::Scheduling::SendsTransport t;
  std::string unused;
  if (!r.Get("FERRY_FRAME_BYTES", nullptr, &unused)) t.frame_bytes = 262144;
  const int64_t frame = t.frame_bytes > 0 ? t.frame_bytes : c.transport.frame_bytes;
  if (!r.Get("FERRY_TRANSPORT_WATERMARK_BYTES", nullptr, &unused)) {
    t.watermark_bytes = 2 * std::max<int64_t>(frame, 65536);
  }
  if (!r.Get("FERRY_TCP_NOTSENT_LOWAT", nullptr, &unused)) t.tcp_notsent_lowat = 131072;
  return t;
}

// FERRY_PARTITION_PER_LINK and FERRY_REPARTITION_THRESHOLD. Set to 1 it needs partitions
// sized by time (FERRY_PARTITION_MS > 0), which it refines per link.
void ReadPerLink(const EnvReader& r, Config* c) {
  Config::Scheduling& s = c->scheduling;
  s.partition_per_link = r.Bool("FERRY_PARTITION_PER_LINK", nullptr, s.partition_per_link);
  s.repartition_threshold =
      r.Double("FERRY_REPARTITION_THRESHOLD", s.repartition_threshold, 0.01, 10.0);
  const std::string decompose = r.Str("FERRY_DECOMPOSE", nullptr, "off");
  if (decompose != "off" && decompose != "per-layer") {
    ThrowInvalidConfig("FERRY_DECOMPOSE", decompose, "expected off or per-layer");
  }
  s.decompose_per_layer = decompose == "per-layer";
  if (s.decompose_per_layer && s.autotune) {
    ThrowInvalidConfig("FERRY_DECOMPOSE", decompose,
                       "not with FERRY_AUTOTUNE=1, which searches the frame size itself; unset one");
  }
  if (s.partition_per_link && s.partition_ms <= 0) {
    ThrowInvalidConfig("FERRY_PARTITION_PER_LINK", "1",
                       "sizes pieces by time on each link and needs FERRY_PARTITION_MS > 0 "
                       "(it is 0, or unset beside FERRY_PARTITION_BYTES or "
                       "FERRY_AUTOTUNE_PARTITION_BYTES): set FERRY_PARTITION_MS, e.g. 2");
  }
}

}  // namespace

// Whether `bytes` may be a frame size: 0 (whole partitions) or a multiple of 8 (whole
// elements of every dtype) of at least 4096.
bool ValidFrameBytes(int64_t bytes) { return bytes == 0 || (bytes >= 4096 && bytes % 8 == 0); }

// FERRY_SCHEDULING_POLICY and its companions (the block at the end of Config's
// scheduling settings). REQUIRES: partition_bytes and max_message_bytes read.
void ReadScheduling(const EnvReader& r, Config* c) {
  const std::string policy =
      r.Str("FERRY_SCHEDULING_POLICY", nullptr, SchedulingPolicyName(c->scheduling.policy));
  if (!ParseSchedulingPolicy(policy, &c->scheduling.policy)) {
    ThrowInvalidConfig("FERRY_SCHEDULING_POLICY", policy, StrCat("expected ", kSchedulingPolicyNames));
  }
  c->scheduling.fusion_bytes =
      r.Int("FERRY_FUSION_BYTES", nullptr, c->scheduling.fusion_bytes, 0, 1LL << 30);
  c->scheduling.p3_slice_bytes =
      r.Int("FERRY_P3_SLICE_BYTES", nullptr, c->scheduling.p3_slice_bytes, 1024, 1LL << 30);
  c->scheduling.bucket_bytes =
      r.Int("FERRY_BUCKET_BYTES", nullptr, c->scheduling.bucket_bytes, 1024, 1LL << 32);
  c->scheduling.bucket_timeout_ms =
      r.Int("FERRY_BUCKET_TIMEOUT_MS", nullptr, c->scheduling.bucket_timeout_ms, 0, 60000);
  c->scheduling.autotune = r.Bool("FERRY_AUTOTUNE", nullptr, false);
  c->scheduling.autotune_steps = static_cast<int>(
      r.Int("FERRY_AUTOTUNE_STEPS", nullptr, c->scheduling.autotune_steps, 2, 1000));
  c->scheduling.autotune_partition_bytes =
      r.IntList("FERRY_AUTOTUNE_PARTITION_BYTES", 1024, 1LL << 30);
  c->scheduling.autotune_credits = r.IntList("FERRY_AUTOTUNE_CREDITS", 1, 1 << 20);
  ReadWindow(r, c);
  // Unset, FERRY_PARTITION_MS is the default's, which stands aside for a partition size
  // the user chose (FERRY_PARTITION_BYTES) or listed for the search
  // (FERRY_AUTOTUNE_PARTITION_BYTES). With FERRY_AUTOTUNE=1 otherwise, the search is
  // centred on the time-sized partition.
  c->scheduling.partition_ms_set = r.Has("FERRY_PARTITION_MS", nullptr);
  const bool sizes_listed =
      c->scheduling.autotune && !c->scheduling.autotune_partition_bytes.empty();
  const bool size_chosen =
      r.Has("FERRY_PARTITION_BYTES", "BYTEPS_PARTITION_BYTES") || sizes_listed;
  const double default_ms = size_chosen ? 0.0 : Config::Scheduling::kDefaultPartitionMs;
  c->scheduling.partition_ms = r.Double("FERRY_PARTITION_MS", default_ms, 0.0, 60000.0);
  if (c->scheduling.partition_ms > 0 && sizes_listed) {
    ThrowInvalidConfig("FERRY_PARTITION_MS", r.Str("FERRY_PARTITION_MS", nullptr, ""),
            "cannot be used with FERRY_AUTOTUNE_PARTITION_BYTES, which lists the partition "
            "sizes to search: set one of them");
  }
  ReadPerLink(r, c);
  // Every message a worker may send must pass the servers' size limit.
  std::vector<std::pair<const char*, int64_t>> sizes = {
      {"FERRY_P3_SLICE_BYTES",
       c->scheduling.policy == SchedulingPolicy::kP3 ? c->scheduling.p3_slice_bytes : 0},
      {"FERRY_FUSION_BYTES", CreditLike(c->scheduling.policy) ||
                                     c->scheduling.policy == SchedulingPolicy::kMercury ||
                                     c->scheduling.policy == SchedulingPolicy::kUsbyte ||
                                     c->scheduling.policy == SchedulingPolicy::kProphet
                                 ? c->scheduling.fusion_bytes
                                 : 0},
      {"FERRY_BUCKET_BYTES",
       c->scheduling.policy == SchedulingPolicy::kFifoBucket ? c->scheduling.bucket_bytes : 0}};
  for (int64_t p : c->scheduling.autotune_partition_bytes) {
    sizes.emplace_back("FERRY_AUTOTUNE_PARTITION_BYTES", p);
  }
  for (int64_t f : c->scheduling.autotune_frame_bytes) sizes.emplace_back("FERRY_AUTOTUNE_FRAME_BYTES", f);
  for (const auto& [name, bytes] : sizes) {
    if (c->transport.max_message_bytes < bytes + 4096) {
      ThrowInvalidConfig("FERRY_MAX_MESSAGE_BYTES", std::to_string(c->transport.max_message_bytes),
              StrCat("must exceed ", name, " (", bytes, ") by 4096"));
    }
  }
}

// FERRY_SCHEDULING_POLICY=mercury and trirace schedule frames at the transport
// (TriraceTransport), and trirace turns on the control lane too (unless set). Unset, the
// default policy takes trirace's transport once sends are seen (Scheduling::
// trirace_on_sends). Other policies: nothing.
void ApplyTransportDefaults(const EnvReader& r, Config* c) {
  std::string unused;
  const bool policy_set = r.Get("FERRY_SCHEDULING_POLICY", nullptr, &unused) != nullptr;
  if (!policy_set && !c->server.async) {
    c->scheduling.trirace_on_sends = TriraceTransport(r, *c);
    return;
  }
  if (c->scheduling.policy != SchedulingPolicy::kMercury &&
      c->scheduling.policy != SchedulingPolicy::kTrirace) {
    return;
  }
  TriraceTransport(r, *c).ApplyTo(c->transport);
  // trirace: each frame's acknowledgement would otherwise wait behind the sums on the data
  // connection and hold the credit (the simulator: 19.1 s against 8.8 s per iteration at 64
  // workers, docs/simulation.md).
  if (c->scheduling.policy == SchedulingPolicy::kTrirace &&
      !r.Get("FERRY_CONTROL_LANE", nullptr, &unused)) {
    c->transport.control_lane = true;
  }
}

}  // namespace ferry::config_internal

namespace ferry {

void Config::Scheduling::SendsTransport::ApplyTo(Transport& t) const {
  if (frame_bytes > 0) t.frame_bytes = frame_bytes;
  if (watermark_bytes > 0) t.watermark_bytes = watermark_bytes;
  if (tcp_notsent_lowat > 0) t.tcp_notsent_lowat = tcp_notsent_lowat;
}

}  // namespace ferry
