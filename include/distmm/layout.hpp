#pragma once
// The distributed layout (--layout distributed): each rank starts with its own blocks of A and
// B and ends with its own block of C, as ScaLAPACK's PDGEMM is measured and as a layer inside
// a network holds its activations. The strategy says which blocks (Strategy::
// distributed_blocks); every element of A, B and C is on exactly one rank, and any copy a
// strategy needs beyond its blocks is communication in each execution (dp under this layout
// gathers B as fsdp does).
#include <armadillo>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "distmm/communicator.hpp"
#include "distmm/shape.hpp"
#include "distmm/sharding.hpp"

namespace distmm {

// Rows [row0, row0 + rows) and columns [col0, col0 + cols) of a matrix.
struct Block {
  std::size_t row0 = 0, rows = 0, col0 = 0, cols = 0;
  std::size_t elements() const { return rows * cols; }
  bool operator==(const Block&) const = default;
};

// One rank's blocks of A (m x k), B (k x n) and C (m x n).
struct BlockLayout {
  Block a, b, c;
  bool operator==(const BlockLayout&) const = default;
};

// The row-sharded strategies' blocks: rank r of P has A's and C's rows shard_of(m, P, r)
// (all their columns) and B's columns shard_of(n, P, r) (all its rows).
inline BlockLayout row_sharded_blocks(const MatmulShape& s, int ranks, int rank) {
  const Shard rows = shard_of(s.m, ranks, rank), cols = shard_of(s.n, ranks, rank);
  return {{rows.offset, rows.count, 0, s.k},
          {0, s.k, cols.offset, cols.count},
          {rows.offset, rows.count, 0, s.n}};
}

// A plan under the distributed layout: set up once with this rank's block of B, executed
// many times with no allocation.
template <Element T>
class DistributedPlan {
 public:
  virtual ~DistributedPlan() = default;
  DistributedPlan(const DistributedPlan&) = delete;
  DistributedPlan& operator=(const DistributedPlan&) = delete;

  // This rank's C block from its A block, both row-major as the root layout's plans take A
  // and C (plan.hpp): a_t is A's block transposed (a.cols x a.rows), c_t receives C's block
  // transposed (c.cols x c.rows). Collective.
  virtual void execute(const arma::Mat<T>& a_t, arma::Mat<T>& c_t) = 0;

  const BlockLayout& blocks() const { return blocks_; }
  const MatmulShape& shape() const { return shape_; }
  Communicator& comm() const { return comm_; }
  // Bytes of memory the plan allocated at setup on this rank (B's block, held as the strategy
  // holds it, and its buffers).
  std::uint64_t allocated_bytes() const { return allocated_; }

 protected:
  DistributedPlan(Communicator& comm, const MatmulShape& shape, const BlockLayout& blocks)
      : comm_(comm), shape_(shape), blocks_(blocks) {}
  void count_allocated(std::uint64_t bytes) { allocated_ += bytes; }
  // a_t and c_t have this rank's blocks' sizes (throws Error otherwise).
  void check_blocks(const arma::Mat<T>& a_t, const arma::Mat<T>& c_t) const;

 private:
  Communicator& comm_;
  MatmulShape shape_;
  BlockLayout blocks_;
  std::uint64_t allocated_ = 0;
};

// Copies block `b` of the full matrix x (column-major) into a fresh b.rows x b.cols matrix;
// `transposed`: its transpose (b.cols x b.rows), the layout of A's and C's blocks.
template <Element T>
arma::Mat<T> block_of(const arma::Mat<T>& x, const Block& b, bool transposed) {
  // An empty block may start one past the matrix's end, which submat() refuses.
  if (b.elements() == 0)
    return arma::Mat<T>(transposed ? b.cols : b.rows, transposed ? b.rows : b.cols);
  const arma::Mat<T> part = x.submat(b.row0, b.col0, arma::size(b.rows, b.cols));
  return transposed ? arma::Mat<T>(part.t()) : part;
}

// The random problem's entry (row, col) of matrix `which` (0: A, 1: B) for `seed`: uniform in
// [-1, 1), a function of its position alone, so a rank draws its own block bit-identical to
// the same block of the whole matrix drawn anywhere else.
double random_entry(std::uint64_t seed, int which, std::size_t row, std::size_t col);

// Block `b` of the random matrix `which` (random_entry), as a b.rows x b.cols matrix, or its
// transpose when `transposed` (the layout of A's and C's blocks).
template <Element T>
arma::Mat<T> random_block(std::uint64_t seed, int which, const Block& b, bool transposed) {
  arma::Mat<T> x(transposed ? b.cols : b.rows, transposed ? b.rows : b.cols);
  for (std::size_t j = 0; j < x.n_cols; ++j) {
    for (std::size_t i = 0; i < x.n_rows; ++i) {
      const std::size_t row = b.row0 + (transposed ? j : i), col = b.col0 + (transposed ? i : j);
      x(i, j) = static_cast<T>(random_entry(seed, which, row, col));
    }
  }
  return x;
}

// The whole rows x cols matrix on `root` from every rank's block (`mine`, held transposed in
// mine_t as blocks of A and C are); an empty matrix elsewhere. Collective; for checking and
// writing a distributed result, outside the timing.
template <Element T>
arma::Mat<T> assemble_blocks(Communicator& comm, const Block& mine, const arma::Mat<T>& mine_t,
                             std::size_t rows, std::size_t cols, int root);

}  // namespace distmm
