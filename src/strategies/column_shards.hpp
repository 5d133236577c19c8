#pragma once
// What FSDP and HSDP execute alike: all-gather B's column shards within the group of ranks
// that shards it (every rank for FSDP, the shard group for HSDP), then multiply this rank's
// rows by the full B, held only while it multiplies.
#include <armadillo>
#include <cstdint>
#include <span>

#include "distmm/communicator.hpp"
#include "distmm/stats.hpp"
#include "local_multiply.hpp"

namespace distmm {

// The full B (k x n) from every rank's shard of `group` into `full`; a group of one rank
// holds all of B in its shard.
template <Element T>
const arma::Mat<T>& gather_columns(Communicator& group, const arma::Mat<T>& shard,
                                   arma::Mat<T>& full, std::span<const std::size_t> counts) {
  if (group.size() == 1) return shard;
  group.allgatherv(shard, full, counts);
  return full;
}

// C_r^T (n x m_r) = B^T A_r^T with the gathered B, counted as held (`gathered_bytes`,
// temporarily) while it multiplies.
template <Element T>
void multiply_by_gathered(RankStats& stats, const MatmulShape& s, std::size_t rows,
                          const arma::Mat<T>& b, std::uint64_t gathered_bytes, const T* a_rows_t,
                          T* c_rows_t) {
  const ParameterHold gathered(stats, gathered_bytes, false);
  record_multiply(stats,
                  rows_times_columns(stats, rows, s.k, s.n, a_rows_t, b.memptr(), c_rows_t, s.n));
}

}  // namespace distmm
