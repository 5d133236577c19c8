// The distmm Python module's compiled part (distmm._distmm): strategies from the registry,
// one-shot multiplies and plans on an mpi4py communicator or on the simulator, dry runs,
// predictions and training. NumPy arrays in and out: a C-contiguous A of the plan's type is
// read where it is (it is A^T, column-major, to the plans) and C is written straight into the
// array returned; python/distmm/__init__.py adds the documentation-level API and draw().
#include <mpi.h>
#include <mpi4py/mpi4py.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "distmm/checkpoint.hpp"
#include "distmm/draw.hpp"
#include "distmm/dry_run.hpp"
#include "distmm/error.hpp"
#include "distmm/fault.hpp"
#include "distmm/layout.hpp"
#include "distmm/model.hpp"
#include "distmm/mpi_comm.hpp"
#include "distmm/plan.hpp"
#include "distmm/report.hpp"
#include "distmm/simulator.hpp"
#include "distmm/strategy.hpp"
#include "distmm/train.hpp"
#include "model_calls.hpp"
#include "options.hpp"
#include "sim_plan.hpp"

namespace py = pybind11;

namespace distmm::python {
namespace {

// The Python exception classes (made in init: InputError is both distmm.Error and ValueError).
struct Classes {
  PyObject *error, *input, *comm, *peer, *deadlock, *mismatch, *timeout, *verification;
};
Classes classes;

// The communicator a call runs on: mpi4py's (duplicated), collective over it.
std::unique_ptr<Communicator> communicator_of(const py::object& comm, double timeout_s) {
  PyObject* object = comm.ptr();
  MPI_Comm* handle = PyMPIComm_Get(object);
  if (handle == nullptr) throw py::error_already_set();
  MpiOptions options;
  options.timeout_s = timeout_s;
  options.hear_failures = true;  // a failing rank's peers raise instead of hanging
  return mpi_communicator(*handle, options);
}

// After a failure under a communicator: tells the other ranks (unless this rank only heard
// of another's), and keeps for the life of the process what MPI may still read or write, as
// MPI cannot cancel an abandoned collective: the communicator, the plan, the arrays.
void give_up(std::unique_ptr<Communicator> comm, const std::exception& e,
             std::vector<std::shared_ptr<void>> state, std::vector<py::object> arrays) {
  // Bad input is agreed by every rank before any data moves: nothing to tell or keep.
  if (!comm || dynamic_cast<const InputError*>(&e) != nullptr) return;
  if (dynamic_cast<const PeerFailure*>(&e) == nullptr) comm->abandon(e.what());
  static auto* kept = new std::vector<std::shared_ptr<void>>();  // never freed, on purpose
  static auto* kept_arrays = new std::vector<py::object>();
  kept->emplace_back(std::move(comm));
  for (auto& s : state) kept->push_back(std::move(s));
  for (auto& a : arrays) kept_arrays->push_back(std::move(a));
}

// `fault=` as the program's --fault (crash:R[:N], skip:R, delay:MS[:SEED]; R a rank of
// MPI_COMM_WORLD, or of the simulator), checked against the ranks that run; "" is none.
FaultPlan fault_of(const std::string& spec, const std::vector<int>& world_ranks) {
  if (spec.empty()) return {};
  FaultPlan f;
  try {
    f = parse_fault(spec);
  } catch (const InputError& e) {
    const std::string text = e.what();
    throw InputError(text.starts_with("--") ? text.substr(2) : text, -1, "fault");
  }
  const bool targets = f.kind == FaultPlan::Kind::crash || f.kind == FaultPlan::Kind::skip;
  if (targets && std::find(world_ranks.begin(), world_ranks.end(), f.rank) == world_ranks.end()) {
    throw InputError("fault " + spec + ": rank " + std::to_string(f.rank) +
                         " does not run this call (" + std::to_string(world_ranks.size()) +
                         " ranks)",
                     -1, "fault");
  }
  return f;
}

std::vector<int> first_ranks(int p) {
  std::vector<int> r(static_cast<std::size_t>(std::max(p, 0)));
  std::iota(r.begin(), r.end(), 0);
  return r;
}

template <Element T>
py::array_t<T> new_array(std::size_t rows, std::size_t cols) {
  return py::array_t<T>({static_cast<py::ssize_t>(rows), static_cast<py::ssize_t>(cols)});
}

// `out` as the plan's C: written in place, so it must be exactly what the plan writes.
template <Element T>
py::array out_array(const py::object& out, const MatmulShape& shape) {
  const std::string want = std::to_string(shape.m) + "x" + std::to_string(shape.n) + " " +
                           (std::is_same_v<T, float> ? "float32" : "float64");
  if (!py::isinstance<py::array>(out)) {
    throw InputError("out: not a numpy array (want a C-contiguous " + want + " array)", -1, "out");
  }
  const auto c = out.cast<py::array>();
  const bool fits = c.ndim() == 2 && static_cast<std::size_t>(c.shape(0)) == shape.m &&
                    static_cast<std::size_t>(c.shape(1)) == shape.n &&
                    c.dtype().is(py::dtype::of<T>()) && (c.flags() & py::array::c_style) != 0 &&
                    c.writeable();
  if (!fits) {
    std::string got;
    for (py::ssize_t d = 0; d < c.ndim(); ++d) got += (d ? "x" : "") + std::to_string(c.shape(d));
    got.append(" ").append(py::str(c.dtype()).cast<std::string>());
    if ((c.flags() & py::array::c_style) == 0) got += ", not C-contiguous";
    if (!c.writeable()) got += ", read-only";
    throw InputError("out: is " + got + "; the plan writes a C-contiguous " + want + " C", -1,
                     "out");
  }
  return c;
}

// A numpy matrix as the plans' A^T: rows x cols row-major is cols x rows column-major, read in
// place when C-contiguous and of type T (else copied once, counted in `copies`).
template <Element T>
arma::Mat<T> row_major_view(const py::array& a, const char* what, py::array& keep, int& copies) {
  if (a.ndim() != 2) throw InputError(std::string(what) + ": expected a 2-D array", -1, what);
  keep = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(a);
  if (!keep) throw InputError(std::string(what) + ": not convertible to a matrix", -1, what);
  if (keep.ptr() != a.ptr()) ++copies;
  const auto rows = static_cast<std::size_t>(keep.shape(0));
  const auto cols = static_cast<std::size_t>(keep.shape(1));
  return arma::Mat<T>(static_cast<T*>(keep.mutable_data()), cols, rows, false, true);
}

// B for a plan: k x n column-major. A Fortran-ordered B of type T is read in place; any other
// is copied once at setup (counted in `copies`).
template <Element T>
arma::Mat<T> column_major(const py::array& b, py::array& keep, int& copies) {
  if (b.ndim() != 2) throw InputError("B: expected a 2-D array", -1, "B");
  keep = py::array_t<T, py::array::f_style | py::array::forcecast>::ensure(b);
  if (!keep) throw InputError("B: not convertible to a matrix", -1, "B");
  if (keep.ptr() != b.ptr()) ++copies;
  return arma::Mat<T>(static_cast<T*>(keep.mutable_data()), static_cast<std::size_t>(b.shape(0)),
                      static_cast<std::size_t>(b.shape(1)), false, true);
}

// Rank 0's verdict on its input, told to every rank (the Communicator moves numbers: the
// message goes one character a number): every rank raises the same InputError.
// Broadcasts `data` from rank 0. Should the broadcast be abandoned (a rank failed), MPI may
// still write into `data` later: it is then kept for the life of the process, not freed.
void broadcast_keeping(Communicator& comm, std::vector<double>& data) {
  try {
    comm.broadcast(data, 0);
  } catch (...) {
    (void)new std::vector<double>(std::move(data));
    throw;
  }
}

// The ranks of a call end it together, so that each raises when any failed: a rank whose part
// was done before another rank failed would otherwise return as if the call had worked (seen:
// dp on 4 ranks, rank 3 failing in the gather, rank 2 returned). A failed rank never joins:
// the others hear of it here (PeerFailure).
void agree_done(Communicator& comm) {
  std::vector<double> flag{0};
  try {
    comm.allreduce_sum(flag);
  } catch (...) {
    (void)new std::vector<double>(std::move(flag));  // as broadcast_keeping()
    throw;
  }
}

void agree_input(Communicator* comm, const std::string& why) {
  std::vector<double> length{static_cast<double>(why.size())};
  if (comm) broadcast_keeping(*comm, length);
  if (length[0] == 0) return;
  std::vector<double> text(why.begin(), why.end());
  text.resize(static_cast<std::size_t>(length[0]));
  if (comm) broadcast_keeping(*comm, text);
  throw InputError(std::string(text.begin(), text.end()));
}

py::dict figures_dict(const RankFigures& f) {
  py::dict d;
  d["rank"] = f.rank;
  d["bytes_sent"] = f.bytes_sent;
  d["bytes_received"] = f.bytes_received;
  d["messages_sent"] = f.messages_sent;
  d["messages_received"] = f.messages_received;
  d["persistent_param_bytes"] = f.persistent_param_bytes;
  d["peak_param_bytes"] = f.peak_param_bytes;
  d["comm_s"] = f.comm_s;
  d["compute_s"] = f.compute_s;
  return d;
}

// A plan: set up once on a communicator (every rank calls) or the simulator, then called.
class Plan {
 public:
  // `dtype` "": B's on rank 0 (float32 or else float64), told to the others.
  // `fault` is armed on every rank before the set-up (its calls count from there).
  Plan(const std::string& name, const py::object& b, std::size_t m, const py::object& comm,
       int ranks, const std::string& dtype, double timeout_s, const py::dict& options,
       const std::string& fault)
      : strategy_(&distmm::strategy(name)) {
    if (!dtype.empty() && dtype != "float64" && dtype != "float32") {
      throw InputError("dtype " + dtype + ": expected float64 or float32", -1, "dtype");
    }
    settings_ = settings_of(*strategy_, options);
    if (!comm.is_none()) comm_ = communicator_of(comm, timeout_s);
    const int p = comm_ ? comm_->size() : ranks;
    if (p < 1) throw InputError("ranks: must be at least 1", -1, "ranks");
    fault_ = fault_of(fault, comm_ ? comm_->world_ranks() : first_ranks(p));
    const bool root = !comm_ || comm_->rank() == 0;
    // The shape and type: B on the root; the others learn them from the root (and its error).
    std::vector<double> facts{0, 0, static_cast<double>(m), dtype == "float32" ? 1.0 : 0.0};
    std::string why;
    if (root) {
      try {
        if (b.is_none()) throw InputError("B: needed on rank 0", -1, "B");
        const py::array given = py::array::ensure(b);
        if (!given || given.ndim() != 2) throw InputError("B: expected a 2-D array", -1, "B");
        if (dtype.empty()) facts[3] = given.dtype().is(py::dtype::of<float>()) ? 1.0 : 0.0;
        facts[0] = static_cast<double>(given.shape(0));
        facts[1] = static_cast<double>(given.shape(1));
      } catch (const InputError& e) {
        why = e.what();
      }
    }
    agree(why);
    if (comm_) broadcast_keeping(*comm_, facts);
    f32_ = facts[3] != 0;
    shape_ = {static_cast<std::size_t>(facts[2]), static_cast<std::size_t>(facts[0]),
              static_cast<std::size_t>(facts[1])};
    settings_ = strategy_->settle(settings_, RunPlacement{p, 1, shape_, f32_ ? 4u : 8u, 0});
    if (f32_) {
      set_up<float>(b, p);
    } else {
      set_up<double>(b, p);
    }
  }

