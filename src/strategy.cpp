#include "distmm/strategy.hpp"

#include "distmm/error.hpp"
#include "distmm/plan.hpp"

namespace distmm {

std::string_view name_of(Strategy s) {
  switch (s) {
    case Strategy::dp:
      return "dp";
    case Strategy::fsdp:
      return "fsdp";
    case Strategy::fsdp_overlap:
      return "fsdp-overlap";
    case Strategy::hsdp:
      return "hsdp";
    case Strategy::tp_col:
      return "tp-col";
    case Strategy::tp_row:
      return "tp-row";
  }
  return "?";
}

const std::vector<Strategy>& all_strategies() {
  static const std::vector<Strategy> all{Strategy::dp,   Strategy::fsdp,   Strategy::fsdp_overlap,
                                         Strategy::hsdp, Strategy::tp_col, Strategy::tp_row};
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
                    const arma::Mat<T>& b, int root, int replicas) {
  const bool at_root = comm.rank() == root;
  if (at_root && (a.n_rows != shape.m || a.n_cols != shape.k)) {
    throw Error("matmul: A is " + std::to_string(a.n_rows) + "x" + std::to_string(a.n_cols) +
                    ", expected " + std::to_string(shape.m) + "x" + std::to_string(shape.k),
                comm.rank(), "matmul");
  }
  const auto plan = make_plan(s, comm, shape, b, root, replicas);
  // The plan's row-major layout, by transposing in and out: one pass each way.
  const arma::Mat<T> a_t = at_root ? arma::Mat<T>(a.t()) : arma::Mat<T>();
  arma::Mat<T> c_t(at_root ? shape.n : 0, at_root ? shape.m : 0);
  plan->execute(a_t, c_t);
  return at_root ? arma::Mat<T>(c_t.t()) : arma::Mat<T>();
}

template arma::Mat<double> matmul(Strategy, Communicator&, const MatmulShape&,
                                  const arma::Mat<double>&, const arma::Mat<double>&, int, int);
template arma::Mat<float> matmul(Strategy, Communicator&, const MatmulShape&,
                                 const arma::Mat<float>&, const arma::Mat<float>&, int, int);

}  // namespace distmm
