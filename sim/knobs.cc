#include "sim/knobs.h"

namespace ferry::sim {

const std::vector<Knob>& Knobs() {
  static const std::vector<Knob> knobs = {
      // How a worker cuts and paces its tensors: the worker's own code runs.
      {"FERRY_SCHEDULING_POLICY", KnobUse::kModelled, "the worker's Policy classes"},
      {"FERRY_PARTITION_BYTES", KnobUse::kModelled, "SplitTensor and Placement"},
      {"FERRY_PARTITION_MS", KnobUse::kModelled,
       "at the third boundary, from the rates the workers' estimators measured"},
      {"FERRY_SCHEDULING_CREDIT", KnobUse::kModelled, "SchedulingCore's credit"},
      {"FERRY_SCHEDULING_CREDIT_BYTES", KnobUse::kModelled, "SchedulingCore's credit"},
      {"FERRY_WINDOW", KnobUse::kModelled, "the WindowEstimator, fed by simulated acks"},
      {"FERRY_WINDOW_GAIN", KnobUse::kModelled, "the WindowEstimator"},
      {"FERRY_WINDOW_MIN_BYTES", KnobUse::kModelled, "the WindowEstimator"},
      {"FERRY_WINDOW_MAX_BYTES", KnobUse::kModelled, "the WindowEstimator"},
      {"FERRY_FUSION_BYTES", KnobUse::kModelled, "packs per server, as DensePushPull"},
      {"FERRY_PARTITION_PER_LINK", KnobUse::kModelled,
       "data-parallel jobs: keys sized as without it (the mean rate), each "
       "worker's pieces by server from LinkSizing on its own LinkRates, summed by range "
       "(PieceSizing, SimServer's grid rounds); a pipeline's partitions keep one cut"},
      {"FERRY_REPARTITION_THRESHOLD", KnobUse::kModelled,
       "LinkSizing::Moved, and the per-layer decision's rate and backward span"},
      {"FERRY_DECOMPOSE", KnobUse::kModelled,
       "per-layer: each worker's pieces by layer from DecomposeLayers on its own LayerTimes "
       "and rate (PieceSizing); data-parallel jobs only"},
      {"FERRY_P3_SLICE_BYTES", KnobUse::kModelled, "p3's partition size"},
      {"FERRY_BUCKET_BYTES", KnobUse::kModelled, "fifo-bucket's policy"},
      {"FERRY_BUCKET_TIMEOUT_MS", KnobUse::kModelled, "fifo-bucket's timer"},
      {"FERRY_COMPRESSION", KnobUse::kModelled,
       "compressed bytes on the wire, and each codec's measured time on workers and servers "
       "(CodecRatesOf)"},
      {"FERRY_COMPRESSION_MIN_BYTES", KnobUse::kModelled, "layers under it travel raw"},
      // The transport.
      {"FERRY_FRAME_BYTES", KnobUse::kModelled,
       "frames: each its own message, acknowledged and summed on its own"},
      {"FERRY_TRANSPORT_WATERMARK_BYTES", KnobUse::kModelled,
       "the priority queue per destination (Fabric)"},
      {"FERRY_CONTROL_LANE", KnobUse::kModelled, "acknowledgements on a connection of their own"},
      {"FERRY_SHM", KnobUse::kModelled,
       "same-host pushes cost one copy and sums none; off: loopback TCP"},
      {"FERRY_TCP_NOTSENT_LOWAT", KnobUse::kNoEffect,
       "the model releases a message when it left the sender, as a small lowat does"},
      {"FERRY_SHM_BYTES", KnobUse::kNoEffect, "the model's lanes never run out of slots"},
      {"FERRY_MAX_MESSAGE_BYTES", KnobUse::kNoEffect, "a limit, not a cost"},
      // Servers.
      {"FERRY_SERVER_ENGINE_THREADS", KnobUse::kModelled, "engines, each one push at a time"},
      {"FERRY_SERVER_SPLIT_BYTES", KnobUse::kNoEffect,
       "the server's CPU is one summation rate per engine (--sum-gbps)"},
      {"FERRY_SERVER_INLINE_BYTES", KnobUse::kNoEffect,
       "the server's CPU is one summation rate per engine (--sum-gbps)"},
      {"FERRY_BACKUP_WORKERS", KnobUse::kModelled,
       "the global set's raw rounds close once all but b workers pushed; late pushes cross "
       "the links, are dropped and answered; the lag invariant (BackupRounds); a late worker "
       "sits steps out (--catch-up)"},
      {"FERRY_DETERMINISTIC", KnobUse::kNoEffect,
       "sums in arrival order; rank order waits a little longer, not modelled"},
      {"FERRY_NODE_KIND", KnobUse::kNoEffect, "--colocate and --cpu-servers say the kinds"},
      {"FERRY_ENABLE_ASYNC", KnobUse::kRefused, "asynchronous training is not modelled"},
      {"FERRY_SERVER_DEVICE", KnobUse::kRefused,
       "GPU summation is not modelled: give its rate with --sum-gbps"},
      {"FERRY_SERVER_GPU_STREAMS", KnobUse::kRefused,
       "GPU summation is not modelled: give its rate with --sum-gbps"},
      // Local groups.
      {"FERRY_LOCAL_SIZE", KnobUse::kRefused,
       "local groups are not modelled: count one worker per machine"},
      {"FERRY_LOCAL_RANK", KnobUse::kRefused, "local groups are not modelled"},
      {"FERRY_LOCAL_SOCKET", KnobUse::kRefused, "local groups are not modelled"},
      {"FERRY_DEVICE_API", KnobUse::kNoEffect,
       "the model's workers hand over host memory; device copies are not modelled"},
      // Autotune: ferry-sim --tune searches instead.
      {"FERRY_AUTOTUNE", KnobUse::kRefused, "the online search is not modelled; use --tune"},
      {"FERRY_AUTOTUNE_STEPS", KnobUse::kRefused, "the online search is not modelled; use --tune"},
      {"FERRY_AUTOTUNE_PARTITION_BYTES", KnobUse::kRefused,
       "the online search is not modelled; use --tune"},
      {"FERRY_AUTOTUNE_CREDITS", KnobUse::kRefused, "the online search is not modelled; use --tune"},
      {"FERRY_AUTOTUNE_WINDOW_GAINS", KnobUse::kRefused,
       "the online search is not modelled; use --tune"},
      {"FERRY_AUTOTUNE_FRAME_BYTES", KnobUse::kRefused,
       "the online search is not modelled; use --tune"},
      // Faults and security.
      {"FERRY_TEST_DROP_PERCENT", KnobUse::kRefused, "losses and resends are not modelled"},
      {"FERRY_TEST_DELAY_MS", KnobUse::kRefused, "use --latency-us"},
      {"FERRY_SECRET", KnobUse::kRefused, "CURVE encryption's CPU cost is not modelled"},
      {"FERRY_SECRET_FILE", KnobUse::kRefused, "CURVE encryption's CPU cost is not modelled"},
      // Deadlines, logs, addresses: nothing the model times.
      {"FERRY_RESEND_TIMEOUT_MS", KnobUse::kNoEffect, "nothing is lost in the model"},
      {"FERRY_LINK_TIMEOUT_MS", KnobUse::kNoEffect, "nothing is lost in the model"},
      {"FERRY_CONNECT_TIMEOUT_MS", KnobUse::kNoEffect, "a deadline"},
      {"FERRY_HANDSHAKE_TIMEOUT_MS", KnobUse::kNoEffect, "a deadline"},
      {"FERRY_HEARTBEAT_INTERVAL_MS", KnobUse::kNoEffect, "heartbeats are a few bytes a second"},
      {"FERRY_HEARTBEAT_TIMEOUT_MS", KnobUse::kNoEffect, "a deadline"},
      {"FERRY_SCHEDULER_TIMEOUT_MS", KnobUse::kNoEffect, "a deadline"},
      {"FERRY_SCHEDULERS", KnobUse::kNoEffect, "the data plane never waits for a scheduler"},
      {"FERRY_OP_TIMEOUT_MS", KnobUse::kNoEffect, "a deadline"},
      {"FERRY_JOIN_TIMEOUT_MS", KnobUse::kNoEffect, "a deadline"},
      {"FERRY_STALL_WARNING_MS", KnobUse::kNoEffect, "a deadline"},
      {"FERRY_STALL_SHUTDOWN_MS", KnobUse::kNoEffect, "a deadline"},
      // Elastic training: the model has no failures; a fixed membership is timed alike.
      {"FERRY_ELASTIC", KnobUse::kNoEffect, "no node fails in the model"},
      {"FERRY_SPARE", KnobUse::kNoEffect, "no node fails in the model"},
      {"FERRY_MIN_WORKERS", KnobUse::kNoEffect, "no node fails in the model"},
      {"FERRY_MIN_WORKERS_TIMEOUT_MS", KnobUse::kNoEffect, "a deadline"},
      {"FERRY_MAX_WORKERS", KnobUse::kNoEffect, "no worker joins in the model"},
      {"FERRY_BIND_ADDR", KnobUse::kNoEffect, "an address"},
      {"FERRY_LOG_LEVEL", KnobUse::kNoEffect, "logs"},
      {"FERRY_STATS_FILE", KnobUse::kNoEffect, "a file at exit"},
      {"FERRY_TRACE_DIR", KnobUse::kNoEffect, "a file written as it goes"},
      {"FERRY_METRICS_PORT", KnobUse::kNoEffect, "observation (heartbeats carry the counters)"},
      {"FERRY_METRICS_BIND", KnobUse::kNoEffect, "an address"},
      {"FERRY_METRICS_LINGER_MS", KnobUse::kNoEffect, "after the job"},
  };
  return knobs;
}

const Knob* FindKnob(const std::string& name) {
  for (const Knob& k : Knobs()) {
    if (name == k.name) return &k;
  }
  return nullptr;
}

bool PolicyModelled(SchedulingPolicy policy) {
  switch (policy) {
    case SchedulingPolicy::kFifo:
    case SchedulingPolicy::kPriority:
    case SchedulingPolicy::kCredit:
    case SchedulingPolicy::kP3:
    case SchedulingPolicy::kFifoBucket:
    case SchedulingPolicy::kMercury:
    case SchedulingPolicy::kUsbyte:
    case SchedulingPolicy::kProphet:
    case SchedulingPolicy::kTrirace:
      return true;
  }
  return false;
}

}  // namespace ferry::sim