  // C = A @ B on rank 0 (None elsewhere; under the simulator, the caller's).
  // With `out` (rank 0): C is written into it, a C-contiguous, writeable m x n array of the
  // plan's dtype, and it is returned (numpy's out=): no fresh C, whose first touch costs.
  py::object call(const py::object& a, const py::object& out) {
    return f32_ ? run<float>(a, out) : run<double>(a, out);
  }
  py::dict report();
  std::uint64_t allocated_bytes() const { return allocated_; }
  int copies() const { return copies_; }
  std::string label() const { return strategy_->label(settings_); }

 private:
  void agree(const std::string& why) { agree_input(comm_.get(), why); }

  template <Element T>
  void set_up(const py::object& b, int p) {
    const bool root = !comm_ || comm_->rank() == 0;
    arma::Mat<T> b_m;
    if (root) b_m = column_major<T>(py::array::ensure(b), b_keep_, copies_);
    if (comm_) {
      comm_->inject(fault_);
      std::unique_ptr<MatmulPlan<T>> plan;
      try {
        plan = make_plan(*strategy_, *comm_, shape_, b_m, 0, settings_);
      } catch (const std::exception& e) {
        give_up(std::move(comm_), e, {}, {b_keep_});
        throw;
      }
      allocated_ = plan->allocated_bytes();
      if constexpr (std::is_same_v<T, float>)
        mpi_f_ = std::move(plan);
      else
        mpi_d_ = std::move(plan);
      return;
    }
    const MatmulShape shape = shape_;
    const Strategy& s = *strategy_;
    const StrategySettings settings = settings_;
    const FaultPlan fault = fault_;
    py::gil_scoped_release release;
    // By reference: SimPlan returns once every rank has made its plan, and a copy (or a
    // conditional between B and a temporary) would copy all of B.
    const arma::Mat<T> none;
    auto sim =
        std::make_unique<SimPlan<T>>(p, [&s, &b_m, &none, shape, settings, fault](Communicator& c) {
          c.inject(fault);
          return make_plan(s, c, shape, c.rank() == 0 ? b_m : none, 0, settings);
        });
    allocated_ = sim->allocated_bytes();
    if constexpr (std::is_same_v<T, float>)
      sim_f_ = std::move(sim);
    else
      sim_d_ = std::move(sim);
  }

