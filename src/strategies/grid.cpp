#include "distmm/strategies/grid.hpp"

#include <algorithm>
#include <charconv>
#include <functional>
#include <string>

#include "distmm/error.hpp"
#include "distmm/strategy_of.hpp"
#include "helper_thread.hpp"
#include "local_multiply.hpp"
#include "part_view.hpp"
#include "strategies/builtin.hpp"

namespace distmm {
namespace {

Communicator::ColorKey key(bool member, int color, int key) {
  return member ? Communicator::ColorKey{color, key} : Communicator::ColorKey{};
}

}  // namespace

template <Element T>
GridPlan<T>::GridPlan(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b,
                      const Grid& grid, std::size_t panel, int root)
    : GridPlan(comm, shape, grid, panel, root, false) {
  place_b(b);
}

template <Element T>
GridPlan<T>::GridPlan(Communicator& comm, const MatmulShape& shape, Unplaced,
                      const arma::Mat<T>& b_block, const Grid& grid, std::size_t panel)
    : GridPlan(comm, shape, grid, panel, 0, true) {
  const Block b = grid_blocks(grid, shape, comm.rank()).b;
  check_operand(b_block, b.rows, b.cols, "B's block", comm.rank());
  // Same size: no allocation. (Armadillo's transpose of an empty block reads a null pointer.)
  if (!comm.stats().dry() && b_block.n_elem > 0) bt_part_ = b_block.t();
}

template <Element T>
GridPlan<T>::GridPlan(Communicator& comm, const MatmulShape& shape, Unplaced, const Grid& grid,
                      std::size_t panel, int root)
    : GridPlan(comm, shape, grid, panel, root, false) {}

template <Element T>
GridPlan<T>::GridPlan(Communicator& comm, const MatmulShape& shape, const Grid& grid,
                      std::size_t panel, int root, bool distributed)
    : MatmulPlan<T>(comm, shape, root),
      grid_(grid),
      distributed_(distributed),
      counts_(static_cast<std::size_t>(comm.size()), 0) {
  const int me = comm.rank();
  if (grid.pm < 1 || grid.pn < 1 || grid.pk < 1 || grid.used() > comm.size()) {
    throw InputError("--grid " + grid_text(grid) + ": needs " + std::to_string(grid.used()) +
                         " ranks, the run has " + std::to_string(comm.size()),
                     -1, "--grid");
  }
  // Every rank knows every rank's place (a dry run sees one rank at a time).
  const Grid g = grid_;
  row_comm_ = comm.split(
      [g](int r) { return key(r < g.used(), g.layer_of(r) * g.pm + g.row_of(r), g.col_of(r)); });
  col_comm_ = comm.split(
      [g](int r) { return key(r < g.used(), g.layer_of(r) * g.pn + g.col_of(r), g.row_of(r)); });
  fiber_comm_ = comm.split(
      [g](int r) { return key(r < g.used(), g.row_of(r) * g.pn + g.col_of(r), g.layer_of(r)); });
  if (me < g.used()) {
    i_ = g.row_of(me), j_ = g.col_of(me), l_ = g.layer_of(me);
    rows_ = shard_of(shape.m, g.pm, i_);
    cols_ = shard_of(shape.n, g.pn, j_);
    layer_ = shard_of(shape.k, g.pk, l_);
    a_part_ = shard_of(layer_.count, g.pn, j_);
    b_part_ = shard_of(layer_.count, g.pm, i_);
    set_up_panels(std::max<std::size_t>(1, panel));
    bt_part_ = this->allocate_parameters(cols_.count, b_part_.count);
    // Distributed, A's part is the caller's block and C_ij is written into the caller's C
    // (with one layer) or reduce-scattered from c_block_.
    if (!distributed) a_part_m_ = this->allocate(rows_.count, a_part_.count);
    if (!distributed) {
      c_block_ = this->allocate(rows_.count, cols_.count);
    } else if (g.pk > 1) {
      c_block_ = this->allocate(cols_.count, rows_.count);
    }
    std::size_t widest = 0;
    for (const Panel& p : panels_) widest = std::max(widest, p.width);
    // Panels arrive from other ranks only where a grid row (column) has several: two slots,
    // one being multiplied while the next arrives.
    for (std::size_t s = 0; s < std::min<std::size_t>(2, panels_.size()); ++s) {
      if (g.pn > 1) a_panel_[s] = this->allocate(rows_.count, widest);
      if (g.pm > 1) bt_panel_[s] = this->allocate(cols_.count, widest);
    }
    // A dry run multiplies nothing: no thread to hand it to.
    if (!comm.stats().dry() && panels_.size() > 1) helper_ = std::make_unique<HelperThread>();
  }
  held_.emplace(comm.stats(), bt_part_.n_elem * sizeof(T), true);
}

template <Element T>
GridPlan<T>::~GridPlan() = default;

// The layer cut where the owner of A's part or of B's part changes, then into pieces at most
// `panel` wide: each panel comes whole from one rank of the grid row and one of the column.
template <Element T>
void GridPlan<T>::set_up_panels(std::size_t panel) {
  const Grid& g = grid_;
  const std::size_t k = layer_.count;
  std::vector<std::size_t> cuts{0, k};
  for (int x = 1; x < g.pn; ++x) cuts.push_back(shard_of(k, g.pn, x).offset);
  for (int x = 1; x < g.pm; ++x) cuts.push_back(shard_of(k, g.pm, x).offset);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
    const int a_owner = shard_holding(k, g.pn, cuts[c]);
    const int b_owner = shard_holding(k, g.pm, cuts[c]);
    const std::size_t a_from = shard_of(k, g.pn, a_owner).offset;
    const std::size_t b_from = shard_of(k, g.pm, b_owner).offset;
    for (std::size_t at = cuts[c]; at < cuts[c + 1]; at += panel) {
      panels_.push_back(
          {std::min(panel, cuts[c + 1] - at), at - a_from, at - b_from, a_owner, b_owner});
    }
  }
}

