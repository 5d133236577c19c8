// The registry's built-in strategies, in the order `--strategy all` runs them.
#include "strategies/builtin.hpp"

namespace distmm {

std::vector<std::unique_ptr<Strategy>> builtin_strategies() {
  std::vector<std::unique_ptr<Strategy>> all;
  all.push_back(make_dp_strategy());
  all.push_back(make_fsdp_strategy());
  all.push_back(make_fsdp_overlap_strategy());
  all.push_back(make_hsdp_strategy());
  all.push_back(make_tp_col_strategy());
  all.push_back(make_tp_row_strategy());
  all.push_back(make_grid_strategy());
  return all;
}

}  // namespace distmm