  template <Element T>
  py::object run(const py::object& a, const py::object& out) {
    if (gave_up_) throw Error("distmm: this plan's ranks stopped after an error; make another");
    const bool root = !comm_ || comm_->rank() == 0;
    arma::Mat<T> a_t, c_t;
    py::array a_keep;
    py::array c;
    std::string why;
    if (root) {
      try {
        if (a.is_none()) throw InputError("A: needed on rank 0", -1, "A");
        a_t = row_major_view<T>(py::array::ensure(a), "A", a_keep, copies_);
        if (a_t.n_cols != shape_.m || a_t.n_rows != shape_.k) {
          throw InputError("A is " + std::to_string(a_t.n_cols) + "x" + std::to_string(a_t.n_rows) +
                               "; the plan multiplies an " + std::to_string(shape_.m) + "x" +
                               std::to_string(shape_.k) + " A",
                           -1, "A");
        }
        c = out.is_none() ? new_array<T>(shape_.m, shape_.n) : out_array<T>(out, shape_);
        // The plans read A (and B, where it is read in place) while they write C.
        const auto overlaps = [&](const void* p, std::size_t bytes) {
          const auto* lo = static_cast<const char*>(p);
          const auto* c_lo = static_cast<const char*>(c.data());
          return bytes > 0 && c.nbytes() > 0 && lo < c_lo + c.nbytes() && c_lo < lo + bytes;
        };
        if (overlaps(a_t.memptr(), a_t.n_elem * sizeof(T))) {
          throw InputError("out: shares memory with A (give an array of its own)", -1, "out");
        }
        if (b_keep_ && overlaps(b_keep_.data(), static_cast<std::size_t>(b_keep_.nbytes()))) {
          throw InputError("out: shares memory with B (give an array of its own)", -1, "out");
        }
        c_t = arma::Mat<T>(static_cast<T*>(c.mutable_data()), shape_.n, shape_.m, false, true);
      } catch (const InputError& e) {
        why = e.what();
      }
    }
    try {
      agree(why);  // a communication call too: an injected fault may fire here
      py::gil_scoped_release release;
      if (comm_) {
        MatmulPlan<T>& plan = mpi_plan<T>();
        comm_->stats().reset();
        plan.execute(a_t, c_t);
        mine_ = measured(*comm_, sizeof(T));
        agree_done(*comm_);
      } else {
        sim_plan<T>().execute(a_t, c_t);
      }
    } catch (const InputError&) {
      throw;  // agreed by every rank before any data moved: the plan stays usable
    } catch (const std::exception& e) {
      if (comm_) {
        gave_up_ = true;
        give_up(
            std::move(comm_), e,
            {std::shared_ptr<void>(std::move(mpi_d_)), std::shared_ptr<void>(std::move(mpi_f_))},
            {b_keep_, a_keep, c});
      }
      throw;
    }
    if (!root) return py::none();
    return c;
  }

