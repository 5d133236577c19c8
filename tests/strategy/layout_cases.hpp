#pragma once
// Every strategy with a distributed layout (layout.hpp), written once for both backends
// (layout_cases.cpp).
#include "distmm/communicator.hpp"
#include "distmm/strategy.hpp"

namespace distmm::testing {

// One strategy's distributed layout with `settings` (settled) on `shape`: the blocks of all
// ranks hold every element of A, B and C once; each rank's C block, executed twice from its
// own A and B blocks, is exact against A * B (integer inputs); nothing of A or C moves beyond
// the strategy's formula for what a rank receives.
template <typename T>
void distributed_exact(Communicator& comm, const Strategy& s, const StrategySettings& settings,
                       const MatmulShape& shape, unsigned seed);

// distributed_exact for each registered strategy that has a distributed layout, with its
// default settings, on uneven shapes (blocks of one row, more ranks than rows), f64 and f32.
// Returns how many strategies it checked.
int distributed_layout_every_strategy(Communicator& comm);

}  // namespace distmm::testing