template <Element T>
std::span<const std::size_t> GridPlan<T>::inner_counts(bool of_a, int block) {
  const Grid& g = grid_;
  const int parts = of_a ? g.pn : g.pm;  // who splits each layer's part of the block
  std::fill(counts_.begin(), counts_.end(), 0);
  for (int l = 0; l < g.pk; ++l) {
    const std::size_t layer = shard_of(this->shape().k, g.pk, l).count;
    for (int x = 0; x < parts; ++x) {
      const int r = of_a ? g.rank_at(block, x, l) : g.rank_at(x, block, l);
      counts_[static_cast<std::size_t>(r)] = shard_of(layer, parts, x).count;
    }
  }
  return counts_;
}

template <Element T>
std::span<const std::size_t> GridPlan<T>::c_counts(int i) {
  const Grid& g = grid_;
  std::fill(counts_.begin(), counts_.end(), 0);
  for (int j = 0; j < g.pn; ++j)
    counts_[static_cast<std::size_t>(g.rank_at(i, j, 0))] =
        shard_of(this->shape().n, g.pn, j).count;
  return counts_;
}

// B's block column j is B^T's rows N_j, row-major (n_j x k): its ranks in (l, i) order take
// consecutive columns of it, their rows of B.
template <Element T>
void GridPlan<T>::place_b(const arma::Mat<T>& b) {
  Communicator& comm = this->comm();
  const MatmulShape& s = this->shape();
  const bool at_root = comm.rank() == this->root();
  if (at_root && !comm.stats().dry()) check_operand(b, s.k, s.n, "grid: B", comm.rank());
  for (int j = 0; j < grid_.pn; ++j) {
    const Shard cols = shard_of(s.n, grid_.pn, j);
    if (cols.count == 0 || s.k == 0) continue;
    const RowMajor block{cols.count, s.k};
    const bool mine = !idle() && j == j_;
    arma::Mat<T> into = part(bt_part_.memptr(), 0, mine ? bt_part_.n_elem : 0);
    const arma::Mat<T> from = part(b.memptr(), cols.offset * s.k, at_root ? cols.count * s.k : 0);
    comm.scatterv_columns(from, block, inner_counts(false, j), into, this->root());
  }
}

