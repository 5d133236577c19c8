#pragma once
// The README's formulas for what each strategy's rank sends, receives and holds over setup
// and one execution, written independently of the strategies' code: the counters of real
// runs (and of dry runs) are checked against them.
#include <cstddef>

#include "distmm/report.hpp"
#include "distmm/shape.hpp"
#include "distmm/strategy.hpp"

namespace distmm::testing {

RankFigures expected_figures(Strategy strategy, const MatmulShape& shape, int ranks, int rank,
                             std::size_t element_bytes, int replicas = 1);

}  // namespace distmm::testing
