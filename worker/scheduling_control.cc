#include "worker/scheduling_control.h"

#include <glog/logging.h>

#include <algorithm>
#include <vector>

#include "common/util/clock.h"
#include "common/util/status.h"
#include "common/util/strings.h"

namespace ferry {

SchedulingControl::SchedulingControl(WorkerContext& ctx, TensorCatalog& catalog,
                                     ProcessSets& sets, ScheduledQueue& queue,
                                     SumOverWorkers sum_over_workers)
    : ctx_(ctx), catalog_(catalog), sets_(sets), queue_(queue),
      sum_over_workers_(std::move(sum_over_workers)) {
  const Config::Scheduling& c = ctx_.config.scheduling;
  const int64_t partition = c.InitialPartitionBytes();
  const bool window = c.window_bdp && CreditLike(queue_.policy());
  const SchedulingChoice initial{partition, c.CreditBytesFor(partition),
                                 window ? c.window_gain : 0.0, ctx_.config.transport.frame_bytes};
  // The estimator samples under every policy (the exit log says what it measured); the
  // credit follows it only under `credit` with FERRY_WINDOW=bdp.
  queue_.UseWindow(WindowOptions{c.window_gain, static_cast<uint64_t>(c.window_min_bytes),
                                 static_cast<uint64_t>(c.window_max_bytes),
                                 static_cast<uint64_t>(initial.credit_bytes)});
  {
    MutexLock lock(ctx_.mu);
    Apply(initial, "configured", /*log=*/false);
  }
  MutexLock lock(step_mu_);
  const bool sizes = c.partition_ms > 0 && queue_.policy() != SchedulingPolicy::kP3;
  loopback_keeps_size_ =
      sizes && !c.partition_ms_set && ctx_.cluster.table().ServersOnLoopback();
  size_by_time_ = sizes && !loopback_keeps_size_;
  tune_after_sizing_ = c.autotune && size_by_time_;
  per_link_ = size_by_time_ && c.partition_per_link && !c.autotune &&
              ctx_.config.server.backup_workers == 0 && !ctx_.config.server.async;
  per_layer_ = c.decompose_per_layer;
  // Only where partitions are sized by the link: in that decision's push_pull, which every
  // worker makes at the same boundary (not under elastic training, where a worker that
  // joins counts its boundaries from its join).
  frames_on_sends_ = size_by_time_ && !ctx_.config.cluster.elastic ? c.trirace_on_sends.frame_bytes : 0;
  if (c.autotune && !tune_after_sizing_) {
    tuner_ = std::make_unique<Autotuner>(AutotuneGrid(initial), c.autotune_steps);
  }
}

std::vector<SchedulingChoice> SchedulingControl::AutotuneGrid(const SchedulingChoice& initial) const {
  const Config::Scheduling& c = ctx_.config.scheduling;
  const int64_t max_bytes = ctx_.config.transport.max_message_bytes - 4096;
  const bool credit = CreditLike(queue_.policy());
  // Under `credit` the search is over window gains when the window is on, unless
  // FERRY_AUTOTUNE_CREDITS asks for fixed credits (Config refuses both lists at once).
  const bool window = initial.window_gain > 0 && c.autotune_credits.empty();
  const std::vector<int64_t> credits =
      credit && !window ? c.autotune_credits : std::vector<int64_t>{c.credit};
  std::vector<SchedulingChoice> grid =
      Autotuner::Grid(initial.partition_bytes, c.credit, c.autotune_partition_bytes, credits,
                      1024, max_bytes);
  // Without credit the credit does not matter: each size keeps the configured one.
  for (auto& choice : grid) {
    if (!credit || window) choice.credit_bytes = c.CreditBytesFor(choice.partition_bytes);
    choice.window_gain = window ? initial.window_gain : 0.0;
    choice.frame_bytes = initial.frame_bytes;
  }
  std::vector<double> gains = c.autotune_window_gains;
  if (window && gains.empty()) gains = {c.window_gain / 2, c.window_gain, c.window_gain * 2};
  if (!window) gains.clear();
  std::vector<int64_t> frames = c.autotune_frame_bytes;
  const int64_t f = initial.frame_bytes;
  if (frames.empty() && f > 0) {
    frames = {std::max<int64_t>(4096, f / 2 / 8 * 8), f, std::min(max_bytes / 8 * 8, 2 * f)};
  }
  return Autotuner::Expand(grid, gains, frames);
}

SchedulingChoice SchedulingControl::current() const {
  MutexLock lock(ctx_.mu);
  return current_;
}

std::string SchedulingControl::DescribePlan() const {
  MutexLock lock(step_mu_);
  const Config::Scheduling& c = ctx_.config.scheduling;
  if (tuner_) {
    return StrCat("; autotune over ", tuner_->grid().size(), " candidates, ", c.autotune_steps,
                  " iterations each");
  }
  if (tune_after_sizing_) {
    return StrCat("; autotune from iteration ", kSizingStep, ", around the partition size the "
                  "link sends in FERRY_PARTITION_MS=", c.partition_ms, " ms, ", c.autotune_steps,
                  " iterations per candidate");
  }
  if (size_by_time_) {
    return StrCat("; partitions sized by the link at iteration ", kSizingStep,
                  " (FERRY_PARTITION_MS=", c.partition_ms, ")");
  }
  if (loopback_keeps_size_) {
    return "; partitions stay this size: every server is on loopback (FERRY_PARTITION_MS "
           "sizes them by a link's rate, and this path has none)";
  }
  return "";
}

void SchedulingControl::Set(int64_t partition_bytes, int64_t credit_bytes) {
  const int64_t max_partition = ctx_.config.transport.max_message_bytes - 4096;
  FERRY_ENFORCE(partition_bytes >= 1024 && partition_bytes <= max_partition,
                ErrorCode::kInvalidArgument, "SetScheduling: partition size ", partition_bytes,
                " bytes is outside 1024..", max_partition, " (FERRY_MAX_MESSAGE_BYTES - 4096)");
  FERRY_ENFORCE(credit_bytes >= 1, ErrorCode::kInvalidArgument, "SetScheduling: credit of ",
                credit_bytes, " bytes; it must be at least 1");
  MutexLock step_lock(step_mu_);
  size_by_time_ = false;
  per_link_ = per_layer_ = false;  // the program's sizes stand, for every link and layer
  link_sizing_.reset();
  {
    MutexLock lock(ctx_.mu);
    ctx_.link_frame_bytes.clear();
    ctx_.layer_frame_bytes.clear();
    ctx_.sequencer->WaitUntilIdleOrThrow("SetScheduling");
    // A credit set by the program is fixed (as FERRY_SCHEDULING_CREDIT is); frames stay.
    Apply(SchedulingChoice{partition_bytes, credit_bytes, 0.0, current_.frame_bytes},
          "SetScheduling");
  }
  if (tune_after_sizing_) StartAutotune(current(), "SetScheduling before the sizing boundary");
}

void SchedulingControl::StepBoundary() {
  MutexLock step_lock(step_mu_);
  Autotuner::Action action;
  bool size_now = false;
  {
    MutexLock lock(ctx_.mu);
    ctx_.ThrowIfFailed();
    const int64_t now = NowUs();
    const double ms = last_step_us_ > 0 ? (now - last_step_us_) / 1000.0 : -1.0;
    if (last_step_us_ > 0) ctx_.counters.iteration_us.Record(static_cast<uint64_t>(now - last_step_us_));
    steps_++;
    size_now = size_by_time_ && steps_ == kSizingStep;
    if (ctx_.trace) {
      ctx_.trace->Instant(StrCat("step ", steps_), now,
                          ms < 0 ? std::string("{}") : StrCat("{\"iteration_ms\":", ms, "}"));
    }
    if (tuner_) action = tuner_->OnStep(ms);
    if (action.kind == Autotuner::Action::kSwitch) {
      // Partitions change only with nothing in flight (with ferry.torch's CrossBarrier
      // this iteration's pushes may still be on their way: the switch waits for them).
      ctx_.sequencer->WaitUntilIdleOrThrow("StepBoundary");
      Apply(action.choice, StrCat("autotune candidate at iteration ", steps_));
    }
  }
  if (action.kind == Autotuner::Action::kDecide) FinishAutotune();
  if (size_now) {
    std::string why;
    const SchedulingChoice decided = DecideAtSizingStep(&why);
    if (tune_after_sizing_) {
      StartAutotune(decided, why);
    } else {
      ApplySizingStep(decided, why);
    }
    if (per_link_) DecidePieces("at the sizing boundary");
  } else if (link_sizing_) {
    bool moved;
    {
      MutexLock lock(ctx_.mu);
      moved = link_sizing_->Moved(pieces_, queue_.measured_rate_bytes_per_s(), ctx_.link_rates);
    }
    if (moved) {
      DecidePieces(StrCat("a rate moved by more than ", link_sizing_->threshold() * 100, "%"));
    }
  }
  if (per_layer_) MaybeDecideLayers();
  // After the decisions' push_pulls: the policy's iteration (usbyte's and prophet's profile)
  // ends here.
  queue_.Step();
  last_step_us_ = NowUs();  // after the decision's push_pull, which is no iteration's time
}

void SchedulingControl::FinishAutotune() {
  // Every worker sums every worker's scores, so every worker picks the same candidate.
  std::vector<double> summed = tuner_->scores();
  sum_over_workers_(summed);
  const size_t best = tuner_->Decide(summed);
  const SchedulingChoice choice = tuner_->grid()[best];
  std::string table;
  const double scored = static_cast<double>(ctx_.num_workers) * (tuner_->steps() - 1);
  for (size_t i = 0; i < summed.size(); ++i) {
    table += StrCat(i ? "; " : "", Describe(tuner_->grid()[i]), ": ", summed[i] / scored, " ms");
  }
  {
    MutexLock lock(ctx_.mu);
    ctx_.sequencer->WaitUntilIdleOrThrow("autotune");
    Apply(choice, "autotune chose it");
  }
  LOG(INFO) << "autotune: chose " << Describe(choice) << " (candidate " << best << " of "
            << summed.size() << ") after " << steps_ << " iterations; mean iteration per "
            << "candidate over all workers: " << table;
  tuner_.reset();
}

void SchedulingControl::StartAutotune(const SchedulingChoice& centre, const std::string& why) {
  tune_after_sizing_ = false;
  tuner_ = std::make_unique<Autotuner>(AutotuneGrid(centre),
                                       ctx_.config.scheduling.autotune_steps);
  LOG(INFO) << "autotune: searching " << tuner_->grid().size() << " candidates around "
            << Describe(centre) << " (" << why << ")";
  const Autotuner::Action first = tuner_->OnStep(-1.0);
  CHECK(first.kind == Autotuner::Action::kSwitch);
  MutexLock lock(ctx_.mu);
  ctx_.sequencer->WaitUntilIdleOrThrow("StepBoundary");
  Apply(first.choice, StrCat("autotune candidate at iteration ", steps_));
}

SchedulingChoice SchedulingControl::DecideAtSizingStep(std::string* why) {
  size_by_time_ = false;
  // Every worker sums every worker's rate, how many measured one and how many sent to
  // another worker, so every worker makes the same choice.
  std::vector<double> sums{queue_.measured_rate_bytes_per_s(), 0.0,
                           ctx_.counters.p2p_sends.value() > 0 ? 1.0 : 0.0};
  sums[1] = sums[0] > 0 ? 1.0 : 0.0;
  sum_over_workers_(sums);
  SchedulingChoice choice = current();
  const double mean = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
  mean_rate_ = mean;
  const double ms = ctx_.config.scheduling.partition_ms;
  const int64_t ceiling = choice.partition_bytes;
  choice.partition_bytes =
      PartitionBytesForRate(mean, ms, std::min(kMinTimedPartitionBytes, ceiling), ceiling);
  choice.credit_bytes = ctx_.config.scheduling.CreditBytesFor(choice.partition_bytes);
  *why = StrCat("FERRY_PARTITION_MS: ", static_cast<int64_t>(mean / 1e3), " KB/s per worker over ",
                sums[1], " workers x ", ms, " ms");
  if (frames_on_sends_ > 0 && sums[2] > 0 && choice.frame_bytes == 0) {
    choice.frame_bytes = frames_on_sends_;
    *why += StrCat("; point-to-point sends on ", sums[2], " workers: trirace's frames");
    trirace_.store(true, std::memory_order_relaxed);
  }
  frames_on_sends_ = 0;
  return choice;
}

void SchedulingControl::DecidePieces(const std::string& why) {
  const Config::Scheduling& c = ctx_.config.scheduling;
  if (!link_sizing_) {
    link_sizing_ =
        std::make_unique<LinkSizing>(c.partition_ms, kMinLinkPieceBytes, c.repartition_threshold);
  }
  MutexLock lock(ctx_.mu);
  ctx_.link_rates.Resize(std::max(ctx_.num_servers, ctx_.link_rates.servers()));
  pieces_ = link_sizing_->Decide(queue_.measured_rate_bytes_per_s(), ctx_.link_rates,
                                 current_.partition_bytes, mean_rate_);
  const std::vector<uint64_t> before = ctx_.link_frame_bytes;
  std::string sizes;
  for (uint64_t& piece : pieces_.bytes) {
    // A frame size set (FERRY_FRAME_BYTES, trirace's) stays the largest piece.
    if (current_.frame_bytes > 0) piece = std::min(piece, static_cast<uint64_t>(current_.frame_bytes));
    sizes += StrCat(sizes.empty() ? "" : ", ", piece);
  }
  ctx_.link_frame_bytes = pieces_.bytes;
  ctx_.link_decisions++;
  if (pieces_.bytes == before) return;  // decided alike: nothing to say
  LOG(INFO) << "scheduling (partitions sized per link, " << why << "): pieces by server "
            << sizes << " bytes of partitions of " << current_.partition_bytes << " bytes at "
            << static_cast<int64_t>(pieces_.worker_rate / 1e3) << " KB/s";
  if (ctx_.trace) ctx_.trace->Instant("pieces", NowUs(), StrCat("{\"by_server\":[", sizes, "]}"));
}

void SchedulingControl::MaybeDecideLayers() {
  if (!layer_sizing_) {
    layer_sizing_ = std::make_unique<LayerSizing>(ctx_.config.scheduling.repartition_threshold);
  }
  MutexLock lock(ctx_.mu);
  LayerSizing::Decision d;
  if (!layer_sizing_->Decide(ctx_.layer_times, queue_.measured_rate_bytes_per_s(),
                             static_cast<uint64_t>(current_.partition_bytes), &d)) {
    return;
  }
  ctx_.layer_decisions = layer_sizing_->decisions();
  if (d.pieces == ctx_.layer_frame_bytes) return;  // decided alike: nothing to say
  ctx_.layer_frame_bytes = std::move(d.pieces);
  LOG(INFO) << "scheduling (FERRY_DECOMPOSE=per-layer): " << ctx_.layer_frame_bytes.size()
            << " of " << d.layers << " layers cut in pieces at "
            << static_cast<int64_t>(d.rate / 1e3) << " KB/s over a backward span of "
            << static_cast<int64_t>(d.span_us / 1e3) << " ms; predicted end "
            << static_cast<int64_t>(d.predicted_end_us) << " us after the backward pass";
}

void SchedulingControl::ApplySizingStep(const SchedulingChoice& decided, const std::string& why) {
  MutexLock lock(ctx_.mu);
  if (decided == current_) {
    LOG(INFO) << "scheduling (" << why << "): partitions stay " << current_.partition_bytes
              << " bytes";
    return;
  }
  ctx_.sequencer->WaitUntilIdleOrThrow("StepBoundary");
  Apply(decided, why);
}

void SchedulingControl::Apply(const SchedulingChoice& choice, const std::string& why, bool log) {
  CHECK(!ctx_.sequencer || !ctx_.sequencer->AnyUnfinished())
      << "scheduling changed with an operation unfinished";
  const uint32_t gen = catalog_.SwitchPartitionBytes(static_cast<uint64_t>(choice.partition_bytes));
  sets_.SwitchPartitionBytes(static_cast<uint64_t>(choice.partition_bytes));
  current_ = choice;
  ctx_.frame_bytes = static_cast<uint64_t>(choice.frame_bytes);
  if (choice.window_gain > 0) {
    queue_.SetWindowGain(choice.window_gain);
  } else {
    queue_.SetCredit(static_cast<uint64_t>(choice.credit_bytes));
  }
  if (!log) return;
  LOG(INFO) << "scheduling (" << why << "): " << Describe(choice) << "; layout " << gen;
  if (ctx_.trace) {
    ctx_.trace->Instant(
        "scheduling", NowUs(),
        StrCat("{\"partition_bytes\":", choice.partition_bytes,
               ",\"credit_bytes\":", choice.credit_bytes, ",\"window_gain\":", choice.window_gain,
               ",\"frame_bytes\":", choice.frame_bytes, ",\"layout\":", gen, "}"));
  }
}

}  // namespace ferry
