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

enum class Strategy { dp, fsdp, fsdp_overlap };

std::string_view name_of(Strategy s);
std::optional<Strategy> parse_strategy(std::string_view name);
inline std::ostream& operator<<(std::ostream& out, Strategy s) {
  return out << name_of(s);
}
// Every strategy, in the order `--strategy all` runs them.
const std::vector<Strategy>& all_strategies();

// C = A @ B by strategy `s`; A and B are read on `root` only, C is returned there.
template <Element T>
arma::Mat<T> matmul(Strategy s, Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& a,
                    const arma::Mat<T>& b, int root = 0);

}  // namespace distmm
