#include "sim/piece_sizing.h"

#include <algorithm>
#include <cmath>

namespace ferry::sim {

void PieceSizing::OnLayerReady(uint32_t layer, uint64_t bytes, SimTime now) {
  if (job_.per_layer) layer_times_.OnReady(layer, bytes, static_cast<int64_t>(now));
}

void PieceSizing::AtBoundary(bool sizing_boundary, uint64_t partition_bytes, SimSender& sender) {
  if (job_.per_link && sizing_boundary) {
    DecidePieces(partition_bytes, sender);
  } else if (link_sizing_ &&
             link_sizing_->Moved(decided_, sender.core().measured_rate_bytes_per_s(),
                                 sender.link_rates())) {
    DecidePieces(partition_bytes, sender);
  }
  if (job_.per_layer) MaybeDecideLayers(partition_bytes, sender);
}

void PieceSizing::DecidePieces(uint64_t partition_bytes, SimSender& sender) {
  const Config::Scheduling& c = job_.config.scheduling;
  if (!link_sizing_) {
    link_sizing_ =
        std::make_unique<LinkSizing>(c.partition_ms, kMinLinkPieceBytes, c.repartition_threshold);
  }
  LinkRates& rates = sender.link_rates();
  rates.Resize(std::max(job_.num_servers, rates.servers()));
  decided_ = link_sizing_->Decide(sender.core().measured_rate_bytes_per_s(), rates,
                                  static_cast<int64_t>(partition_bytes), job_.timed_mean_rate);
  link_pieces_ = decided_.bytes;
  const auto frame = static_cast<uint64_t>(job_.config.transport.frame_bytes);
  for (uint64_t& piece : link_pieces_) {
    if (frame > 0) piece = std::min(piece, frame);  // a set FERRY_FRAME_BYTES stays the largest
  }
  sender.SetLinkPieces(link_pieces_);
  link_decisions_++;
}

void PieceSizing::MaybeDecideLayers(uint64_t partition_bytes, SimSender& sender) {
  if (!layer_sizing_) {
    layer_sizing_ = std::make_unique<LayerSizing>(job_.config.scheduling.repartition_threshold);
  }
  LayerSizing::Decision d;
  if (!layer_sizing_->Decide(layer_times_, sender.core().measured_rate_bytes_per_s(),
                             partition_bytes, &d)) {
    return;
  }
  std::vector<uint64_t> by_layer(job_.workload.layers.size(), 0);
  for (const auto& [tensor, piece] : d.pieces) {
    if (tensor >= by_layer.size()) by_layer.resize(tensor + 1, 0);
    by_layer[tensor] = piece;
  }
  layers_cut_ = static_cast<int>(d.pieces.size());
  sender.SetLayerPieces(std::move(by_layer));
  layer_decisions_ = static_cast<int>(layer_sizing_->decisions());
}

}  // namespace ferry::sim
