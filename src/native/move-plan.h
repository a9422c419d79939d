// A move of `length` bytes from offset `from` to offset `to` within one allocation, overlapping
// ranges allowed, made of copies none of which is between overlapping ranges (cudaMemcpy leaves
// those undefined). The weight arena's compaction (arena.ts) slides blocks down, often by a few
// bytes: copying such a move in pieces no longer than the distance moved took ~6.5 million copies
// to slide 400 MB by 64 bytes. Instead:
// - ranges that do not overlap: one copy;
// - a distance at least `scratch`: pieces of the distance, each a copy within the allocation;
// - a shorter distance: pieces of `scratch` bytes, each copied out into a scratch buffer and back;
// in the order that never overwrites bytes still to be read (low to high moving down, high to low
// moving up). Pure: `copy` does the copies (cuda.cc on a GPU; a host buffer in the tests), and the
// number of copies made is returned.
#pragma once

#include <algorithm>
#include <cstddef>

namespace stowage {

enum class MoveStep {
  Within,       // copy(step, to, from, n): within the allocation
  ToScratch,    // copy(step, 0, from, n): into the scratch buffer
  FromScratch,  // copy(step, to, 0, n): out of the scratch buffer
};

template <typename Copy>
size_t planMove(size_t to, size_t from, size_t length, size_t scratch, Copy&& copy) {
  if (length == 0 || to == from) return 0;
  const size_t distance = to > from ? to - from : from - to;
  if (distance >= length) {
    copy(MoveStep::Within, to, from, length);
    return 1;
  }
  const bool direct = scratch == 0 || distance >= scratch;
  const size_t most = direct ? distance : scratch;
  size_t copies = 0;
  for (size_t done = 0; done < length;) {
    const size_t piece = std::min(most, length - done);
    const size_t at = to < from ? done : length - done - piece;
    if (direct) {
      copy(MoveStep::Within, to + at, from + at, piece);
      copies += 1;
    } else {
      copy(MoveStep::ToScratch, 0, from + at, piece);
      copy(MoveStep::FromScratch, to + at, 0, piece);
      copies += 2;
    }
    done += piece;
  }
  return copies;
}

// The scratch buffer an overlapping move of `length` bytes gets: it asks for the smaller of
// `length` and `most` first, then for half of what was refused, down to `least` (a move shorter
// than `least` asks for its own length only); `alloc(bytes)` answers whether the device gave them.
// Answers the bytes got, 0 when every size was refused (the move then copies in pieces of the
// distance moved). A refusal of a large buffer says little about a smaller one: under memory
// pressure a 64 MiB buffer may be refused and an 8 MiB one given, which still moves 256 MiB by 64
// bytes in 64 copies instead of 4 million.
template <typename Alloc>
size_t chooseScratch(size_t length, size_t most, size_t least, Alloc&& alloc) {
  if (length == 0) return 0;
  for (size_t want = std::min(length, most);; want = std::max(want / 2, least)) {
    if (alloc(want)) return want;
    if (want <= least) return 0;
  }
}

}  // namespace stowage
