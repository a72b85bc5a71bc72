#pragma once

// WorkerCounters: what a Worker counts, each counter registered once under its name.

#include "common/util/counters.h"
#include "worker/urgency.h"

namespace ferry {

// The counters of a Worker, in its registry: Worker::Counters() reads them (with the
// transport's "van.*"), FERRY_STATS_FILE writes them at Shutdown.
//   operations          push_pull calls          partitions_pushed  partitions sent (first sends)
//   bytes_pushed        payload bytes handed to ZeroMQ, without copy
//   bytes_received      payload bytes of sums    send_releases      ZeroMQ release hooks fired
//   payloads_lent       inputs lent to ZeroMQ without copy (a partition or a frame, first
//                       sends and resends); each one's release hook fires once
//   resends             pushes sent again (no acknowledgement in time)
//   pulls               sums asked for again (acknowledged, but no sum in time)
//   late_replies        replies to requests already answered (acks not counted)
//   late_acks           acks of requests already answered: on the control lane an ack may
//                       arrive after its sum (van.h, "Lanes"), which is no fault
//   fused_messages      PUSH_FUSED messages      partitions_fused   partitions inside them
//   frames_pushed       frames of partitions sent as frames (FERRY_FRAME_BYTES; first sends)
//   sender_thread_batches  batches of partitions the sender thread sent: let out by a policy's
//                       timer, a new credit or window, or missed by the thread that let them out
//                       (dense_push_pull.h, "Who sends"); every other batch went from the caller
//                       or van-io without a hand-off
//   redeclarations      names declared again with another dtype or size (tensor_catalog.h)
//   partitions_staged   partitions of staged push_pulls released (the device path's: each
//                       copied to pinned memory; Worker::ReleasePartition)
//   rows_operations     PushPullRows calls       rows_pushed        rows they listed
//   rows_bytes_pushed   ROWS_PUSH payload bytes (first sends)
//   rows_bytes_received ROWS_RESULT payload bytes
struct WorkerCounters {
  CounterRegistry registry;
  Counter& operations = registry.Register(
      "operations", {"ferry_operations_total", "push_pull and broadcast operations started"});
  Counter& partitions_pushed = registry.Register("partitions_pushed");
  Counter& bytes_pushed = registry.Register("bytes_pushed");
  Counter& bytes_received = registry.Register("bytes_received");
  Counter& send_releases = registry.Register("send_releases");
  Counter& payloads_lent = registry.Register("payloads_lent");
  Counter& resends =
      registry.Register("resends", {"ferry_resends_total", "pushes sent again after a timeout"});
  Counter& pulls = registry.Register("pulls");
  Counter& late_replies = registry.Register("late_replies");
  Counter& late_acks = registry.Register("late_acks");
  Counter& fused_messages = registry.Register("fused_messages");
  Counter& partitions_fused = registry.Register("partitions_fused");
  Counter& frames_pushed = registry.Register("frames_pushed");
  Counter& sender_thread_batches = registry.Register("sender_thread_batches");
  Counter& redeclarations = registry.Register("redeclarations");
  Counter& partitions_staged = registry.Register("partitions_staged");
  Counter& rows_operations = registry.Register("rows_operations");
  Counter& rows_pushed = registry.Register("rows_pushed");
  Counter& rows_bytes_pushed = registry.Register("rows_bytes_pushed");
  Counter& rows_bytes_received = registry.Register("rows_bytes_received");
  // Point-to-point (point_to_point.h): sends and receives made, their bytes, and sends
  // (or probes) sent again after a timeout.
  Counter& p2p_sends = registry.Register("p2p.sends");
  Counter& p2p_receives = registry.Register("p2p.receives");
  Counter& p2p_bytes_sent = registry.Register(
      "p2p.bytes_sent", {"ferry_p2p_bytes_sent_total", "bytes this worker sent to other workers"});
  Counter& p2p_bytes_received = registry.Register(
      "p2p.bytes_received",
      {"ferry_p2p_bytes_received_total", "bytes this worker received from other workers"});
  Counter& p2p_resends = registry.Register("p2p.resends");
  // Gradient compression (push_compression.h): the raw bytes of the partitions compressed,
  // and the bytes they took on the wire.
  Counter& compression_raw_bytes = registry.Register(
      "compression.raw_bytes",
      {"ferry_compression_raw_bytes_total", "bytes of the partitions this worker compressed"});
  Counter& compression_wire_bytes = registry.Register(
      "compression.wire_bytes",
      {"ferry_compression_wire_bytes_total", "bytes those partitions took compressed"});
  // From a server's hand-off of a reply (Envelope.sent_us, its wall clock) to its arrival
  // here, in microseconds: acks and errors, and sums. Exact where the nodes share a clock
  // (one host, the emulated clusters); across hosts only as good as their clock sync.
  Histogram& ack_delay_us = registry.RegisterHistogram("ack_delay_us");
  Histogram& sum_delay_us = registry.RegisterHistogram("sum_delay_us");
  // Live metrics (common/metrics/series.h), in microseconds: how long an urgent partition
  // (`urgency`) waited in the send queue (ready to sent), each partition's round (its push
  // sent to its sum received), and the iterations between step boundaries.
  Histogram& urgent_queue_delay_us = registry.RegisterHistogram(
      "urgent_queue_delay_us",
      {"ferry_urgent_queue_delay_seconds",
       "how long an urgent partition waited in the send queue (from ready to sent)"});
  Histogram& partition_round_us = registry.RegisterHistogram(
      "partition_round_us", {"ferry_partition_round_seconds",
                             "a partition's round: from its push sent to its sum received"});
  Histogram& iteration_us = registry.RegisterHistogram(
      "iteration_us", {"ferry_iteration_seconds",
                       "training iteration time, between the program's step boundaries"});
  UrgencyThreshold urgency;  // learns from every partition started
  // By server slot: push bytes handed to the Van (first sends and resends) and reply bytes
  // that arrived (late and duplicate sums too), dense and rows: what the servers count as
  // received and sent. The Worker sizes it.
  PeerBytes servers;
};

}  // namespace ferry
