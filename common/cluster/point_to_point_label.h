#pragma once

// The stall check's label of a point-to-point operation (operation_table.h, "Labels";
// scheduler/stall_check.h): the same on the sending and the receiving rank, so the n-th
// send from S to D under tag T and D's n-th receive from S under T are one operation
// (label, n), and only ranks S and D take part in it.

#include <cstdio>
#include <string>

namespace ferry {

inline std::string PointToPointLabel(int src, int dst, int tag) {
  return "point-to-point from rank " + std::to_string(src) + " to rank " + std::to_string(dst) +
         ", tag " + std::to_string(tag);
}

// True (and the two ranks) if `label` is a PointToPointLabel.
inline bool ParsePointToPointLabel(const std::string& label, int* src, int* dst) {
  int tag = 0, used = 0;
  if (std::sscanf(label.c_str(), "point-to-point from rank %d to rank %d, tag %d%n", src, dst,
                  &tag, &used) != 3) {
    return false;
  }
  return static_cast<size_t>(used) == label.size();
}

}  // namespace ferry
