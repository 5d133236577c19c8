#pragma once
// Balanced contiguous sharding: the one place that decides who holds which rows or columns.
//
// `total` items split over `parts` ranks: rank r holds items [offset(r), offset(r) + count(r)).
// The first total % parts ranks hold one item more than the others, so sizes differ by at
// most one; when parts > total the last ranks hold empty shards.
#include <cstddef>
#include <vector>

namespace distmm {

struct Shard {
  std::size_t offset = 0;
  std::size_t count = 0;
  bool operator==(const Shard&) const = default;
};

// Rank r's shard of `total` items split over `parts` ranks (parts >= 1, 0 <= r < parts).
Shard shard_of(std::size_t total, int parts, int r);

// The rank whose shard of `total` items over `parts` holds item `item` (< total).
int shard_holding(std::size_t total, int parts, std::size_t item);

// Every rank's count, in rank order.
std::vector<std::size_t> shard_counts(std::size_t total, int parts);

// Counts scaled by `unit`: the element counts of shards of whole rows (or columns) of
// `unit` elements each.
std::vector<std::size_t> scaled(std::vector<std::size_t> counts, std::size_t unit);

}  // namespace distmm
