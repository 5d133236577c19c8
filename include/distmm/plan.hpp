#pragma once
// A strategy as a plan: set up once for a shape and a communicator (parameters placed, every
// buffer allocated and populated), then executed any number of times with no allocation.
//
// Layout. A distributed GEMM shards A and C by rows, and a row shard is one contiguous block
// only in row-major order. So plans take A and C row-major: as Armadillo (column-major)
// matrices they are passed transposed, a_t = A^T (k x m) and c_t = C^T (n x m), whose storage
// is A's and C's rows one after another. B stays column-major (k x n), so FSDP's column
// shards of B are contiguous too. Every byte then moves once: rank r's rows of A go straight
// from the root's A into rank r's buffer, the root's own rows never leave A (in-place
// scatterv and gatherv), the root multiplies its rows where they are, and C's row blocks land
// directly in the root's C. Each rank's product is one BLAS call on these layouts:
// C_r^T (n x m_r) = B^T A_r^T.
//
//   root (rank 0)          a_t = [A_0^T | A_1^T | A_2^T]    c_t = [C_0^T | C_1^T | C_2^T]
//   rank r > 0             a_rows_t = A_r^T (k x m_r)       c_rows_t = C_r^T (n x m_r)
#include <armadillo>
#include <cstdint>
#include <memory>
#include <vector>

#include "distmm/communicator.hpp"
#include "distmm/shape.hpp"
#include "distmm/sharding.hpp"
#include "distmm/strategy.hpp"

namespace distmm {

// Tag of the plan constructors that allocate the parameters but leave placing them to the
// caller (resuming from a checkpoint: each rank reads its own columns).
struct Unplaced {
  explicit Unplaced() = default;
};
inline constexpr Unplaced unplaced{};

// Bytes of plans' buffers kept for the life of the process because their communicator was
// abandoned (Communicator::abandoned()) before the plan was destroyed: a collective left
// unfinished may still write into them.
std::uint64_t abandoned_plan_bytes();

template <Element T>
class MatmulPlan {
 public:
  virtual ~MatmulPlan();
  MatmulPlan(const MatmulPlan&) = delete;
  MatmulPlan& operator=(const MatmulPlan&) = delete;

  // C = A B. On the root: a_t is A^T (k x m) and c_t, already n x m, receives C^T; other ranks
  // pass empty matrices. Collective: every rank of the communicator calls it.
  virtual void execute(const arma::Mat<T>& a_t, arma::Mat<T>& c_t) = 0;

  const MatmulShape& shape() const { return shape_; }
  Communicator& comm() const { return comm_; }
  int root() const { return root_; }
  // Bytes of memory the plan allocated at setup on this rank.
  std::uint64_t allocated_bytes() const { return allocated_; }
  // Of them, the bytes of B (or of the part of it this rank keeps): written when the
  // parameters are placed, where setup only populates the rest.
  std::uint64_t parameter_bytes() const { return parameters_; }

 protected:
  MatmulPlan(Communicator& comm, const MatmulShape& shape, int root);
  // A fresh (populated) rows x cols matrix, counted in allocated_bytes(); in a dry run
  // (RankStats::dry()) a matrix of that size with no memory behind it.
  arma::Mat<T> allocate(std::size_t rows, std::size_t cols);
  // The same, for the parameters: B or this rank's part of it.
  arma::Mat<T> allocate_parameters(std::size_t rows, std::size_t cols);
  // The root's a_t and c_t have the plan's shape (throws otherwise).
  void check_root_operands(const arma::Mat<T>& a_t, const arma::Mat<T>& c_t) const;
  // Runs f(), this rank's local multiply of a rows x inner by an inner x cols matrix, timed
  // and recorded (counters, trace, the time model's events); a dry run records it without
  // running f.
  template <class F>
  void multiply(std::size_t rows, std::size_t inner, std::size_t cols, F&& f) {
    record_multiply(comm_.stats(), timed_multiply(comm_.stats(), rows, inner, cols, f));
  }

 private:
  Communicator& comm_;
  MatmulShape shape_;
  int root_;
  std::uint64_t allocated_ = 0, parameters_ = 0;
  // The memory behind allocate()'s matrices, which are views of it: the plan's members go
  // with the plan (or as its constructor unwinds), this with the base, kept instead where
  // the communicator was abandoned.
  std::vector<std::unique_ptr<arma::Mat<T>>> storage_;
};

// The plans that shard A and C by rows (dp, fsdp, fsdp-overlap, hsdp): rank r multiplies
// its rows of A by (all of) B. execute() scatters A's rows, multiplies, gathers C's rows.
template <Element T>
class RowShardedPlan : public MatmulPlan<T> {
 public:
  void execute(const arma::Mat<T>& a_t, arma::Mat<T>& c_t) final;

  // This rank's rows alone, for callers whose ranks already hold them (training):
  // c_rows_t (n x m_r) = (A_r B)^T from a_rows_t (k x m_r), m_r = rows().count. Collective.
  void execute_rows(const T* a_rows_t, T* c_rows_t);

  // This rank's rows of A and C.
  Shard rows() const { return rows_; }

 protected:
  RowShardedPlan(Communicator& comm, const MatmulShape& shape, int root);
  // The strategy's part: this rank's C_r^T from A_r^T (both with leading dimensions k and n).
  virtual void multiply_rows(const T* a_rows_t, T* c_rows_t) = 0;

 private:
  Shard rows_;
  std::vector<std::size_t> a_counts_, c_counts_;
  arma::Mat<T> a_rows_t_, c_rows_t_;  // this rank's rows, on ranks other than the root
};

// What a plan of strategy `s` allocates at setup on rank `rank` of `ranks` (its
// allocated_bytes() and parameter_bytes()), for elements of
// `element_bytes`: from the plan set up dry (dry_run.hpp), so a program can check that a
// problem fits before allocating anything.
struct PlanMemory {
  std::uint64_t allocated_bytes = 0, parameter_bytes = 0;
};
PlanMemory plan_memory(const Strategy& s, const MatmulShape& shape, int ranks, int rank,
                       std::size_t element_bytes, int root = 0,
                       const StrategySettings& settings = {});
// Its allocated_bytes.
std::uint64_t plan_allocation(const Strategy& s, const MatmulShape& shape, int ranks, int rank,
                              std::size_t element_bytes, int root = 0,
                              const StrategySettings& settings = {});

// Sets up strategy `s` (Strategy::plan): B (k x n) is read on `root` only; `settings` are the
// strategy's options (hsdp's replicas), absent ones defaulted.
template <Element T>
std::unique_ptr<MatmulPlan<T>> make_plan(const Strategy& s, Communicator& comm,
                                         const MatmulShape& shape, const arma::Mat<T>& b,
                                         int root = 0, const StrategySettings& settings = {}) {
  return s.plan(comm, shape, b, root, settings);
}

}  // namespace distmm