template <Element T>
void GridPlan<T>::execute(const arma::Mat<T>& a_t, arma::Mat<T>& c_t) {
  if (distributed_) throw Error("grid: a distributed-layout plan runs execute_blocks()");
  if (this->comm().rank() == this->root()) this->check_root_operands(a_t, c_t);
  scatter_a(a_t);
  if (!idle()) {
    summa(nullptr);
    // The layers' partial blocks summed onto layer 0.
    if (grid_.pk > 1 && c_block_.n_elem > 0) fiber_comm_->reduce_sum(c_block_, 0);
  }
  gather_c(c_t);
}

template <Element T>
void GridPlan<T>::execute_blocks(const arma::Mat<T>& a_t, arma::Mat<T>& c_t) {
  if (!distributed_) throw Error("grid: a root-layout plan runs execute()");
  if (idle()) return;
  a_block_t_ = a_t.memptr();
  if (grid_.pk == 1) {
    summa(c_t.memptr());
    return;
  }
  summa(c_block_.memptr());
  // Layer l keeps rows shard_of(m_i, PK, l) of C_ij: columns of C_ij^T, contiguous.
  if (c_block_.n_elem == 0) return;
  std::fill(counts_.begin(), counts_.end(), 0);
  for (int l = 0; l < grid_.pk; ++l)
    counts_[static_cast<std::size_t>(l)] = cols_.count * shard_of(rows_.count, grid_.pk, l).count;
  fiber_comm_->reduce_scatter_sum(
      c_block_, c_t,
      std::span<const std::size_t>(counts_).first(static_cast<std::size_t>(grid_.pk)));
}

// A's block row i is rows R_i of A, row-major (m_i x k): its ranks in (l, j) order take
// consecutive columns of it.
template <Element T>
void GridPlan<T>::scatter_a(const arma::Mat<T>& a_t) {
  Communicator& comm = this->comm();
  const MatmulShape& s = this->shape();
  const bool at_root = comm.rank() == this->root();
  for (int i = 0; i < grid_.pm; ++i) {
    const Shard rows = shard_of(s.m, grid_.pm, i);
    if (rows.count == 0 || s.k == 0) continue;
    const bool mine = !idle() && i == i_;
    arma::Mat<T> into = part(a_part_m_.memptr(), 0, mine ? a_part_m_.n_elem : 0);
    const arma::Mat<T> from = part(a_t.memptr(), rows.offset * s.k, at_root ? rows.count * s.k : 0);
    comm.scatterv_columns(from, RowMajor{rows.count, s.k}, inner_counts(true, i), into,
                          this->root());
  }
}

template <Element T>
typename GridPlan<T>::Operands GridPlan<T>::fetch(std::size_t t, int slot) {
  const Panel& p = panels_[t];
  const std::size_t mi = rows_.count, nj = cols_.count;
  Operands out;
  if (distributed_) {
    out.a = a_panel_of_block(p, slot);
    out.a_ld = grid_.pn == 1 ? a_part_.count : p.width;
  } else {
    // A's panel: where it is on its owner, into the slot elsewhere; broadcast along the row.
    arma::Mat<T> a = (grid_.pn == 1 || p.a_owner == j_)
                         ? part(a_part_m_.memptr(), p.a_offset * mi, mi * p.width)
                         : part(a_panel_[slot].memptr(), 0, mi * p.width);
    if (grid_.pn > 1 && mi > 0) row_comm_->broadcast(a, p.a_owner);
    out.a = a.memptr();
    out.a_ld = mi;
  }
  arma::Mat<T> bt = (grid_.pm == 1 || p.b_owner == i_)
                        ? part(bt_part_.memptr(), p.b_offset * nj, nj * p.width)
                        : part(bt_panel_[slot].memptr(), 0, nj * p.width);
  if (grid_.pm > 1 && nj > 0) col_comm_->broadcast(bt, p.b_owner);
  out.bt = bt.memptr();
  return out;
}

