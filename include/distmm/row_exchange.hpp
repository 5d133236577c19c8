#pragma once
// Moving row shards of a matrix between a root and all ranks, shared by every strategy.
//
// Armadillo stores matrices column-major, so rank r's rows [o, o + c) of an m x w matrix are
// strided. The root packs each shard once into a contiguous c x w column-major block, in rank
// order, so one scatterv delivers each rank a ready matrix; gather_rows does the reverse.
#include <armadillo>

#include "distmm/communicator.hpp"

namespace distmm {

// Rank r receives rows shard_of(rows, size, r) of `full` (read on `root` only; rows x cols).
template <Element T>
arma::Mat<T> scatter_rows(Communicator& comm, const arma::Mat<T>& full, std::size_t rows,
                          std::size_t cols, int root);

// The root receives the rows x cols matrix whose row shards are the ranks' `mine`; other
// ranks get an empty matrix.
template <Element T>
arma::Mat<T> gather_rows(Communicator& comm, const arma::Mat<T>& mine, std::size_t rows,
                         std::size_t cols, int root);

}  // namespace distmm
