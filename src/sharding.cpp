#include "distmm/sharding.hpp"

#include <stdexcept>
#include <string>

namespace distmm {

Shard shard_of(std::size_t total, int parts, int r) {
  if (parts < 1 || r < 0 || r >= parts) {
    throw std::invalid_argument("shard_of: rank " + std::to_string(r) + " outside 0.." +
                                std::to_string(parts - 1));
  }
  const auto p = static_cast<std::size_t>(parts);
  const auto i = static_cast<std::size_t>(r);
  const std::size_t base = total / p;
  const std::size_t extra = total % p;
  return {i * base + (i < extra ? i : extra), base + (i < extra ? 1 : 0)};
}

int shard_holding(std::size_t total, int parts, std::size_t item) {
  if (parts < 1 || item >= total) {
    throw std::invalid_argument("shard_holding: item " + std::to_string(item) + " of " +
                                std::to_string(total));
  }
  const auto p = static_cast<std::size_t>(parts);
  const std::size_t base = total / p, extra = total % p;
  // The first `extra` shards hold base + 1 items, the rest base.
  if (item < extra * (base + 1)) return static_cast<int>(item / (base + 1));
  return static_cast<int>(extra + (item - extra * (base + 1)) / base);
}

std::vector<std::size_t> shard_counts(std::size_t total, int parts) {
  std::vector<std::size_t> counts;
  counts.reserve(static_cast<std::size_t>(parts));
  for (int r = 0; r < parts; ++r) counts.push_back(shard_of(total, parts, r).count);
  return counts;
}

std::vector<std::size_t> scaled(std::vector<std::size_t> counts, std::size_t unit) {
  for (auto& c : counts) c *= unit;
  return counts;
}

}  // namespace distmm