// Distributed: A's panel is rows [a_offset, a_offset + width) of the owner's A^T block
// (a_part x m_i). Alone in its grid row the rank reads them in place; otherwise the owner packs
// them into the slot (width x m_i) and broadcasts that along the row.
template <Element T>
const T* GridPlan<T>::a_panel_of_block(const Panel& p, int slot) {
  const std::size_t mi = rows_.count, kj = a_part_.count;
  if (grid_.pn == 1) return a_block_t_ == nullptr ? nullptr : a_block_t_ + p.a_offset;
  T* into = a_panel_[slot].memptr();
  if (p.a_owner == j_ && into != nullptr && a_block_t_ != nullptr) {
    for (std::size_t c = 0; c < mi; ++c) {
      std::copy_n(a_block_t_ + c * kj + p.a_offset, p.width, into + c * p.width);
    }
  }
  if (mi > 0) row_comm_->broadcast(part(into, 0, mi * p.width), p.a_owner);
  return into;
}

// The layer's panels, each multiplied while the next one's broadcasts run.
template <Element T>
void GridPlan<T>::summa(T* c_t) {
  RankStats& stats = this->comm().stats();
  const std::size_t mi = rows_.count, nj = cols_.count;
  // Root layout: C_ij (m_i x n_j) += A_panel B_panel; distributed: C_ij^T (n_j x m_i) +=
  // B_panel^T A_panel^T, into the caller's C block or the one reduce-scattered.
  T* c = distributed_ ? c_t : c_block_.memptr();
  // A layer with no inner dimension adds nothing.
  if (panels_.empty() && !stats.dry()) std::fill_n(c, mi * nj, T(0));
  // B's panels from other ranks are parameters held while the execution runs.
  const ParameterHold panels(stats, (bt_panel_[0].n_elem + bt_panel_[1].n_elem) * sizeof(T), false);
  Operands current = panels_.empty() ? Operands{} : fetch(0, 0);
  TraceEvent multiply;
  std::size_t t = 0;
  const std::function<void()> task = [&] {
    const std::size_t w = panels_[t].width;
    multiply = timed_multiply(stats, mi, w, nj, [&] {
      if (distributed_) {
        gemm(false, false, nj, mi, w, current.bt, nj, current.a, current.a_ld, c, nj, t > 0);
      } else {
        gemm(false, true, mi, nj, w, current.a, mi, current.bt, nj, c, mi, t > 0);
      }
    });
  };
  for (; t < panels_.size(); ++t) {
    if (helper_) {
      helper_->run(task);
    } else {
      task();
    }
    Operands next = current;
    if (t + 1 < panels_.size()) {
      try {
        next = fetch(t + 1, static_cast<int>((t + 1) % 2));
      } catch (...) {
        if (helper_) helper_->wait_before_unwinding();
        throw;
      }
    }
    if (helper_) helper_->wait();
    // Beside the next panel's broadcasts, where fetching it broadcasts anything (a grid of
    // layers alone, 1x1xPK, reads its panels in place: its multiplies run back to back).
    multiply.overlapped =
        t + 1 < panels_.size() && ((grid_.pn > 1 && mi > 0) || (grid_.pm > 1 && nj > 0));
    record_multiply(stats, multiply);
    current = next;
  }
}

// C's block row i is rows R_i of C, row-major (m_i x n): layer 0's ranks of it in j order give
// consecutive columns of it.
template <Element T>
void GridPlan<T>::gather_c(arma::Mat<T>& c_t) {
  Communicator& comm = this->comm();
  const MatmulShape& s = this->shape();
  const bool at_root = comm.rank() == this->root();
  for (int i = 0; i < grid_.pm; ++i) {
    const Shard rows = shard_of(s.m, grid_.pm, i);
    if (rows.count == 0 || s.n == 0) continue;
    const bool mine = !idle() && i == i_ && l_ == 0;
    const arma::Mat<T> from = part(c_block_.memptr(), 0, mine ? c_block_.n_elem : 0);
    arma::Mat<T> into = part(c_t.memptr(), rows.offset * s.n, at_root ? rows.count * s.n : 0);
    comm.gatherv_columns(from, into, RowMajor{rows.count, s.n}, c_counts(i), this->root());
  }
}

template class GridPlan<double>;
template class GridPlan<float>;

