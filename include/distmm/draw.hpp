#pragma once
// A picture of a strategy's sharding (distmm --draw FILE.svg, distmm.draw() in Python): A, B
// and C with each block coloured by the rank that holds it under the strategy's distributed
// layout (layout.hpp), and what every rank sends and receives in each collective of one
// execution, from the dry run (no data moves). Plain SVG, as jax.debug.visualize_sharding
// and DTensor's visualize_sharding draw a sharded array.
#include <string>

#include "distmm/shape.hpp"
#include "distmm/strategy.hpp"

namespace distmm {

// The SVG document for `s` with `settings` (settled for the run) on `ranks` ranks.
std::string sharding_svg(const Strategy& s, const MatmulShape& shape, int ranks,
                         const StrategySettings& settings);

}  // namespace distmm
