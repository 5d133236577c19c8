#include "strategy/train_cases.hpp"

#include <gtest/gtest.h>

#include <random>
#include <tuple>

#include "distmm/sharding.hpp"
#include "distmm/train.hpp"
#include "strategy/formulas.hpp"
#include "strategy/strategy_cases.hpp"

namespace distmm::testing {

TrainData train_problem(std::size_t m, std::size_t k, std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  const auto randn = [&](std::size_t rows, std::size_t cols) {
    arma::mat a(rows, cols);
    a.imbue([&] { return normal(rng); });
    return a;
  };
  TrainData d;
  d.x = randn(m, k);
  const arma::mat w_star = randn(k, n);
  d.t = d.x * w_star + 0.01 * randn(m, n);
  d.w0 = 0.1 * randn(k, n);
  return d;
}

StrategySettings TrainSetup::settings() const {
  if (grid) return {{"grid", grid_text(*grid)}};
  if (strategy == distmm::strategy("hsdp")) return {{"replicas", std::to_string(replicas)}};
  return {};
}

std::string name_of(const TrainSetup& s) {
  std::string name(s.strategy.name());
  if (s.strategy == strategy("hsdp")) name += " R=" + std::to_string(s.replicas);
  // (Appended apart: GCC 12 warns of a bogus overflow in " " + a temporary string.)
  if (s.grid) name.append(" ").append(grid_text(*s.grid));
  return name;
}

std::vector<TrainSetup> train_setups(int ranks) {
  std::vector<TrainSetup> out;
  for (const Strategy& s : training_strategies()) {
    if (s == strategy("hsdp")) {
      for (int r = 1; r <= ranks; ++r) {
        if (ranks % r == 0) out.push_back({s, r});
      }
    } else if (s == strategy("grid")) {
      for (int pm = 1; pm <= ranks; ++pm) {
        if (ranks % pm == 0) out.push_back({s, 1, Grid{pm, ranks / pm, 1}});
      }
      if (ranks > 1) out.push_back({s, 1, Grid{ranks - 1, 1, 1}});  // a rank idle
    } else {
      out.push_back({s, 1});
    }
  }
  return out;
}

bool same_setup(const TrainSetup& a, const TrainSetup& b) {
  return a.strategy == b.strategy && a.replicas == b.replicas && a.grid == b.grid;
}

TrainStepFigures expected_train_figures(const TrainSetup& setup, const MatmulShape& shape,
                                        int ranks, int rank, std::size_t element_bytes,
                                        Optimizer optimizer) {
  if (setup.grid) {
    return expected_grid_train_figures(*setup.grid, shape, ranks, rank, element_bytes, optimizer);
  }
  return expected_train_figures(setup.strategy, shape, ranks, rank, element_bytes, optimizer,
                                setup.replicas);
}

Block expected_checkpoint_block(const TrainSetup& setup, const MatmulShape& shape, int ranks,
                                int rank) {
  if (setup.grid) return expected_grid_checkpoint_block(*setup.grid, shape, rank);
  const Shard columns =
      expected_checkpoint_columns(setup.strategy, shape, ranks, rank, setup.replicas);
  return {0, shape.k, columns.offset, columns.count};
}

namespace {

void matches_single_process(Communicator& comm, const TrainSetup& setup, std::size_t m,
                            std::size_t k, std::size_t n) {
  const Strategy& s = setup.strategy;
  SCOPED_TRACE(name_of(setup));
  const TrainData d = train_problem(m, k, n, static_cast<unsigned>(m * 131 + k * 17 + n));
  TrainConfig config{7, 0.05};
  config.settings = setup.settings();
  const bool root = comm.rank() == 0;
  const TrainResult got = train_linear(s, comm, {m, k, n}, root ? d.x : arma::mat{},
                                       root ? d.t : arma::mat{}, root ? d.w0 : arma::mat{}, config);
  const TrainResult want = train_single_process(d.x, d.t, d.w0, config);
  ASSERT_EQ(got.losses.size(), config.steps);
  for (std::size_t i = 0; i < config.steps; ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-10 * want.losses[i]) << "step " << i;
    if (i > 0) {
      EXPECT_LT(got.losses[i], got.losses[i - 1]) << "the loss falls at step " << i;
    }
  }
  if (!root) {
    EXPECT_TRUE(got.w.is_empty());
    return;
  }
  ASSERT_EQ(got.w.n_rows, k);
  ASSERT_EQ(got.w.n_cols, n);
  const double rel = arma::abs(got.w - want.w).max() / arma::abs(want.w).max();
  EXPECT_LE(rel, 1e-10) << s.name() << " on " << comm.size() << " ranks, " << m << "x" << k << "x"
                        << n;
}

void uneven_shapes(Communicator& comm) {
  for (const TrainSetup& s : train_setups(comm.size())) {
    matches_single_process(comm, s, 37, 5, 7);
    matches_single_process(comm, s, 11, 3, 2);  // more ranks than parameter columns
    matches_single_process(comm, s, 64, 16, 1);
  }
}

// Per step, the counted volumes equal the formulas of the README (and of ZeRO, as ring
// bytes): DP all-reduces the gradient, FSDP all-gathers W twice and reduce-scatters the
// gradient; each also all-reduces the 8-byte loss.
void step_volumes_match_formulas(Communicator& comm) {
  const std::size_t m = 13, k = 4, n = 5, steps = 3;
  const int p = comm.size(), r = comm.rank();
  const TrainData d = train_problem(m, k, n, 3);
  const bool root = r == 0;
  const double psi = static_cast<double>(k * n * 8), loss = 8;
  const double own = static_cast<double>(shard_of(n, p, r).count * k * 8);
  const double others = p - 1;
  const double ring = p > 1 ? static_cast<double>(p - 1) / p : 0.0;
  for (const Strategy* each : {&strategy("dp"), &strategy("fsdp")}) {
    const Strategy& s = *each;
    RankStats after;
    train_linear(s, comm, {m, k, n}, root ? d.x : arma::mat{}, root ? d.t : arma::mat{},
                 root ? d.w0 : arma::mat{}, {steps, 0.05}, [&](std::size_t step, double) {
                   if (step + 1 == steps) after = comm.stats();
                 });
    const OpCounters all = after.total_communication();
    const OpCounters& allreduce = after.op(OpKind::allreduce);
    const OpCounters& allgather = after.op(OpKind::allgatherv);
    const OpCounters& reduce_scatter = after.op(OpKind::reduce_scatter);
    const auto per_step = [&](double v) { return v / static_cast<double>(steps); };
    if (p == 1) {
      EXPECT_EQ(all.bytes_sent, 0u);
      EXPECT_EQ(all.calls, 0u);
      continue;
    }
    if (s == strategy("dp")) {
      EXPECT_EQ(per_step(double(allreduce.calls)), 2);
      EXPECT_EQ(per_step(double(allreduce.bytes_sent)), others * (psi + loss));
      EXPECT_EQ(per_step(double(allreduce.bytes_received)), others * (psi + loss));
      EXPECT_DOUBLE_EQ(per_step(allreduce.ring_bytes), 2 * ring * (psi + loss));
      EXPECT_EQ(all.bytes_sent, allreduce.bytes_sent) << "DP uses nothing but all-reduce";
      EXPECT_EQ(after.persistent_param_bytes(), 2 * k * n * 8) << "W and its gradient";
    } else {
      EXPECT_EQ(per_step(double(allgather.calls)), 2);
      EXPECT_EQ(per_step(double(allgather.bytes_received)), 2 * (psi - own));
      EXPECT_EQ(per_step(double(allgather.bytes_sent)), 2 * others * own);
      EXPECT_DOUBLE_EQ(per_step(allgather.ring_bytes), 2 * ring * psi);
      EXPECT_EQ(per_step(double(reduce_scatter.calls)), 1);
      EXPECT_EQ(per_step(double(reduce_scatter.bytes_sent)), psi - own);
      EXPECT_EQ(per_step(double(reduce_scatter.bytes_received)), others * own);
      EXPECT_DOUBLE_EQ(per_step(reduce_scatter.ring_bytes), ring * psi);
      EXPECT_EQ(per_step(double(allreduce.bytes_sent)), others * loss);
      // ZeRO stage 3: 3 psi per step on the wire (2 all-gathers + 1 reduce-scatter), vs DP 2.
      EXPECT_DOUBLE_EQ(per_step(allgather.ring_bytes + reduce_scatter.ring_bytes), 3 * ring * psi);
      EXPECT_EQ(after.persistent_param_bytes(), static_cast<std::uint64_t>(2 * own))
          << "its shard of W and of the gradient";
      EXPECT_EQ(after.peak_param_bytes(), static_cast<std::uint64_t>(2 * own + psi))
          << "plus one unsharded W or gradient at a time";
    }
  }
}

// For every strategy (hsdp on every mesh): per step, each rank's counted bytes and held
// parameters + gradients equal the README's formulas and the step run dry (training_plan()),
// for SGD and Adam.
void step_figures_match_prediction(Communicator& comm) {
  const std::size_t m = 11, k = 3, n = 7, steps = 2;
  const TrainData d = train_problem(m, k, n, 5);
  const bool root = comm.rank() == 0;
  for (const TrainSetup& setup : train_setups(comm.size())) {
    for (const Optimizer o : {Optimizer::sgd, Optimizer::adam}) {
      SCOPED_TRACE(name_of(setup) + (o == Optimizer::adam ? " adam" : " sgd"));
      TrainConfig config{steps, 0.05};
      config.settings = setup.settings();
      config.optimizer = o;
      RankStats after;
      comm.barrier();
      train_linear(setup.strategy, comm, {m, k, n}, root ? d.x : arma::mat{},
                   root ? d.t : arma::mat{}, root ? d.w0 : arma::mat{}, config,
                   [&](std::size_t step, double) {
                     if (step + 1 == steps) after = comm.stats();
                   });
      const TrainStepFigures want =
          expected_train_figures(setup, {m, k, n}, comm.size(), comm.rank(), sizeof(double), o);
      EXPECT_EQ(
          training_plan(setup.strategy, {m, k, n}, comm.size(), comm.rank(), sizeof(double), config)
              .figures,
          want)
          << "rank " << comm.rank() << ": the dry run";
      const OpCounters all = after.total_communication();
      EXPECT_EQ(all.bytes_sent, steps * want.bytes_sent) << "rank " << comm.rank();
      EXPECT_EQ(all.bytes_received, steps * want.bytes_received) << "rank " << comm.rank();
      EXPECT_EQ(after.persistent_param_bytes(),
                want.persistent_param_grad_bytes + want.optimizer_state_bytes)
          << "rank " << comm.rank();
      EXPECT_EQ(after.peak_param_bytes(), want.peak_param_grad_bytes + want.optimizer_state_bytes)
          << "rank " << comm.rank();
    }
  }
}

// The time model replays the training steps' events (planned_events(train = true)).
void planned_step_events_match(Communicator& comm) {
  const std::size_t m = 11, k = 3, n = 7, steps = 3;
  const TrainData d = train_problem(m, k, n, 6);
  const bool root = comm.rank() == 0;
  for (const TrainSetup& setup : train_setups(comm.size())) {
    TrainConfig config{steps, 0.05};
    config.settings = setup.settings();
    std::vector<TraceEvent> events;
    comm.barrier();
    train_linear(setup.strategy, comm, {m, k, n}, root ? d.x : arma::mat{},
                 root ? d.t : arma::mat{}, root ? d.w0 : arma::mat{}, config,
                 [&](std::size_t step, double) {
                   if (step + 1 == steps) events = comm.stats().events();
                 });
    expect_planned_events(
        comm, events,
        planned_events(setup.strategy, {m, k, n}, comm.size(), 8, setup.settings(), steps, true),
        "train " + name_of(setup));
  }
}

// The whole run in float: W against single-process float SGD, and every per-step volume half
// of double's but the loss (a double in either case).
void float_run(Communicator& comm, const Strategy& s) {
  const std::size_t m = 23, k = 6, n = 5;
  const TrainData d = train_problem(m, k, n, 77);
  const arma::fmat x = arma::conv_to<arma::fmat>::from(d.x),
                   t = arma::conv_to<arma::fmat>::from(d.t),
                   w0 = arma::conv_to<arma::fmat>::from(d.w0);
  const TrainConfig config{5, 0.05};
  const bool root = comm.rank() == 0;
  comm.barrier();
  const TrainResultOf<float> got =
      train_linear(s, comm, {m, k, n}, root ? x : arma::fmat{}, root ? t : arma::fmat{},
                   root ? w0 : arma::fmat{}, config);
  const std::uint64_t float_bytes = comm.stats().total_communication().bytes_received;
  comm.barrier();
  train_linear(s, comm, {m, k, n}, root ? d.x : arma::mat{}, root ? d.t : arma::mat{},
               root ? d.w0 : arma::mat{}, config);
  const std::uint64_t double_bytes = comm.stats().total_communication().bytes_received;
  // The loss all-reduce receives 8 bytes from every other rank per step in both runs.
  const std::uint64_t loss = 8 * static_cast<std::uint64_t>(comm.size() - 1) * config.steps;
  EXPECT_EQ(2 * (float_bytes - loss), double_bytes - loss) << s.name() << " rank " << comm.rank();
  if (!root) return;
  const TrainResultOf<float> want = train_single_process(x, t, w0, config);
  const float rel = arma::abs(got.w - want.w).max() / arma::abs(want.w).max();
  EXPECT_LE(rel, 1e-4f) << s.name() << " on " << comm.size() << " ranks";
}

// Adam (bias-corrected, b1 0.9, b2 0.999, eps 1e-8): W against single-process Adam, the loss
// falling, and the moments held as the parameters are — all of W under DP, the rank's columns
// under FSDP: parameters + gradients + M + V = 4 blocks of that size per rank.
void adam_matches_single_process_adam(Communicator& comm) {
  for (const TrainSetup& setup : train_setups(comm.size())) {
    const Strategy& s = setup.strategy;
    SCOPED_TRACE(name_of(setup));
    for (const auto& [m, k, n] :
         {std::tuple<std::size_t, std::size_t, std::size_t>{11, 4, 5}, {3, 7, 2}, {17, 5, 9}}) {
      const TrainData d = train_problem(m, k, n, static_cast<unsigned>(m + 5 * k + 11 * n));
      TrainConfig config{9, 0.05};
      config.optimizer = Optimizer::adam;
      config.settings = setup.settings();
      const bool root = comm.rank() == 0;
      comm.barrier();
      const TrainResult got =
          train_linear(s, comm, {m, k, n}, root ? d.x : arma::mat{}, root ? d.t : arma::mat{},
                       root ? d.w0 : arma::mat{}, config);
      std::size_t held = k * (s == strategy("dp") || comm.size() == 1
                                  ? n
                                  : shard_of(n, comm.size(), comm.rank()).count);
      if (s == strategy("hsdp") && comm.size() > 1) {
        const int group = comm.size() / setup.replicas;
        held = k * shard_of(n, group, comm.rank() % group).count;
      }
      if (setup.grid) {  // its block of W, every rank's its own
        const Block b = expected_checkpoint_block(setup, {m, k, n}, comm.size(), comm.rank());
        held = b.rows * b.cols;
      }
      EXPECT_EQ(comm.stats().persistent_param_bytes(), 4 * held * sizeof(double))
          << s.name() << " rank " << comm.rank() << ": W, G, M and V";
      EXPECT_LT(got.losses.back(), got.losses.front()) << s.name();
      if (!root) continue;
      const TrainResult want = train_single_process(d.x, d.t, d.w0, config);
      for (std::size_t i = 0; i < config.steps; ++i) {
        EXPECT_NEAR(got.losses[i], want.losses[i], 1e-10 * want.losses[i]) << "step " << i;
      }
      const double rel = arma::abs(got.w - want.w).max() / arma::abs(want.w).max();
      EXPECT_LE(rel, 1e-10) << s.name() << " on " << comm.size() << " ranks, " << m << "x" << k
                            << "x" << n;
    }
  }
}

void float_matches_single_process_float(Communicator& comm) {
  for (const Strategy& s : training_strategies()) float_run(comm, s);
}

constexpr TrainCase kTrainCases[] = {
    {"FloatMatchesSingleProcessFloat", float_matches_single_process_float},
    {"AdamMatchesSingleProcessAdam", adam_matches_single_process_adam},
    {"MatchesSingleProcessOnUnevenShapes", uneven_shapes},
    {"StepVolumesMatchFormulas", step_volumes_match_formulas},
    {"StepFiguresMatchPrediction", step_figures_match_prediction},
    {"PlannedStepEventsMatch", planned_step_events_match},
};

}  // namespace

std::span<const TrainCase> train_cases() {
  return kTrainCases;
}

}  // namespace distmm::testing
