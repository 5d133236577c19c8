#include <gtest/gtest.h>

#include <numeric>

#include "distmm/sharding.hpp"

namespace distmm {
namespace {

TEST(Sharding, BalancedContiguousLargerShardsFirst) {
  EXPECT_EQ(shard_counts(10, 4), (std::vector<std::size_t>{3, 3, 2, 2}));
  EXPECT_EQ(shard_of(10, 4, 0), (Shard{0, 3}));
  EXPECT_EQ(shard_of(10, 4, 1), (Shard{3, 3}));
  EXPECT_EQ(shard_of(10, 4, 2), (Shard{6, 2}));
  EXPECT_EQ(shard_of(10, 4, 3), (Shard{8, 2}));
}

TEST(Sharding, MoreRanksThanItemsGivesEmptyShardsAtTheEnd) {
  EXPECT_EQ(shard_counts(2, 5), (std::vector<std::size_t>{1, 1, 0, 0, 0}));
  EXPECT_EQ(shard_of(2, 5, 4), (Shard{2, 0}));
  EXPECT_EQ(shard_counts(0, 3), (std::vector<std::size_t>{0, 0, 0}));
}

TEST(Sharding, EveryShapeCoversAllItemsOnceWithSizesWithinOne) {
  for (std::size_t total = 0; total < 50; ++total) {
    for (int parts = 1; parts < 20; ++parts) {
      const auto counts = shard_counts(total, parts);
      ASSERT_EQ(std::accumulate(counts.begin(), counts.end(), std::size_t{0}), total);
      std::size_t next = 0;
      for (int r = 0; r < parts; ++r) {
        const Shard s = shard_of(total, parts, r);
        EXPECT_EQ(s.offset, next);
        EXPECT_LE(counts.front() - s.count, 1u);
        next += s.count;
      }
    }
  }
}

TEST(Sharding, ScaledCountsAreElementCounts) {
  EXPECT_EQ(scaled(shard_counts(5, 2), 4), (std::vector<std::size_t>{12, 8}));
}

TEST(Sharding, RejectsRankOutsideTheWorld) {
  EXPECT_THROW(shard_of(4, 2, 2), std::invalid_argument);
  EXPECT_THROW(shard_of(4, 0, 0), std::invalid_argument);
}

}  // namespace
}  // namespace distmm
