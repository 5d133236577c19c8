#pragma once
// The grid strategy on every grid of a communicator's ranks (grid_cases.cpp).
#include "distmm/communicator.hpp"

namespace distmm::testing {

// The PM x PN x PK grids of the communicator's ranks and the first `most_grids` grids of fewer
// (idle ranks): C exact against A * B on uneven shapes, with panels of 2
// and the default, f64 and f32; the counters, multiplies and allocation equal the formulas
// (formulas.hpp) and the dry run's events the real run's; under the distributed layout
// (distributed_exact) C's blocks exact and what each rank receives the formula's.
void grid_every_grid(Communicator& comm, int most_grids = 3);

}  // namespace distmm::testing