BlockLayout grid_blocks(const Grid& g, const MatmulShape& s, int rank) {
  if (rank >= g.used()) return {};
  const int i = g.row_of(rank), j = g.col_of(rank), l = g.layer_of(rank);
  const Shard rows = shard_of(s.m, g.pm, i), cols = shard_of(s.n, g.pn, j);
  const Shard layer = shard_of(s.k, g.pk, l);
  const Shard a_part = shard_of(layer.count, g.pn, j), b_part = shard_of(layer.count, g.pm, i);
  const Shard c_rows = shard_of(rows.count, g.pk, l);
  return {{rows.offset, rows.count, layer.offset + a_part.offset, a_part.count},
          {layer.offset + b_part.offset, b_part.count, cols.offset, cols.count},
          {rows.offset + c_rows.offset, c_rows.count, cols.offset, cols.count}};
}

namespace {

template <Element T>
class GridDistributedPlan final : public DistributedPlan<T> {
 public:
  GridDistributedPlan(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b_block,
                      const Grid& grid, std::size_t panel)
      : DistributedPlan<T>(comm, shape, grid_blocks(grid, shape, comm.rank())),
        plan_(comm, shape, unplaced, b_block, grid, panel) {
    this->count_allocated(plan_.allocated_bytes());
  }
  void execute(const arma::Mat<T>& a_t, arma::Mat<T>& c_t) override {
    this->check_blocks(a_t, c_t);
    plan_.execute_blocks(a_t, c_t);
  }

 private:
  GridPlan<T> plan_;
};

}  // namespace

}  // namespace distmm

namespace distmm {

double parse_memory_bytes(const std::string& text) {
  const auto bad = [&] {
    return InputError(
        "--memory-per-rank " + escaped(text) + ": expected bytes, as 2000000000 or 2GiB", -1,
        "--memory-per-rank");
  };
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || !(value > 0)) throw bad();
  const std::string unit(end, text.data() + text.size());
  static const std::pair<const char*, double> units[] = {{"", 1},
                                                         {"B", 1},
                                                         {"K", 1e3},
                                                         {"M", 1e6},
                                                         {"G", 1e9},
                                                         {"T", 1e12},
                                                         {"KB", 1e3},
                                                         {"MB", 1e6},
                                                         {"GB", 1e9},
                                                         {"TB", 1e12},
                                                         {"KiB", 1024.0},
                                                         {"MiB", 1048576.0},
                                                         {"GiB", 1073741824.0},
                                                         {"TiB", 1099511627776.0}};
  for (const auto& [name, scale] : units) {
    if (unit == name) return value * scale;
  }
  throw bad();
}

