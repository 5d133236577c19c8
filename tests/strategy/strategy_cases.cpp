#include "strategy/strategy_cases.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <sstream>
#include <type_traits>

#include "distmm/dry_run.hpp"
#include "distmm/memory.hpp"
#include "distmm/model.hpp"
#include "distmm/plan.hpp"
#include "distmm/report.hpp"
#include "distmm/sharding.hpp"
#include "strategy/formulas.hpp"

namespace distmm::testing {

template <typename T>
arma::Mat<T> integer_matrix(std::size_t rows, std::size_t cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> digit(-9, 9);
  arma::Mat<T> x(rows, cols);
  x.imbue([&] { return static_cast<T>(digit(rng)); });
  return x;
}
template arma::Mat<double> integer_matrix(std::size_t, std::size_t, unsigned);
template arma::Mat<float> integer_matrix(std::size_t, std::size_t, unsigned);

template <typename T>
void expect_matches_single_process(Communicator& comm, const Strategy& strategy,
                                   const arma::Mat<T>& a, const arma::Mat<T>& b, bool exact) {
  const MatmulShape shape{a.n_rows, a.n_cols, b.n_cols};
  const bool root = comm.rank() == 0;
  const arma::Mat<T> c =
      matmul(strategy, comm, shape, root ? a : arma::Mat<T>{}, root ? b : arma::Mat<T>{}, 0);
  if (!root) {
    EXPECT_TRUE(c.is_empty()) << "only rank 0 receives C";
    return;
  }
  const arma::Mat<T> expected = a * b;
  ASSERT_EQ(c.n_rows, shape.m);
  ASSERT_EQ(c.n_cols, shape.n);
  if (exact) {
    EXPECT_TRUE(arma::approx_equal(c, expected, "absdiff", T{0}))
        << strategy.name() << " on " << comm.size() << " ranks, " << shape;
  } else {
    // Relative to the largest entry: single entries may cancel to near zero.
    const T tol = std::is_same_v<T, double> ? T(1e-12) : T(1e-5);
    EXPECT_LE(arma::abs(c - expected).max(), tol * std::max(T(1), arma::abs(expected).max()))
        << strategy.name() << " on " << comm.size() << " ranks, " << shape << ", max abs diff "
        << arma::abs(c - expected).max();
  }
}
template void expect_matches_single_process(Communicator&, const Strategy&,
                                            const arma::Mat<double>&, const arma::Mat<double>&,
                                            bool);
template void expect_matches_single_process(Communicator&, const Strategy&, const arma::Mat<float>&,
                                            const arma::Mat<float>&, bool);

namespace {

template <typename T>
void exact_case(Communicator& comm, const Strategy& s, std::size_t m, std::size_t k,
                std::size_t n) {
  expect_matches_single_process(comm, s, integer_matrix<T>(m, k, 1), integer_matrix<T>(k, n, 2),
                                true);
}

void a4x3_b3x5(Communicator& comm, const Strategy& s) {
  exact_case<double>(comm, s, 4, 3, 5);
}
void a8x8_b8x8(Communicator& comm, const Strategy& s) {
  exact_case<double>(comm, s, 8, 8, 8);
}
void rows_not_divisible(Communicator& comm, const Strategy& s) {
  exact_case<double>(comm, s, 7, 5, 11);
  exact_case<float>(comm, s, 13, 4, 3);
}
void more_ranks_than_rows_and_columns(Communicator& comm, const Strategy& s) {
  exact_case<double>(comm, s, 1, 3, 1);
  exact_case<double>(comm, s, 2, 1, 3);
}
void one_by_one(Communicator& comm, const Strategy& s) {
  exact_case<float>(comm, s, 1, 1, 1);
}

void random_trials(Communicator& comm, const Strategy& s) {
  for (unsigned trial = 0; trial < 4; ++trial) {
    std::mt19937 rng(trial);
    std::uniform_int_distribution<std::size_t> dim(1, 70);
    const std::size_t m = dim(rng), k = dim(rng), n = dim(rng);
    // Each rank draws the same data from its own generator (ranks may be threads).
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    const auto random = [&]<typename M>(M x) {
      x.imbue([&] { return static_cast<typename M::elem_type>(uniform(rng)); });
      return x;
    };
    const arma::mat a = random(arma::mat(m, k)), b = random(arma::mat(k, n));
    expect_matches_single_process(comm, s, a, b, false);
    const arma::fmat af = random(arma::fmat(m, k)), bf = random(arma::fmat(k, n));
    expect_matches_single_process(comm, s, af, bf, false);
  }
}

// A plan's entry point for ranks that already hold their own rows of A (row-major).
void plan_rows_entry_point(Communicator& comm, const Strategy& s) {
  const std::size_t m = 9, k = 4, n = 5;
  const arma::mat a = integer_matrix<double>(m, k, 3), b = integer_matrix<double>(k, n, 4);
  const Shard mine = shard_of(m, comm.size(), comm.rank());
  const auto made = make_plan(s, comm, {m, k, n}, comm.rank() == 0 ? b : arma::mat{}, 0);
  EXPECT_EQ(made->allocated_bytes(),
            expected_allocation(s, {m, k, n}, comm.size(), comm.rank(), sizeof(double)));
  auto* plan = dynamic_cast<RowShardedPlan<double>*>(made.get());
  // The data-parallel family shards A and C by rows; tensor parallelism shards B and A or C by
  // columns and the grid by blocks, so they have no rows-only entry point.
  const bool by_rows = s == strategy("dp") || s == strategy("fsdp") ||
                       s == strategy("fsdp-overlap") || s == strategy("hsdp");
  if (by_rows) {
    ASSERT_NE(plan, nullptr) << s;
  }
  if (plan == nullptr) return;
  EXPECT_EQ(plan->rows(), mine);
  const arma::mat a_rows =
      mine.count ? arma::mat(a.rows(mine.offset, mine.offset + mine.count - 1)) : arma::mat(0, k);
  const arma::mat a_rows_t = a_rows.t();
  arma::mat c_rows_t(n, mine.count, arma::fill::value(-1.0));
  plan->execute_rows(a_rows_t.memptr(), c_rows_t.memptr());
  const arma::mat expected = a_rows * b;
  EXPECT_TRUE(arma::approx_equal(c_rows_t.t(), expected, "absdiff", 0.0)) << "rank " << comm.rank();
}

// One plan, executed again and again on new A: every result exact, C written in place at the
// root, and every execution moves exactly the same bytes.
void plan_repeated_executions(Communicator& comm, const Strategy& s) {
  const MatmulShape shape{11, 6, 7};
  const bool root = comm.rank() == 0;
  const arma::mat b = integer_matrix<double>(shape.k, shape.n, 8);
  const auto plan = make_plan(s, comm, shape, root ? b : arma::mat{}, 0);
  arma::mat c_t(root ? shape.n : 0, root ? shape.m : 0);
  const double* c_storage = c_t.memptr();
  std::uint64_t previous_sent = 0, previous_received = 0;
  for (unsigned i = 0; i < 3; ++i) {
    const arma::mat a = integer_matrix<double>(shape.m, shape.k, 20 + i);
    const arma::mat a_t = root ? arma::mat(a.t()) : arma::mat{};
    if (root) c_t.fill(arma::datum::nan);
    const OpCounters before = comm.stats().total_communication();
    plan->execute(a_t, c_t);
    const OpCounters after = comm.stats().total_communication();
    if (i > 0) {
      EXPECT_EQ(after.bytes_sent - before.bytes_sent, previous_sent) << "execution " << i;
      EXPECT_EQ(after.bytes_received - before.bytes_received, previous_received);
    }
    previous_sent = after.bytes_sent - before.bytes_sent;
    previous_received = after.bytes_received - before.bytes_received;
    if (!root) continue;
    EXPECT_EQ(c_t.memptr(), c_storage) << "C stays where the caller put it";
    EXPECT_TRUE(arma::approx_equal(c_t.t(), a * b, "absdiff", 0.0))
        << s << " execution " << i << " on " << comm.size() << " ranks";
  }
}

// Memory discipline: once a plan has run, executing it again takes almost no page faults
// (a plan that allocated per call would fault on every fresh page: 512 per 2 MiB).
void plan_warm_execution_touches_no_fresh_memory(Communicator& comm, const Strategy& s) {
  const MatmulShape shape{512, 512, 512};
  const bool root = comm.rank() == 0;
  const bool per_thread = comm.backend() == "simulator";
  arma::mat a_t, b, c_t;
  if (root) {
    a_t = fresh_matrix<double>(shape.k, shape.m);
    a_t.fill(1.0);
    b = integer_matrix<double>(shape.k, shape.n, 9);
    c_t = fresh_matrix<double>(shape.n, shape.m);
  }
  const auto plan = make_plan(s, comm, shape, b, 0);
  plan->execute(a_t, c_t);  // warm-up: the BLAS and the MPI library set up their own buffers
  comm.barrier();
  const std::uint64_t before = minor_page_faults(per_thread);
  plan->execute(a_t, c_t);
  const std::uint64_t faults = minor_page_faults(per_thread) - before;
  // Splitting messages into pieces of a few elements (DISTMM_TEST_CHUNK_LIMIT, a correctness
  // mode) makes tens of thousands of MPI calls, whose own bookkeeping may fault. Under
  // ThreadSanitizer every memory access and every wait appends to a per-thread trace whose pages
  // are first touched as it fills (274 faults seen on a loaded machine); under AddressSanitizer
  // a freed block is quarantined, so every small allocation of the simulator's waits takes
  // fresh memory (209 and 219 seen with two test programs running at once). The Release pass
  // checks the bound; the sanitizer passes check the rest.
  if (std::getenv("DISTMM_TEST_CHUNK_LIMIT") == nullptr && !kSanitizer) {
    EXPECT_LE(faults, 200u) << s << " rank " << comm.rank() << " of " << comm.size() << " ("
                            << comm.backend() << "): minor page faults of a warm execution";
  }
  // What the plan allocated is what the formulas say (and the program's memory check,
  // plan_allocation(), says: DryRunMatchesARealRun).
  EXPECT_EQ(plan->allocated_bytes(),
            expected_allocation(s, shape, comm.size(), comm.rank(), sizeof(double)));
  if (root) {
    EXPECT_DOUBLE_EQ(c_t(0, 0), arma::accu(b.col(0)));
  }
}

// The communicator's counters equal the README's formulas (formulas.hpp) exactly, on uneven
// shapes with empty shards; over all ranks, bytes sent equal bytes received.
void counters_match_formulas(Communicator& comm, const Strategy& s) {
  for (const MatmulShape shape :
       {MatmulShape{7, 5, 3}, MatmulShape{2, 3, 9}, MatmulShape{10, 4, 1}}) {
    const bool root = comm.rank() == 0;
    const arma::mat a = root ? integer_matrix<double>(shape.m, shape.k, 5) : arma::mat{};
    const arma::mat b = root ? integer_matrix<double>(shape.k, shape.n, 6) : arma::mat{};
    comm.barrier();
    comm.stats().reset();
    matmul(s, comm, shape, a, b, 0);
    const RankFigures got = measured(comm, sizeof(double));
    RankFigures want = expected_figures(s, shape, comm.size(), comm.rank(), sizeof(double));
    want.comm_s = got.comm_s;
    want.compute_s = got.compute_s;
    EXPECT_EQ(got, want) << s << " " << shape << " rank " << comm.rank() << ": sent "
                         << got.bytes_sent << " (want " << want.bytes_sent << "), received "
                         << got.bytes_received << " (want " << want.bytes_received << "), messages "
                         << got.messages_sent << "/" << got.messages_received << " (want "
                         << want.messages_sent << "/" << want.messages_received << "), params "
                         << got.persistent_param_bytes << "/" << got.peak_param_bytes << " (want "
                         << want.persistent_param_bytes << "/" << want.peak_param_bytes << ")";
    EXPECT_EQ(comm.stats().op(OpKind::compute).calls,
              expected_multiplies(s, shape, comm.size(), comm.rank()))
        << "local multiplies";
    const auto all = gather_figures(comm, got, 0);
    if (root) {
      std::uint64_t sent = 0, received = 0, msgs_sent = 0, msgs_received = 0;
      for (const RankFigures& f : all) {
        sent += f.bytes_sent;
        received += f.bytes_received;
        msgs_sent += f.messages_sent;
        msgs_received += f.messages_received;
      }
      EXPECT_EQ(sent, received) << s << " " << shape;
      EXPECT_EQ(msgs_sent, msgs_received) << s << " " << shape;
    }
  }
}

}  // namespace

void expect_planned_events(Communicator& comm, const std::vector<TraceEvent>& real,
                           const PlannedRun& planned, const std::string& what) {
  const auto& want = planned.ranks.at(static_cast<std::size_t>(comm.rank()));
  const auto& names = comm.stats().communicators();
  const std::vector<int> world = comm.world_ranks();
  ASSERT_EQ(real.size(), want.size()) << what << " rank " << comm.rank() << ": events";
  for (std::size_t i = 0; i < real.size(); ++i) {
    const TraceEvent& e = real[i];
    const PlannedEvent& w = want[i];
    SCOPED_TRACE(what + " rank " + std::to_string(comm.rank()) + " event " + std::to_string(i) +
                 " (" + std::string(name_of(e.op)) + ")");
    EXPECT_EQ(e.op, w.op);
    EXPECT_EQ(e.root, w.root);
    EXPECT_EQ(e.bytes_sent, w.bytes_sent);
    EXPECT_EQ(e.bytes_received, w.bytes_received);
    EXPECT_EQ(e.rows, w.rows);
    EXPECT_EQ(e.inner, w.inner);
    EXPECT_EQ(e.cols, w.cols);
    EXPECT_EQ(e.total_bytes, w.total_bytes);
    EXPECT_EQ(e.row_bytes, w.row_bytes);
    EXPECT_EQ(e.strided_bytes, w.strided_bytes);
    EXPECT_EQ(e.strided_blocks, w.strided_blocks);
    EXPECT_EQ(e.overlapped, w.overlapped);
    if (e.op == OpKind::sendrecv) {
      EXPECT_EQ(world.at(static_cast<std::size_t>(e.peer_to)), w.peer_to);
      EXPECT_EQ(world.at(static_cast<std::size_t>(e.peer_from)), w.peer_from);
    } else if (e.op != OpKind::compute) {
      EXPECT_EQ(names.at(static_cast<std::size_t>(e.comm)), group_name(planned, w.group));
    }
  }
}

namespace {

// A dry run (dry_run.hpp) records what a real run does: each rank's events (operation,
// root, communicator, bytes, multiply shape, peers), its counters after setup and one
// execution, and the memory its plan allocates, for shapes with uneven shards and idle ranks.
void dry_run_matches_a_real_run(Communicator& comm, const Strategy& s) {
  for (const MatmulShape shape :
       {MatmulShape{7, 5, 3}, MatmulShape{2, 3, 9}, MatmulShape{10, 4, 1}}) {
    const bool root = comm.rank() == 0;
    const arma::mat a_t = root ? integer_matrix<double>(shape.k, shape.m, 5) : arma::mat{};
    const arma::mat b = root ? integer_matrix<double>(shape.k, shape.n, 6) : arma::mat{};
    arma::mat c_t(root ? shape.n : 0, root ? shape.m : 0);
    const int replicas = s == strategy("hsdp") && comm.size() % 2 == 0 ? 2 : 1;
    comm.barrier();
    comm.stats().reset();
    const auto plan = make_plan(s, comm, shape, b, 0, mesh(replicas));
    plan->execute(a_t, c_t);
    const OpCounters once = comm.stats().total_communication();
    plan->execute(a_t, c_t);
    std::ostringstream what;
    what << s << " R=" << replicas << " " << shape << " rank " << comm.rank();
    SCOPED_TRACE(what.str());
    const DryRun dry = dry_run(s, shape, comm.size(), DataType::f64, mesh(replicas), 2);
    const DryRank& mine = dry.ranks.at(static_cast<std::size_t>(comm.rank()));
    EXPECT_EQ(mine.communication.bytes_sent, once.bytes_sent);
    EXPECT_EQ(mine.communication.bytes_received, once.bytes_received);
    EXPECT_EQ(mine.communication.messages_sent, once.messages_sent);
    EXPECT_EQ(mine.communication.messages_received, once.messages_received);
    EXPECT_EQ(mine.communication.calls, once.calls);
    EXPECT_EQ(mine.persistent_param_bytes, comm.stats().persistent_param_bytes());
    EXPECT_EQ(mine.peak_param_bytes, comm.stats().peak_param_bytes());
    EXPECT_EQ(mine.allocated_bytes, plan->allocated_bytes());
    EXPECT_EQ(mine.parameter_bytes, plan->parameter_bytes());
    // Its events as the time model replays them (planned_events() runs the same dry run).
    expect_planned_events(comm, comm.stats().events(),
                          planned_events(s, shape, comm.size(), 8, mesh(replicas), 2), what.str());
  }
}

}  // namespace

void hsdp_every_mesh(Communicator& comm) {
  const int p = comm.size();
  const bool root = comm.rank() == 0;
  for (int replicas = 1; replicas <= p; ++replicas) {
    if (p % replicas != 0) continue;
    SCOPED_TRACE("hsdp R=" + std::to_string(replicas) + " on " + std::to_string(p) + " ranks");
    // Exact on integer inputs, with uneven shards and more ranks than columns.
    for (const MatmulShape shape : {MatmulShape{11, 5, 7}, MatmulShape{4, 3, 2}}) {
      const arma::mat a = integer_matrix<double>(shape.m, shape.k, 21);
      const arma::mat b = integer_matrix<double>(shape.k, shape.n, 22);
      const arma::mat c = matmul(strategy("hsdp"), comm, shape, root ? a : arma::mat{},
                                 root ? b : arma::mat{}, 0, mesh(replicas));
      if (root) {
        EXPECT_TRUE(arma::approx_equal(c, arma::mat(a * b), "absdiff", 0.0)) << shape;
      }
    }
    // The counters equal the formulas; the plan allocates what the formulas say.
    for (const MatmulShape shape :
         {MatmulShape{7, 5, 3}, MatmulShape{2, 3, 9}, MatmulShape{10, 4, 1}}) {
      const arma::mat a = root ? integer_matrix<double>(shape.m, shape.k, 5) : arma::mat{};
      const arma::mat b = root ? integer_matrix<double>(shape.k, shape.n, 6) : arma::mat{};
      comm.barrier();
      comm.stats().reset();
      const auto plan = make_plan(strategy("hsdp"), comm, shape, b, 0, mesh(replicas));
      arma::mat a_t = root ? arma::mat(a.t()) : arma::mat{};
      arma::mat c_t(root ? shape.n : 0, root ? shape.m : 0);
      plan->execute(a_t, c_t);
      const RankFigures got = measured(comm, sizeof(double));
      RankFigures want =
          expected_figures(strategy("hsdp"), shape, p, comm.rank(), sizeof(double), replicas);
      want.comm_s = got.comm_s;
      want.compute_s = got.compute_s;
      EXPECT_EQ(got, want) << shape << " rank " << comm.rank() << ": sent " << got.bytes_sent
                           << " (want " << want.bytes_sent << "), received " << got.bytes_received
                           << " (want " << want.bytes_received << "), messages "
                           << got.messages_sent << "/" << got.messages_received << " (want "
                           << want.messages_sent << "/" << want.messages_received << ")";
      EXPECT_EQ(plan->allocated_bytes(),
                expected_allocation(strategy("hsdp"), shape, p, comm.rank(), sizeof(double), 0,
                                    replicas));
      std::ostringstream what;
      what << "hsdp R=" << replicas << " " << shape;
      expect_planned_events(comm, comm.stats().events(),
                            planned_events(strategy("hsdp"), shape, p, 8, mesh(replicas), 1),
                            what.str());
      if (root) {
        EXPECT_TRUE(arma::approx_equal(c_t, arma::mat((a * b).t()), "absdiff", 0.0));
      }
    }
  }
}

namespace {

constexpr StrategyCase kStrategyCases[] = {
    {"CountersMatchFormulas", counters_match_formulas},
    {"A4x3B3x5", a4x3_b3x5},
    {"A8x8B8x8", a8x8_b8x8},
    {"RowsNotDivisible", rows_not_divisible},
    {"MoreRanksThanRowsAndColumns", more_ranks_than_rows_and_columns},
    {"OneByOne", one_by_one},
    {"RandomTrials", random_trials},
    {"PlanRowsEntryPoint", plan_rows_entry_point},
    {"PlanRepeatedExecutions", plan_repeated_executions},
    {"PlanWarmExecutionTouchesNoFreshMemory", plan_warm_execution_touches_no_fresh_memory},
    {"DryRunMatchesARealRun", dry_run_matches_a_real_run},
};

}  // namespace

std::span<const StrategyCase> strategy_cases() {
  return kStrategyCases;
}

}  // namespace distmm::testing
