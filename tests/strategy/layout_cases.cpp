#include "strategy/layout_cases.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "distmm/dry_run.hpp"
#include "distmm/layout.hpp"
#include "distmm/report.hpp"
#include "distmm/sharding.hpp"
#include "distmm/strategies/grid.hpp"
#include "distmm/strategy.hpp"
#include "strategy/strategy_cases.hpp"

namespace distmm::testing {
namespace {

// Each element of an rows x cols matrix covered by exactly one of `blocks`.
void expect_partition(const std::vector<Block>& blocks, std::size_t rows, std::size_t cols,
                      const char* what) {
  arma::umat covered(rows, cols, arma::fill::zeros);
  for (const Block& b : blocks) {
    ASSERT_LE(b.row0 + b.rows, rows) << what;
    ASSERT_LE(b.col0 + b.cols, cols) << what;
    if (b.elements() > 0) covered.submat(b.row0, b.col0, arma::size(b.rows, b.cols)) += 1;
  }
  EXPECT_TRUE(arma::all(arma::vectorise(covered) == 1)) << what << " not held once:\n" << covered;
}

// Elements rank `rank` of a grid receives per execution under the distributed layout: the A
// panels of its layer it does not hold (from its grid row), the B panels (from its grid
// column), and in the reduce-scatter over the fibre its rows of C_ij from each other layer.
std::uint64_t grid_received(const Grid& g, const MatmulShape& s, int rank) {
  if (rank >= g.pm * g.pn * g.pk) return 0;
  const int l = rank / (g.pm * g.pn), i = rank % (g.pm * g.pn) / g.pn, j = rank % g.pn;
  const std::size_t mi = shard_of(s.m, g.pm, i).count, nj = shard_of(s.n, g.pn, j).count;
  const std::size_t layer = shard_of(s.k, g.pk, l).count;
  std::uint64_t got = 0;
  if (g.pn > 1) got += mi * (layer - shard_of(layer, g.pn, j).count);
  if (g.pm > 1) got += nj * (layer - shard_of(layer, g.pm, i).count);
  if (g.pk > 1) got += static_cast<std::size_t>(g.pk - 1) * nj * shard_of(mi, g.pk, l).count;
  return got;
}

// Bytes a rank receives per execution, by strategy: the row-sharded ones (hsdp through its
// replicas and then its group) B's columns they do not hold, tp-col A's rows it does not hold,
// tp-row in the reduce-scatter its rows of C from each other rank.
std::uint64_t expected_received(const Strategy& strategy, const StrategySettings& settings,
                                const MatmulShape& s, int ranks, int rank, const BlockLayout& l,
                                std::size_t element_bytes) {
  const std::string name(strategy.name());
  if (name == "dp" || name == "fsdp" || name == "fsdp-overlap" || name == "hsdp") {
    return s.k * (s.n - l.b.cols) * element_bytes;
  }
  if (name == "tp-col") return s.k * (s.m - l.a.rows) * element_bytes;
  if (name == "tp-row") {
    return static_cast<std::uint64_t>(ranks - 1) * l.c.rows * s.n * element_bytes;
  }
  if (name == "grid") {
    return grid_received(parse_grid(*settings.find("grid"), ranks), s, rank) * element_bytes;
  }
  ADD_FAILURE() << "no formula for " << name << "'s distributed layout";
  return 0;
}

}  // namespace

template <typename T>
void distributed_exact(Communicator& comm, const Strategy& s, const StrategySettings& settings,
                       const MatmulShape& shape, unsigned seed) {
  const int ranks = comm.size(), rank = comm.rank();
  std::vector<Block> a_blocks, b_blocks, c_blocks;
  for (int q = 0; q < ranks; ++q) {
    const auto l = s.distributed_blocks(shape, ranks, q, settings);
    ASSERT_TRUE(l.has_value());
    a_blocks.push_back(l->a);
    b_blocks.push_back(l->b);
    c_blocks.push_back(l->c);
  }
  expect_partition(a_blocks, shape.m, shape.k, "A");
  expect_partition(b_blocks, shape.k, shape.n, "B");
  expect_partition(c_blocks, shape.m, shape.n, "C");

  const arma::Mat<T> a = integer_matrix<T>(shape.m, shape.k, seed);
  const arma::Mat<T> b = integer_matrix<T>(shape.k, shape.n, seed + 1);
  const arma::Mat<T> c = a * b;
  const BlockLayout mine{a_blocks[static_cast<std::size_t>(rank)],
                         b_blocks[static_cast<std::size_t>(rank)],
                         c_blocks[static_cast<std::size_t>(rank)]};
  const arma::Mat<T> a_t = block_of(a, mine.a, true);
  const auto plan = s.distributed_plan(comm, shape, block_of(b, mine.b, false), settings);
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan->blocks(), mine);
  arma::Mat<T> c_t(mine.c.cols, mine.c.rows);
  for (int execution = 0; execution < 2; ++execution) {
    c_t.fill(arma::Datum<T>::nan);
    comm.stats().reset();
    plan->execute(a_t, c_t);
    const RankFigures f = measured(comm, sizeof(T));
    EXPECT_EQ(f.bytes_received, expected_received(s, settings, shape, ranks, rank, mine, sizeof(T)))
        << "execution " << execution << " on rank " << rank;
    EXPECT_TRUE(arma::approx_equal(c_t, block_of(c, mine.c, true), "absdiff", 0))
        << "execution " << execution << " on rank " << rank;
    // The dry run of the layout (setup, which moves nothing here, and one execution) counts
    // what the real execution moved.
    if (execution == 0) {
      const DryRun dry = dry_run(s, shape, ranks, sizeof(T) == 8 ? DataType::f64 : DataType::f32,
                                 settings, 1, true);
      const OpCounters& d = dry.ranks[static_cast<std::size_t>(rank)].communication;
      EXPECT_EQ(d.bytes_received, f.bytes_received) << "dry run, rank " << rank;
      EXPECT_EQ(d.bytes_sent, f.bytes_sent) << "dry run, rank " << rank;
      EXPECT_EQ(dry.ranks[static_cast<std::size_t>(rank)].allocated_bytes, plan->allocated_bytes());
    }
  }
}

