#include "worker/join_protocol.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstdint>

#include "common/util/clock.h"
#include "common/util/status.h"

namespace ferry {

int JoinProtocol::Join() {
  const Config& config = ctx_.config;
  FERRY_ENFORCE(!config.server.async, ErrorCode::kInvalidArgument,
                "join: not available in asynchronous training (FERRY_ENABLE_ASYNC=1); no push "
                "waits for other workers, so a worker out of data simply stops pushing");
  uint64_t request = 0;
  {
    MutexLock lock(ctx_.mu);
    ctx_.sequencer->WaitUntilIdle();
    request = request_ = ctx_.next_request++;
    acks_ = 0;
    position_ = INT32_MAX;
  }
  int servers = 0;  // the live ones
  for (int s = 0; s < ctx_.num_servers; ++s) {
    {
      MutexLock lock(ctx_.mu);
      if (!ctx_.live_servers[s]) continue;
    }
    servers++;
    Message m = ctx_.NewMessage(proto::JOIN);
    m.envelope.set_request_id(request);
    ctx_.van.Send(ServerId(s), std::move(m));
  }
  {
    // Every server must hold our JOIN before the others may leave the join barrier.
    MutexLock lock(ctx_.mu);
    bool acked = cv_.WaitFor(
        ctx_.mu, Millis(config.cluster.op_timeout_ms),
        [this, servers]() REQUIRES(ctx_.mu) { return acks_ == servers || !ctx_.failure.empty(); });
    ctx_.ThrowIfFailed();
    FERRY_ENFORCE(acked, ErrorCode::kTimeout, "join: ", servers - acks_, " of ", servers,
                  " servers did not acknowledge within ",
                  config.cluster.op_timeout_ms, " ms");
  }
  LOG(INFO) << "worker " << ctx_.cluster.my_rank() << " joined; waiting for the other workers";
  ClusterClient::JoinInfo join;
  proto::CatalogSnapshot snapshot;
  {
    MutexLock lock(ctx_.mu);
    join.position = position_;
    join.catalog_digest = catalog_.Digest();
    join.catalog_next_id = catalog_.next_id();
    snapshot = catalog_.Snapshot();
    join.catalog = &snapshot;
  }
  const int last = ctx_.cluster.Barrier(proto::GROUP_JOIN, config.cluster.join_timeout_ms, &join,
                                        ctx_.epoch.load());
  MutexLock lock(ctx_.mu);
  if (join.catalogs_differ && join.adopt) {
    // The others declared names while this worker had joined: take their catalog (ids,
    // cuts, placements), so that every worker's later operations meet on the same keys.
    const uint32_t before = catalog_.next_id();
    catalog_.Load(*join.adopt);
    LOG(INFO) << "join: took the " << catalog_.next_id() - before
              << " declaration(s) the other workers made while this worker had joined";
  }
  catalog_.ResetRounds();
  FERRY_ENFORCE(!join.catalogs_differ || join.adopt, ErrorCode::kMismatch,
                "join: the workers' tensor declarations differ, so their later operations would "
                "wait on different keys: workers declared different names (or the same names "
                "with other shapes or dtypes) at the same point, which no worker's joining "
                "early explains (declare the same names in the same order on every worker)");
  // Uneven data: the workers submitted different numbers of operations before joining.
  ctx_.table.RestartCounts();
  LOG(INFO) << "every worker joined (rank " << last << " last); rounds start over";
  return last;
}

void JoinProtocol::OnAck(const Message& m) {
  MutexLock lock(ctx_.mu);
  if (m.envelope.request_id() == request_) {
    acks_++;
    position_ = std::min(position_, static_cast<int>(m.envelope.round()));
  }
  cv_.NotifyAll();
}

void JoinProtocol::OnFailure() {
  ctx_.mu.AssertHeld();
  cv_.NotifyAll();
}

}  // namespace ferry
