#pragma once

// Process sets on the wire (Envelope.members): the member ranks of a process set's tensor
// as a bit mask, bit r of byte r / 8 for worker rank r. Empty: every worker (the global set).

#include <string>
#include <vector>

namespace ferry {

// The mask of `ranks` (each in [0, 65535]).
inline std::string ProcessSetMask(const std::vector<int>& ranks) {
  std::string mask;
  for (int r : ranks) {
    const size_t byte = static_cast<size_t>(r) / 8;
    if (mask.size() <= byte) mask.resize(byte + 1, '\0');
    mask[byte] = static_cast<char>(static_cast<unsigned char>(mask[byte]) | (1u << (r % 8)));
  }
  return mask;
}

// Whether rank `rank` is in non-empty `mask`.
inline bool IsProcessSetMember(const std::string& mask, int rank) {
  const size_t byte = static_cast<size_t>(rank) / 8;
  return rank >= 0 && byte < mask.size() &&
         (static_cast<unsigned char>(mask[byte]) >> (rank % 8) & 1u) != 0;
}

// Adds the ranks of `mask` to `*into`.
inline void MergeMask(std::string* into, const std::string& mask) {
  if (into->size() < mask.size()) into->resize(mask.size(), '\0');
  for (size_t i = 0; i < mask.size(); ++i) {
    (*into)[i] = static_cast<char>(static_cast<unsigned char>((*into)[i]) |
                                   static_cast<unsigned char>(mask[i]));
  }
}

// How many ranks `mask` holds.
inline int MaskCount(const std::string& mask) {
  int n = 0;
  for (unsigned char byte : mask) n += __builtin_popcount(byte);
  return n;
}

// "0, 2, 3": the ranks of `mask`, for messages.
inline std::string ProcessSetRanks(const std::string& mask) {
  std::string s;
  for (size_t r = 0; r < mask.size() * 8; ++r) {
    if (IsProcessSetMember(mask, static_cast<int>(r))) {
      s += (s.empty() ? "" : ", ") + std::to_string(r);
    }
  }
  return s;
}

}  // namespace ferry
