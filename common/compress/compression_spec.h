#pragma once

// CompressionSpec: how a tensor's partitions are compressed on the wire (FERRY_COMPRESSION,
// or per tensor from a binding), parsed from text such as "topk:0.01+ef+momentum:0.9".
//
//   none              no compression
//   fp16, bf16        every element as a 16-bit float (round to nearest even)
//   onebit            the sign of every element and one scale per partition (mean |x|)
//   topk:R            the R*n elements of largest magnitude, with their indices
//   randomk:R         R*n elements at indices drawn from a seed every worker and the
//                     server share per (key, round): the indices never travel
//   dither:S[:linear] every element stochastically rounded to one of S levels of the
//                     partition's largest magnitude: natural levels (1, 1/2, 1/4, ...) by
//                     default, or S evenly spaced ones
//   +ef               error feedback: what compression lost is kept (per partition, on
//                     the worker for its pushes and on the server for the sums) and added
//                     to the next round's values before they are compressed
//   +momentum:M       Nesterov momentum applied to the gradient before compression (on
//                     the worker; train with an optimizer without momentum then)
//
// R in (0, 1]; S in 1..127; M in [0, 1). ToString() gives the canonical text ("topk:0.01+ef"),
// the one that travels on every compressed push (workers disagreeing on it are refused).

#include <cstdint>
#include <string>

#include "common/util/status.h"

namespace ferry {

struct CompressionSpec {
  enum class Kind { kNone, kFp16, kBf16, kOnebit, kTopk, kRandomk, kDither };
  Kind kind = Kind::kNone;
  double ratio = 0;         // topk, randomk: the share of elements sent
  int levels = 0;           // dither: S
  bool linear = false;      // dither: evenly spaced levels instead of natural ones
  bool error_feedback = false;
  double momentum = 0;      // 0: none

  bool none() const { return kind == Kind::kNone; }
  std::string ToString() const;
  bool operator==(const CompressionSpec& o) const { return ToString() == o.ToString(); }
  bool operator!=(const CompressionSpec& o) const { return !(*this == o); }

  // Parses `text` (leading and trailing blanks ignored; "" is none). On an error the
  // status names what is wrong with the text and what is accepted.
  static Status Parse(const std::string& text, CompressionSpec* out);
};

// The accepted forms, for error messages and --help.
extern const char kCompressionForms[];

}  // namespace ferry
