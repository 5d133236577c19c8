#pragma once
// Grid C = A @ B on a PM x PN x PK grid of ranks: the 2-D (PK = 1, SUMMA), 2.5-D and 3-D
// decompositions of the m x n x k iteration space (Agarwal et al. 1995; Solomonik and Demmel,
// Euro-Par 2011; COSMA, Kwasniewski et al., SC'19).
//
// Rank r < PM PN PK sits at (i, j, l) with l = r / (PM PN), i = r % (PM PN) / PN, j = r % PN;
// the ranks beyond PM PN PK are idle. A's rows split into PM blocks R_i, B's columns into PN
// blocks N_j, the inner dimension into PK layers K_l. Rank (i, j, l) computes the partial
// product C_ij^(l) = A(R_i, K_l) B(K_l, N_j), and C_ij is the sum over l.
//
// Within a layer, a PM x PN grid runs SUMMA: A(R_i, K_l) is held by the PN ranks of grid row
// (i, l), each a contiguous part of K_l by columns; B(K_l, N_j) by the PM ranks of grid column
// (j, l), each a part of K_l by rows. For each panel of K_l (at most `panel` wide, never across
// an owner's boundary) the owner of its A part broadcasts it along the grid row and the owner
// of its B part along the grid column, and every rank adds A_panel B_panel to its C block; the
// next panel's broadcasts run while this panel is multiplied. The PK partial blocks of C_ij
// are then reduced over the layers.
//
//   2 x 2 x 1 (SUMMA)        2 x 1 x 2 (two layers)
//     rank 0: C_00  rank 1: C_01      layer 0: rank 0 C_0^(0), rank 1 C_1^(0)
//     rank 2: C_10  rank 3: C_11      layer 1: rank 2 C_0^(1), rank 3 C_1^(1)  reduce over l
//
// Per execution rank (i, j, l) receives about |R_i||K_l|(1 - 1/PN) words of A,
// |K_l||N_j|(1 - 1/PM) of B and, in the reduction, |R_i||N_j|(1 - 1/PK) of C: with m = n = k
// about 2 n^2 / sqrt(P) on a square 2-D grid, 2 n^2 / sqrt(cP) + c n^2 / P with c layers, and
// 3 n^2 / P^(2/3) on a cube. It holds its parts of A and B, its C block |R_i||N_j| and two
// pairs of panels.
//
// The root layout (the others' layout: A and B on the root, C gathered there): B's parts are
// placed at setup; each execution sends each rank its part of A and gathers each C_ij (summed
// onto layer 0) into the root's C, moving each element once, through collectives over all the
// ranks (per block row of A and C, the ranks outside it taking nothing).
//
// The distributed layout (layout.hpp, grid_blocks): each rank starts with its parts of A and B
// and ends with C_ij, or with PK layers its share of C_ij's rows: the layers' partial blocks
// are reduce-scattered over the fibre instead of reduced onto layer 0. Nothing else moves but
// the panels; the owner of an A panel packs it from its block (held as A^T) before sending.
//
// Training (grid_train.cpp, 2-D grids): X is A and W is B, each placed once; the forward is
// the layer's SUMMA and the backward fetches the same panels again, reducing the gradient's
// panels along grid columns and the input gradient's along grid rows (Optimus, Xu et al. 2021).
#include <armadillo>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "distmm/layout.hpp"
#include "distmm/plan.hpp"
#include "distmm/stats.hpp"

