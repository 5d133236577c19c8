#pragma once
// The strategies by name, for the program, the tests and the benchmarks.
#include <armadillo>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "distmm/communicator.hpp"
#include "distmm/shape.hpp"

namespace distmm {

enum class Strategy { dp, fsdp, fsdp_overlap, hsdp, tp_col, tp_row };

std::string_view name_of(Strategy s);
std::optional<Strategy> parse_strategy(std::string_view name);
inline std::ostream& operator<<(std::ostream& out, Strategy s) {
  return out << name_of(s);
}
// Every strategy, in the order `--strategy all` runs them.
const std::vector<Strategy>& all_strategies();

// One-shot C = A @ B by strategy `s`: sets up a plan (plan.hpp), executes it once and returns
// C on `root` (an empty matrix elsewhere); A (m x k) and B (k x n) are read on `root` only.
// It transposes A in and C out of the plan's row-major layout: for repeated multiplies, or
// to move each byte once, use make_plan() and execute().
// `replicas` is hsdp's R (the mesh's replica groups; 1: FSDP); other strategies ignore it.
template <Element T>
arma::Mat<T> matmul(Strategy s, Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& a,
                    const arma::Mat<T>& b, int root = 0, int replicas = 1);

}  // namespace distmm