namespace {

class GridStrategy final : public StrategyOf<GridStrategy> {
 public:
  std::string_view name() const override { return "grid"; }
  std::string_view description() const override {
    return "2-D (SUMMA), 2.5-D and 3-D grids: A, B and C in blocks over a PM x PN x PK grid of "
           "ranks, partial products summed over the PK layers";
  }
  std::vector<StrategyOption> options() const override {
    return {{"grid", "PMxPNxPK",
             "grid: its ranks, PM x PN x PK (at most the run's; the others idle), or auto (the "
             "default): the grid that moves the fewest bytes per rank in --memory-per-rank",
             false},
            {"panel", "NB", "grid: the width of the panels broadcast in each step (default 256)",
             true, 1 << 20},
            {"memory-per-rank", "BYTES",
             "grid auto: the memory a rank may hold, as 2GiB (default: what the host has free "
             "over its ranks; a dry run: no limit)",
             false}};
  }
  StrategySettings settle(const StrategySettings& given, const RunPlacement& where) const override {
    const int panel = given.integer("panel", static_cast<int>(kDefaultPanel));
    if (panel < 1) throw InputError("--panel: must be a whole number from 1", -1, "--panel");
    const std::string* memory_text = given.find("memory-per-rank");
    const double memory = memory_text ? parse_memory_bytes(*memory_text) : where.memory_per_rank;
    const std::string* text = given.find("grid");
    StrategySettings out{{"panel", std::to_string(panel)}};
    if (text == nullptr || *text == "auto") {
      // Training takes 2-D grids.
      const GridChoice c =
          choose_grid(where.shape, where.ranks, where.element_bytes, memory,
                      static_cast<std::size_t>(panel), where.distributed, where.training ? 1 : 0);
      // Only a limit the user gave is refused here; with the host's, the program's memory
      // check says what does not fit and where.
      if (!c.fits && memory_text != nullptr) {
        const double least = c.cost.held_elements * static_cast<double>(where.element_bytes);
        throw InputError("--memory-per-rank " + escaped(*memory_text) + ": no grid of " +
                             std::to_string(where.ranks) + " ranks fits; the least a rank " +
                             "holds is " + std::to_string(static_cast<long long>(least)) +
                             " bytes (grid " + grid_text(c.grid) + ")",
                         -1, "--memory-per-rank");
      }
      out.set("grid", grid_text(c.grid));
      if (c.fits) out.set("grid_auto", "1");
    } else {
      const Grid g = parse_grid(*text, where.ranks);
      if (where.training && g.pk != 1) {
        throw InputError("--grid " + escaped(*text) +
                             ": train takes 2-D grids (PMxPNx1); 2.5-D and 3-D grids multiply "
                             "only",
                         -1, "--grid");
      }
      out.set("grid", grid_text(g));
    }
    const Grid g = parse_grid(*out.find("grid"), where.ranks);
    out.set("idle_ranks", std::to_string(where.ranks - g.pm * g.pn * g.pk));
    return out;
  }
  std::string label(const StrategySettings& settled) const override {
    const std::string* text = settled.find("grid");
    // As wide as the table's column allows; note() says the rest.
    return "grid " + (text ? *text : std::string("1x1x1"));
  }
  std::string note(const StrategySettings& settled) const override {
    const std::string* text = settled.find("grid");
    if (text == nullptr) return {};
    const int idle = settled.integer("idle_ranks", 0);
    std::string line = label(settled) + ": ";
    line += settled.find("grid_auto") ? "chosen by --grid auto (the fewest bytes a rank receives)"
                                      : "as --grid gave it";
    if (idle > 0) {
      line += "; " + std::to_string(idle) + (idle == 1 ? " rank" : " ranks") +
              " idle (outside the grid, holding and multiplying nothing)";
    }
    return line;
  }
  template <Element T>
  std::unique_ptr<MatmulPlan<T>> make_plan(Communicator& comm, const MatmulShape& shape,
                                           const arma::Mat<T>& b, int root,
                                           const StrategySettings& settings) const {
    const int panel = settings.integer("panel", static_cast<int>(kDefaultPanel));
    return std::make_unique<GridPlan<T>>(comm, shape, b,
                                         grid_of(settings, shape, comm.size(), false),
                                         static_cast<std::size_t>(std::max(1, panel)), root);
  }
  std::optional<BlockLayout> distributed_blocks(const MatmulShape& shape, int ranks, int rank,
                                                const StrategySettings& settings) const override {
    return grid_blocks(grid_of(settings, shape, ranks, true), shape, rank);
  }
  template <Element T>
  std::unique_ptr<DistributedPlan<T>> make_distributed_plan(
      Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b_block,
      const StrategySettings& settings) const {
    const int panel = settings.integer("panel", static_cast<int>(kDefaultPanel));
    return std::make_unique<GridDistributedPlan<T>>(comm, shape, b_block,
                                                    grid_of(settings, shape, comm.size(), true),
                                                    static_cast<std::size_t>(std::max(1, panel)));
  }
  template <Element T>
  std::unique_ptr<TrainingStep<T>> make_training_step(const TrainingSetup<T>& setup) const {
    const int panel = setup.settings.integer("panel", static_cast<int>(kDefaultPanel));
    const StrategySettings settled = settle(
        setup.settings, RunPlacement{setup.comm.size(), 1, setup.shape, sizeof(T), 0, false, true});
    return grid_training_step(setup, parse_grid(*settled.find("grid"), setup.comm.size()),
                              static_cast<std::size_t>(std::max(1, panel)));
  }

 private:
  // The grid of settled settings, or of a library caller's settings that leave it to auto
  // (settled again for the layout: no memory limit).
  Grid grid_of(const StrategySettings& settings, const MatmulShape& shape, int ranks,
               bool distributed) const {
    const StrategySettings settled =
        settle(settings, RunPlacement{ranks, 1, shape, 8, 0, distributed});
    return parse_grid(*settled.find("grid"), ranks);
  }
};

}  // namespace

std::unique_ptr<Strategy> make_grid_strategy() {
  return std::make_unique<GridStrategy>();
}

}  // namespace distmm
