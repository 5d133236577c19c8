#pragma once
// The README's formulas for what each strategy's rank sends, receives and holds over setup
// and one execution, written independently of the strategies' code: the counters of real
// runs (and of dry runs) are checked against them.
#include <cstddef>
#include <cstdint>

#include "distmm/layout.hpp"
#include "distmm/report.hpp"
#include "distmm/shape.hpp"
#include "distmm/sharding.hpp"
#include "distmm/strategies/grid.hpp"
#include "distmm/strategy.hpp"
#include "distmm/train.hpp"

namespace distmm::testing {

RankFigures expected_figures(const Strategy& strategy, const MatmulShape& shape, int ranks,
                             int rank, std::size_t element_bytes, int replicas = 1);

// Bytes a plan of strategy `s` allocates at setup on rank `rank` (B's part, then its buffers),
// by the sharding formulas.
std::uint64_t expected_allocation(const Strategy& s, const MatmulShape& shape, int ranks, int rank,
                                  std::size_t element_bytes, int root = 0, int replicas = 1);

// What rank `rank` sends, receives and holds per training step (the README's formulas).
TrainStepFigures expected_train_figures(const Strategy& strategy, const MatmulShape& shape,
                                        int ranks, int rank, std::size_t element_bytes,
                                        Optimizer optimizer, int replicas = 1);

// The columns of W rank `rank` saves in a checkpoint (and reads when resuming).
Shard expected_checkpoint_columns(const Strategy& strategy, const MatmulShape& shape, int ranks,
                                  int rank, int replicas = 1);

// Local multiplies rank `rank` runs per execution: fsdp-overlap's one per ring step, the
// grid's one per panel of its layer, the others' one.
std::uint64_t expected_multiplies(const Strategy& strategy, const MatmulShape& shape, int ranks,
                                  int rank);

// The grid's, for grid `g` with panels at most `panel` wide (grid_formulas.cpp); the two
// above use them for strategy grid with the grid --grid auto chooses.
RankFigures expected_grid_figures(const Grid& g, const MatmulShape& shape, int ranks, int rank,
                                  std::size_t element_bytes, std::size_t panel = kDefaultPanel);
std::uint64_t expected_grid_multiplies(const Grid& g, const MatmulShape& shape, int rank,
                                       std::size_t panel = kDefaultPanel);
// Per training step on 2-D grid `g`, and the block of W a rank saves.
TrainStepFigures expected_grid_train_figures(const Grid& g, const MatmulShape& shape, int ranks,
                                             int rank, std::size_t element_bytes,
                                             Optimizer optimizer,
                                             std::size_t panel = kDefaultPanel);
Block expected_grid_checkpoint_block(const Grid& g, const MatmulShape& shape, int rank);
std::uint64_t expected_grid_allocation(const Grid& g, const MatmulShape& shape, int rank,
                                       std::size_t element_bytes,
                                       std::size_t panel = kDefaultPanel);

}  // namespace distmm::testing
