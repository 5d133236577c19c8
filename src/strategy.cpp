#include "distmm/strategy.hpp"

#include "distmm/dp.hpp"
#include "distmm/fsdp.hpp"
#include "distmm/fsdp_overlap.hpp"

namespace distmm {

std::string_view name_of(Strategy s) {
  switch (s) {
    case Strategy::dp:
      return "dp";
    case Strategy::fsdp:
      return "fsdp";
    case Strategy::fsdp_overlap:
      return "fsdp-overlap";
  }
  return "?";
}

const std::vector<Strategy>& all_strategies() {
  static const std::vector<Strategy> all{Strategy::dp, Strategy::fsdp, Strategy::fsdp_overlap};
  return all;
}

std::optional<Strategy> parse_strategy(std::string_view name) {
  for (Strategy s : all_strategies()) {
    if (name_of(s) == name) return s;
  }
  return std::nullopt;
}

template <Element T>
arma::Mat<T> matmul(Strategy s, Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& a,
                    const arma::Mat<T>& b, int root) {
  switch (s) {
    case Strategy::dp:
      return dp_matmul(comm, shape, a, b, root);
    case Strategy::fsdp:
      return fsdp_matmul(comm, shape, a, b, root);
    case Strategy::fsdp_overlap:
      return fsdp_overlap_matmul(comm, shape, a, b, root);
  }
  return {};
}

template arma::Mat<double> matmul(Strategy, Communicator&, const MatmulShape&,
                                  const arma::Mat<double>&, const arma::Mat<double>&, int);
template arma::Mat<float> matmul(Strategy, Communicator&, const MatmulShape&,
                                 const arma::Mat<float>&, const arma::Mat<float>&, int);

}  // namespace distmm
