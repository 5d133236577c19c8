#pragma once
// The built-in strategies, one unit each under strategies/; the registry (strategy.cpp) lists
// them through builtin_strategies(), in the order `--strategy all` runs them.
#include <memory>
#include <vector>

#include "distmm/strategy.hpp"
#include "distmm/train_step.hpp"

namespace distmm {

std::vector<std::unique_ptr<Strategy>> builtin_strategies();

std::unique_ptr<Strategy> make_dp_strategy();
std::unique_ptr<Strategy> make_fsdp_strategy();
std::unique_ptr<Strategy> make_fsdp_overlap_strategy();
std::unique_ptr<Strategy> make_hsdp_strategy();
std::unique_ptr<Strategy> make_tp_col_strategy();
std::unique_ptr<Strategy> make_tp_row_strategy();
std::unique_ptr<Strategy> make_grid_strategy();

// DP's training step: with one rank, every strategy's (all of W on the one rank).
template <Element T>
std::unique_ptr<TrainingStep<T>> dp_training_step(const TrainingSetup<T>& setup);

struct Grid;
// The grid's training step (grid_train.cpp): 2-D grids only (InputError naming --grid else).
template <Element T>
std::unique_ptr<TrainingStep<T>> grid_training_step(const TrainingSetup<T>& setup, const Grid& grid,
                                                    std::size_t panel);

}  // namespace distmm
