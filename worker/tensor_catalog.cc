#include "worker/tensor_catalog.h"

#include <glog/logging.h>

#include <algorithm>

#include "common/transport/message.h"
#include "common/util/status.h"

namespace ferry {

namespace {

uint64_t CountOf(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

// How many partitions SplitTensor makes.
uint64_t PartitionCount(uint64_t bytes, size_t element, uint64_t partition_bytes) {
  uint64_t step = partition_bytes - partition_bytes % element;
  return std::max<uint64_t>(1, (bytes + step - 1) / step);
}

}  // namespace

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += StrCat(i ? "," : "", shape[i]);
  return s + "]";
}

TensorCatalog::TensorCatalog(uint64_t partition_bytes, std::vector<double> server_weights)
    : server_weights_(std::move(server_weights)) {
  layouts_.push_back(std::make_unique<Layout>(partition_bytes, server_weights_));
}

TensorInfo& TensorCatalog::Declare(const std::string& name, DataType dtype,
                                   const std::vector<int64_t>& shape, std::optional<int> priority) {
  FERRY_ENFORCE(IsValidDataType(static_cast<int32_t>(dtype)), ErrorCode::kInvalidArgument,
                "tensor '", name, "': unknown dtype ", static_cast<int>(dtype));
  for (int64_t d : shape) {
    FERRY_ENFORCE(d >= 0, ErrorCode::kInvalidArgument, "tensor '", name,
                  "': negative dimension in shape ", ShapeString(shape));
  }
  auto it = ids_.find(name);
  if (it != ids_.end()) {
    TensorInfo& t = *tensors_[it->second];
    FERRY_ENFORCE(t.dtype == dtype && CountOf(t.shape) == CountOf(shape),
                  ErrorCode::kInvalidArgument, "tensor '", name, "' was declared as ",
                  DataTypeName(t.dtype), ShapeString(t.shape), " and is now used as ",
                  DataTypeName(dtype), ShapeString(shape));
    if (priority) t.priority = *priority;
    return t;
  }
  auto t = std::make_unique<TensorInfo>();
  t->id = static_cast<uint32_t>(tensors_.size());
  t->name = name;
  t->dtype = dtype;
  t->shape = shape;
  t->count = CountOf(shape);
  t->bytes = t->count * DataTypeSize(dtype);
  t->hash = TensorHash(name, dtype, shape);
  t->priority = priority ? *priority : -static_cast<int>(t->id);
  const uint64_t bytes = partition_bytes();
  const uint64_t parts = PartitionCount(t->bytes, DataTypeSize(dtype), bytes);
  FERRY_ENFORCE(parts <= kMaxPartitionsPerTensor, ErrorCode::kInvalidArgument, "tensor '", name,
                "' of ", t->bytes, " bytes would have ", parts, " partitions of ", bytes,
                " bytes; at most ", kMaxPartitionsPerTensor,
                " are possible: use larger partitions");
  CutTensor(layout_, *t);
  VLOG(1) << "declared tensor '" << name << "' id " << t->id << " " << DataTypeName(dtype)
          << ShapeString(shape) << " in " << parts << " partitions";
  ids_[name] = t->id;
  tensors_.push_back(std::move(t));
  return *tensors_.back();
}

TensorInfo* TensorCatalog::Find(const std::string& name) {
  auto it = ids_.find(name);
  return it == ids_.end() ? nullptr : tensors_[it->second].get();
}

std::string TensorCatalog::NameOf(uint32_t id) const {
  return id < tensors_.size() ? tensors_[id]->name : "?";
}

void TensorCatalog::CutTensor(uint32_t gen, TensorInfo& t) {
  Layout& l = *layouts_[gen];
  CHECK_EQ(l.cut, t.id) << "tensors are cut in declaration order";
  Cut cut;
  cut.parts = SplitTensor(t.bytes, DataTypeSize(t.dtype), l.partition_bytes);
  CHECK_LE(cut.parts.size(), kMaxPartitionsPerTensor);
  for (auto& p : cut.parts) p.server = l.placement.Assign(p.bytes);
  cut.rounds.assign(cut.parts.size(), 0);
  if (t.cuts.size() <= gen) t.cuts.resize(gen + 1);
  t.cuts[gen] = std::move(cut);
  l.cut++;
}

uint32_t TensorCatalog::SwitchPartitionBytes(uint64_t bytes) {
  uint32_t gen = 0;
  while (gen < layouts_.size() && layouts_[gen]->partition_bytes != bytes) gen++;
  if (gen == layouts_.size()) {
    FERRY_ENFORCE(layouts_.size() < kMaxLayouts, ErrorCode::kInvalidArgument,
                  "cannot cut tensors with a ", kMaxLayouts + 1, "th partition size (", bytes,
                  " bytes): keys hold ", kMaxLayouts, " layouts");
    layouts_.push_back(std::make_unique<Layout>(bytes, server_weights_));
  }
  Layout& l = *layouts_[gen];
  for (uint32_t id = l.cut; id < tensors_.size(); ++id) {  // refuse before cutting any
    const TensorInfo& t = *tensors_[id];
    FERRY_ENFORCE(PartitionCount(t.bytes, DataTypeSize(t.dtype), bytes) <= kMaxPartitionsPerTensor,
                  ErrorCode::kInvalidArgument, "tensor '", t.name, "' of ", t.bytes,
                  " bytes would have more than ", kMaxPartitionsPerTensor, " partitions of ", bytes,
                  " bytes");
  }
  while (l.cut < tensors_.size()) CutTensor(gen, *tensors_[l.cut]);
  layout_ = gen;
  return gen;
}

void TensorCatalog::ResetRounds() {
  for (auto& t : tensors_) {
    for (Cut& cut : t->cuts) cut.rounds.assign(cut.parts.size(), 0);
    t->rows_rounds.assign(t->rows_rounds.size(), 0);
  }
}

std::vector<uint64_t> TensorCatalog::PlacedBytes() const {
  return layouts_[layout_]->placement.loads();
}

}  // namespace ferry