namespace distmm {

class HelperThread;

struct Grid {
  int pm = 1, pn = 1, pk = 1;  // PM x PN x PK
  int used() const { return pm * pn * pk; }
  int layer_of(int r) const { return r / (pm * pn); }
  int row_of(int r) const { return r % (pm * pn) / pn; }
  int col_of(int r) const { return r % pn; }
  int rank_at(int i, int j, int l) const { return l * pm * pn + i * pn + j; }
  bool operator==(const Grid&) const = default;
};

// "PMxPNxPK".
std::string grid_text(const Grid& g);

// Rank `rank`'s blocks under the distributed layout: A(R_i, its part of K_l), B(its part of
// K_l, N_j), and C(R_i, N_j), or with PK > 1 rows shard_of(|R_i|, PK, l) of it; idle ranks
// hold nothing.
BlockLayout grid_blocks(const Grid& g, const MatmulShape& shape, int rank);
// Parses "PMxPNxPK" (or "PMxPN", PK = 1) for a run of `ranks` ranks: each side at least 1 and
// the product at most `ranks`. InputError naming --grid otherwise.
Grid parse_grid(std::string_view text, int ranks);

// What a grid costs a rank per execution, the largest over the ranks other than the root
// (which receives all of C whatever the grid): words received (root layout: its part of A, the
// panels it does not own, on layer 0 the other layers' C blocks; distributed: the panels it
// does not own and its rows of C_ij from the other layers), and elements held at the peak
// (parts of A and B, the C block, the panels). The lower bound these are compared with is
// docs/grid.md's (bench/grid_table.py).
struct GridCost {
  double words = 0;
  double held_elements = 0;
};
GridCost grid_cost(const Grid& g, const MatmulShape& shape, std::size_t panel,
                   bool distributed = false);

// `--grid auto`: the grid that moves the fewest words per rank (grid_cost) among those whose
// ranks hold at most `memory_per_rank` bytes (0: no limit) and leave at most 5 % of the ranks
// idle, no side longer than its dimension, at most `most_layers` layers (0: any); ties go to
// more ranks, then less memory. When none fits, the one that holds the least (fits = false).
struct GridChoice {
  Grid grid;
  GridCost cost;
  bool fits = true;
};
GridChoice choose_grid(const MatmulShape& shape, int ranks, std::size_t element_bytes,
                       double memory_per_rank, std::size_t panel, bool distributed = false,
                       int most_layers = 0);

// --memory-per-rank's bytes: "2147483648", "2GiB", "512MiB", "1.5G", "64KiB" (InputError
// naming the flag otherwise).
double parse_memory_bytes(const std::string& text);

// The panel width when none is given.
inline constexpr std::size_t kDefaultPanel = 256;

template <Element T>
class GridPlan final : public MatmulPlan<T> {
 public:
  // Places B's parts (B k x n, read on `root` only) and allocates every buffer. Collective.
  GridPlan(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b, const Grid& grid,
           std::size_t panel, int root = 0);
  // The distributed layout's plan: B's block (grid_blocks(...).b, b_block k_part x n_j) is
  // this rank's own; nothing is placed from a root.
  GridPlan(Communicator& comm, const MatmulShape& shape, Unplaced, const arma::Mat<T>& b_block,
           const Grid& grid, std::size_t panel);
  // The root layout's plan with B's parts left unset (a training step resuming from a
  // checkpoint reads its part of W into them).
  GridPlan(Communicator& comm, const MatmulShape& shape, Unplaced, const Grid& grid,
           std::size_t panel, int root = 0);
  ~GridPlan() override;

  void execute(const arma::Mat<T>& a_t, arma::Mat<T>& c_t) override;
  // The distributed layout's execution: c_t (C's block of grid_blocks, transposed) from a_t
  // (A's block, transposed). Collective; only for a plan made with Unplaced.
  void execute_blocks(const arma::Mat<T>& a_t, arma::Mat<T>& c_t);

  const Grid& grid() const { return grid_; }
  bool idle() const { return this->comm().rank() >= grid_.used(); }

 private:
  // The training step drives the plan's panels itself (grid_train.cpp).
  template <Element U>
  friend class GridStep;
  struct Panel {
    std::size_t width, a_offset, b_offset;  // offsets within the owners' parts
    int a_owner, b_owner;                   // grid column j, grid row i
  };
  // A panel's operands: A's part (root layout: m_i x width, column-major; distributed: A^T's
  // rows, width x m_i with leading dimension a_ld) and B^T's (n_j x width).
  struct Operands {
    const T* a = nullptr;
    const T* bt = nullptr;
    std::size_t a_ld = 0;
  };
  GridPlan(Communicator& comm, const MatmulShape& shape, const Grid& grid, std::size_t panel,
           int root, bool distributed);
  void set_up_panels(std::size_t panel);
  void place_b(const arma::Mat<T>& b);
  void scatter_a(const arma::Mat<T>& a_t);
  // The layer's partial product: C_ij^(l) into c_block_ (root layout), or its transpose into
  // `c_t` (distributed; n_j x m_i).
  void summa(T* c_t);
  void gather_c(arma::Mat<T>& c_t);
  // Broadcasts panel t's parts into slot `slot`; returns where they are.
  Operands fetch(std::size_t t, int slot);
  const T* a_panel_of_block(const Panel& p, int slot);
  // counts_, one entry a rank: the inner columns each rank takes of block row `block` of A
  // (of_a) or the inner rows of block column `block` of B; C's columns of block row i that
  // layer 0's ranks give.
  std::span<const std::size_t> inner_counts(bool of_a, int block);
  std::span<const std::size_t> c_counts(int i);

  Grid grid_;
  bool distributed_ = false;
  const T* a_block_t_ = nullptr;  // distributed: this execution's A^T block
  int i_ = 0, j_ = 0, l_ = 0;
  Shard rows_, cols_, layer_, a_part_, b_part_;  // R_i, N_j, K_l; this rank's parts of K_l
  std::unique_ptr<Communicator> row_comm_, col_comm_, fiber_comm_;
  std::vector<Panel> panels_;
  std::vector<std::size_t> counts_;  // one entry a rank
  arma::Mat<T> a_part_m_;            // root layout: A(R_i, this rank's columns), column-major
  arma::Mat<T> bt_part_;             // B(this rank's rows, N_j)^T, column-major
  // C_ij, the partial sum over this layer, column-major (m_i x n_j); distributed with PK > 1
  // its transpose (n_j x m_i), before the reduce-scatter.
  arma::Mat<T> c_block_;
  arma::Mat<T> a_panel_[2], bt_panel_[2];
  std::optional<ParameterHold> held_;
  std::unique_ptr<HelperThread> helper_;
};

}  // namespace distmm
