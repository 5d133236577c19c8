#pragma once
// Every strategy with a distributed layout (layout.hpp), written once for both backends
// (layout_cases.cpp).
#include "distmm/communicator.hpp"

namespace distmm::testing {

// For each registered strategy that has a distributed layout, on uneven shapes (blocks of one
// row, more ranks than rows): the blocks of all ranks hold every element of A, B and C once;
// each rank's C block, executed twice from its own A and B blocks, is exact against A * B
// (f64 and f32); nothing of A or C moves, and what B's blocks move per execution equals the
// strategy's formula. Returns how many strategies it checked.
int distributed_layout_every_strategy(Communicator& comm);

}  // namespace distmm::testing