  template <Element T>
  MatmulPlan<T>& mpi_plan() {
    if constexpr (std::is_same_v<T, float>)
      return *mpi_f_;
    else
      return *mpi_d_;
  }
  template <Element T>
  SimPlan<T>& sim_plan() {
    if constexpr (std::is_same_v<T, float>)
      return *sim_f_;
    else
      return *sim_d_;
  }

  const Strategy* strategy_;
  bool f32_ = false;
  StrategySettings settings_;
  FaultPlan fault_;
  bool gave_up_ = false;  // under a communicator, after a failure
  MatmulShape shape_{};
  std::unique_ptr<Communicator> comm_;
  py::array b_keep_;
  std::unique_ptr<MatmulPlan<double>> mpi_d_;
  std::unique_ptr<MatmulPlan<float>> mpi_f_;
  std::unique_ptr<SimPlan<double>> sim_d_;
  std::unique_ptr<SimPlan<float>> sim_f_;
  std::uint64_t allocated_ = 0;
  int copies_ = 0;
  RankFigures mine_;
};

// The last call's figures: every rank's (under mpirun gathered to rank 0, collective; the
// others get their own only).
py::dict Plan::report() {
  if (gave_up_) throw Error("distmm: this plan's ranks stopped after an error; make another");
  py::dict d;
  d["strategy"] = std::string(strategy_->name());
  d["label"] = label();
  d["m"] = shape_.m;
  d["k"] = shape_.k;
  d["n"] = shape_.n;
  d["dtype"] = f32_ ? "float32" : "float64";
  d["allocated_bytes"] = allocated_;
  d["python_copies"] = copies_;
  py::list ranks;
  if (comm_) {
    d["backend"] = "mpi";
    d["ranks"] = comm_->size();
    const std::vector<RankFigures> all = gather_figures(*comm_, mine_, 0);
    if (comm_->rank() != 0) {
      ranks.append(figures_dict(mine_));
    } else {
      for (const RankFigures& f : all) ranks.append(figures_dict(f));
    }
  } else {
    d["backend"] = "simulator";
    const auto& all = f32_ ? sim_f_->figures() : sim_d_->figures();
    d["ranks"] = all.size();
    for (const RankFigures& f : all) ranks.append(figures_dict(f));
  }
  d["per_rank"] = ranks;
  return d;
}

py::list strategies_list(bool training) {
  py::list out;
  for (const Strategy& s : training ? training_strategies() : all_strategies()) {
    py::dict d;
    d["name"] = std::string(s.name());
    d["description"] = std::string(s.description());
    d["trains"] = s.trains();
    py::list options;
    for (const StrategyOption& o : s.options()) {
      py::dict od;
      od["name"] = o.name;
      od["help"] = o.help;
      options.append(od);
    }
    d["options"] = options;
    out.append(d);
  }
  return out;
}

// The dry run: per rank what setup and one execution (or training step) move and hold.
py::dict dry(const std::string& name, std::size_t m, std::size_t k, std::size_t n, int ranks,
             const std::string& dtype, bool train, const py::dict& options) {
  const Strategy& s = distmm::strategy(name);
  const bool f32 = dtype == "float32" || dtype == "f32";
  const MatmulShape shape{m, k, n};
  StrategySettings settings = settings_of(s, options);
  RunPlacement where{ranks, 1, shape, f32 ? 4u : 8u, 0};
  where.training = train;
  settings = s.settle(settings, where);
  const DataType type = f32 ? DataType::f32 : DataType::f64;
  DryRun run;
  {
    py::gil_scoped_release release;
    if (train) {
      TrainConfig config;
      config.settings = settings;
      run = dry_train(s, shape, ranks, type, config, 1);
    } else {
      run = dry_run(s, shape, ranks, type, settings, 1);
    }
  }
  py::dict d;
  d["strategy"] = name;
  d["label"] = s.label(settings);
  d["m"] = m;
  d["k"] = k;
  d["n"] = n;
  d["groups"] = run.group_names;
  py::list per_rank;
  for (int r = 0; r < ranks; ++r) {
    const DryRank& mine = run.ranks[static_cast<std::size_t>(r)];
    py::dict f = figures_dict(planned(run, r, f32 ? 4 : 8));
    f["allocated_bytes"] = mine.allocated_bytes;
    // Setup, then the execution (or step): each collective and multiply in order.
    py::list events;
    for (const PlannedEvent& e : mine.events.expand()) {
      py::dict ev;
      ev["op"] = std::string(name_of(e.op));
      ev["group"] = e.group;
      ev["root"] = e.root;
      ev["bytes_sent"] = e.bytes_sent;
      ev["bytes_received"] = e.bytes_received;
      ev["total_bytes"] = e.total_bytes;
      ev["execution_start"] = e.execution_start;
      if (e.op == OpKind::compute) ev["mkn"] = py::make_tuple(e.rows, e.inner, e.cols);
      events.append(ev);
    }
    f["events"] = events;
    per_rank.append(f);
  }
  d["per_rank"] = per_rank;
  return d;
}

// Which blocks of A (m x k), B (k x n) and C (m x n) each rank holds under the strategy's
// distributed layout: (first row, rows, first column, columns) each.
py::list blocks(const std::string& name, std::size_t m, std::size_t k, std::size_t n, int ranks,
                const py::dict& options) {
  const Strategy& s = distmm::strategy(name);
  const MatmulShape shape{m, k, n};
  RunPlacement where{ranks, 1, shape, 8, 0};
  where.distributed = true;
  const StrategySettings settings = s.settle(settings_of(s, options), where);
  const auto tuple = [](const Block& b) { return py::make_tuple(b.row0, b.rows, b.col0, b.cols); };
  py::list out;
  for (int r = 0; r < ranks; ++r) {
    const std::optional<BlockLayout> l = s.distributed_blocks(shape, ranks, r, settings);
    if (!l) throw InputError(name + ": has no distributed layout", -1, "strategy");
    py::dict d;
    d["A"] = tuple(l->a);
    d["B"] = tuple(l->b);
    d["C"] = tuple(l->c);
    out.append(d);
  }
  return out;
}

// A copy of a numpy matrix as Armadillo's (column-major), for the data training reads once.
template <Element T>
arma::Mat<T> copied(const py::object& x, const char* what) {
  const auto a = py::array_t<T, py::array::f_style | py::array::forcecast>::ensure(x);
  if (!a || a.ndim() != 2) throw InputError(std::string(what) + ": expected a 2-D array", -1, what);
  return arma::Mat<T>(a.data(), static_cast<std::size_t>(a.shape(0)),
                      static_cast<std::size_t>(a.shape(1)));
}

struct TrainArgs {
  std::string strategy;
  py::object x, t, w0;
  int ranks = 1;
  TrainConfig config;
  py::dict options;
  FaultPlan fault;  // armed on every rank before training
};

template <Element T>
py::dict train_typed(TrainArgs& args, Communicator* comm) {
  const Strategy& s = distmm::strategy(args.strategy);
  args.config.settings = settings_of(s, args.options);
  const bool root = !comm || comm->rank() == 0;
  arma::Mat<T> x, t, w0;
  std::vector<double> facts{0, 0, 0, 0};
  std::string why;
  if (root) {
    try {
      x = copied<T>(args.x, "X");
      t = copied<T>(args.t, "T");
      if (t.n_rows != x.n_rows) throw InputError("T: X and T must have the same number of rows");
      w0 = args.w0.is_none() ? arma::Mat<T>(x.n_cols, t.n_cols, arma::fill::zeros)
                             : copied<T>(args.w0, "W0");
      if (w0.n_rows != x.n_cols || w0.n_cols != t.n_cols) {
        throw InputError("W0: expected " + std::to_string(x.n_cols) + "x" +
                         std::to_string(t.n_cols) + " (X's columns x T's columns)");
      }
      facts = {0, static_cast<double>(x.n_rows), static_cast<double>(x.n_cols),
               static_cast<double>(t.n_cols)};
      // What a checkpoint records of the data (a resume with other data is refused).
      CheckpointConfig& ck = args.config.checkpoint;
      ck.x_crc32 = crc32_of(x.memptr(), x.n_elem * sizeof(T));
      ck.t_crc32 = crc32_of(t.memptr(), t.n_elem * sizeof(T));
      ck.w0_crc32 = crc32_of(w0.memptr(), w0.n_elem * sizeof(T));
    } catch (const InputError& e) {
      why = e.what();
    }
  }
  agree_input(comm, why);
  if (comm) broadcast_keeping(*comm, facts);
  const MatmulShape shape{static_cast<std::size_t>(facts[1]), static_cast<std::size_t>(facts[2]),
                          static_cast<std::size_t>(facts[3])};
  TrainResultOf<T> result;
  {
    py::gil_scoped_release release;
    if (comm) {
      comm->inject(args.fault);
      result = train_linear(s, *comm, shape, x, t, w0, args.config);
    } else {
      run_simulated(args.ranks, [&](Communicator& c) {
        c.inject(args.fault);
        const arma::Mat<T> none;
        TrainResultOf<T> r =
            train_linear(s, c, shape, c.rank() == 0 ? x : none, c.rank() == 0 ? t : none,
                         c.rank() == 0 ? w0 : none, args.config);
        if (c.rank() == 0) result = std::move(r);
      });
    }
  }
  py::dict d;
  d["losses"] = result.losses;
  d["first_step"] = result.first_step;
  d["resumed_from"] = result.resumed_from;
  d["saved"] = result.saved;
  d["bytes_written"] = result.bytes_written;
  d["bytes_read"] = result.bytes_read;
  if (root) {
    py::array_t<T> w = new_array<T>(shape.k, shape.n);
    // W (k x n column-major) into a C-ordered array.
    arma::Mat<T>(w.mutable_data(), shape.n, shape.k, false, true) = result.w.t();
    d["W"] = w;
  } else {
    d["W"] = py::none();
  }
  return d;
}

PyObject* exception_class(const char* name, PyObject* bases, py::module_& m) {
  PyObject* cls = PyErr_NewException((std::string("distmm.") + name).c_str(), bases, nullptr);
  if (cls == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(cls));
  return cls;
}

void register_errors(py::module_& m) {
  Classes& c = classes;
  c.error = exception_class("Error", PyExc_RuntimeError, m);
  py::tuple input_bases = py::make_tuple(py::handle(c.error), py::handle(PyExc_ValueError));
  c.input = exception_class("InputError", input_bases.ptr(), m);
  c.comm = exception_class("CommError", c.error, m);
  c.peer = exception_class("PeerFailure", c.comm, m);
  c.deadlock = exception_class("DeadlockError", c.comm, m);
  c.mismatch = exception_class("MismatchError", c.comm, m);
  c.timeout = exception_class("TimeoutError", c.comm, m);
  c.verification = exception_class("VerificationError", c.error, m);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InputError& e) {
      PyErr_SetString(classes.input, e.what());
    } catch (const PeerFailure& e) {
      PyErr_SetString(classes.peer, e.what());
    } catch (const DeadlockError& e) {
      PyErr_SetString(classes.deadlock, e.what());
    } catch (const MismatchError& e) {
      PyErr_SetString(classes.mismatch, e.what());
    } catch (const TimeoutError& e) {
      PyErr_SetString(classes.timeout, e.what());
    } catch (const CommError& e) {
      PyErr_SetString(classes.comm, e.what());
    } catch (const VerificationError& e) {
      PyErr_SetString(classes.verification, e.what());
    } catch (const Error& e) {
      PyErr_SetString(classes.error, e.what());
    }
  });
}

}  // namespace
}  // namespace distmm::python