template void distributed_exact<double>(Communicator&, const Strategy&, const StrategySettings&,
                                        const MatmulShape&, unsigned);
template void distributed_exact<float>(Communicator&, const Strategy&, const StrategySettings&,
                                       const MatmulShape&, unsigned);

int distributed_layout_every_strategy(Communicator& comm) {
  int checked = 0;
  for (const Strategy& s : all_strategies()) {
    const MatmulShape probe{4, 4, 4};
    const StrategySettings settings = s.settle({}, RunPlacement{comm.size(), 1, probe, 8});
    if (!s.distributed_blocks(probe, comm.size(), comm.rank(), settings)) {
      EXPECT_EQ(s.distributed_plan(comm, probe, arma::mat(), settings), nullptr) << s.name();
      continue;
    }
    ++checked;
    unsigned seed = 11;
    for (const MatmulShape& shape : {MatmulShape{13, 7, 9}, MatmulShape{1, 5, 3},
                                     MatmulShape{2, 1, 7}, MatmulShape{6, 4, 1}}) {
      SCOPED_TRACE(std::string(s.name()) + " " + std::to_string(shape.m) + "x" +
                   std::to_string(shape.k) + "x" + std::to_string(shape.n));
      const StrategySettings settled = s.settle({}, RunPlacement{comm.size(), 1, shape, 8});
      distributed_exact<double>(comm, s, settled, shape, seed);
      distributed_exact<float>(comm, s, settled, shape, seed + 7);
      seed += 2;
    }
  }
  return checked;
}

}  // namespace distmm::testing