PYBIND11_MODULE(_distmm, m) {
  using namespace distmm::python;
  m.doc() = "distmm's compiled part; use the distmm package";
  if (import_mpi4py() < 0) throw py::error_already_set();
  register_errors(m);
  m.def("strategies", &strategies_list, py::arg("training") = false);
  py::class_<Plan>(m, "Plan")
      .def(py::init<const std::string&, const py::object&, std::size_t, const py::object&, int,
                    const std::string&, double, const py::dict&, const std::string&>(),
           py::arg("strategy"), py::arg("B"), py::arg("m"), py::arg("comm"), py::arg("ranks"),
           py::arg("dtype"), py::arg("timeout"), py::arg("options"), py::arg("fault"))
      .def("__call__", &Plan::call, py::arg("A"), py::arg("out"))
      .def("report", &Plan::report)
      .def_property_readonly("allocated_bytes", &Plan::allocated_bytes)
      .def_property_readonly("python_copies", &Plan::copies)
      .def_property_readonly("label", &Plan::label);
  m.def("dry_run", &dry, py::arg("strategy"), py::arg("m"), py::arg("k"), py::arg("n"),
        py::arg("ranks"), py::arg("dtype"), py::arg("train"), py::arg("options"));
  m.def(
      "sharding_svg",
      [](const std::string& name, std::size_t rows, std::size_t k, std::size_t n, int ranks,
         const py::dict& options) {
        const distmm::Strategy& s = distmm::strategy(name);
        const distmm::MatmulShape shape{rows, k, n};
        distmm::RunPlacement where{ranks, 1, shape, 8, 0};
        where.distributed = true;
        const distmm::StrategySettings settings = s.settle(settings_of(s, options), where);
        py::gil_scoped_release release;
        return distmm::sharding_svg(s, shape, ranks, settings);
      },
      py::arg("strategy"), py::arg("m"), py::arg("k"), py::arg("n"), py::arg("ranks"),
      py::arg("options"));
  m.def("blocks", &blocks, py::arg("strategy"), py::arg("m"), py::arg("k"), py::arg("n"),
        py::arg("ranks"), py::arg("options"));
  m.def("predict", &predict, py::arg("strategy"), py::arg("m"), py::arg("k"), py::arg("n"),
        py::arg("ranks"), py::arg("model"), py::arg("ranks_per_host"), py::arg("blas_threads"),
        py::arg("dtype"), py::arg("train"), py::arg("options"));
  m.def("choose", &choose, py::arg("m"), py::arg("k"), py::arg("n"), py::arg("ranks"),
        py::arg("model"), py::arg("ranks_per_host"), py::arg("blas_threads"), py::arg("dtype"),
        py::arg("train"), py::arg("memory_per_rank"), py::arg("distributed"), py::arg("warmup"),
        py::arg("repeat"), py::arg("steps"), py::arg("options"));
  m.def(
      "train",
      [](const std::string& strategy, const py::object& x, const py::object& t,
         const py::object& w0, const py::object& comm, int ranks, std::size_t steps, double lr,
         const std::string& optimizer, const std::string& checkpoint_dir,
         std::size_t checkpoint_every, std::size_t keep, const std::string& resume,
         const std::string& dtype, double timeout, const std::string& fault,
         const py::dict& options) {
        TrainArgs args{strategy, x, t, w0, ranks, {}, options, {}};
        args.config.steps = steps;
        args.config.lr = lr;
        if (optimizer != "sgd" && optimizer != "adam") {
          throw distmm::InputError("optimizer " + optimizer + ": expected sgd or adam", -1,
                                   "optimizer");
        }
        args.config.optimizer =
            optimizer == "adam" ? distmm::Optimizer::adam : distmm::Optimizer::sgd;
        args.config.checkpoint.save_dir = checkpoint_dir;
        args.config.checkpoint.every = checkpoint_every;
        args.config.checkpoint.keep = keep;
        args.config.checkpoint.resume = resume;
        std::unique_ptr<distmm::Communicator> c;
        if (!comm.is_none()) c = communicator_of(comm, timeout);
        if (!c && ranks < 1) throw distmm::InputError("ranks: must be at least 1", -1, "ranks");
        args.fault = fault_of(fault, c ? c->world_ranks() : first_ranks(ranks));
        // The type: rank 0's X's (float32, else float64) unless given.
        std::vector<double> f32{dtype == "float32" ? 1.0 : 0.0};
        if (dtype.empty() && (!c || c->rank() == 0)) {
          const py::array given = py::array::ensure(x);
          f32[0] = given && given.dtype().is(py::dtype::of<float>()) ? 1.0 : 0.0;
        }
        if (c) broadcast_keeping(*c, f32);
        try {
          return f32[0] != 0 ? train_typed<float>(args, c.get())
                             : train_typed<double>(args, c.get());
        } catch (const std::exception& e) {
          give_up(std::move(c), e, {}, {});
          throw;
        }
      },
      py::arg("strategy"), py::arg("X"), py::arg("T"), py::arg("W0"), py::arg("comm"),
      py::arg("ranks"), py::arg("steps"), py::arg("lr"), py::arg("optimizer"),
      py::arg("checkpoint_dir"), py::arg("checkpoint_every"), py::arg("keep"), py::arg("resume"),
      py::arg("dtype"), py::arg("timeout"), py::arg("fault"), py::arg("options"));
}
