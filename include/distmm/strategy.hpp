#pragma once
// A strategy is one unit: its name and its own options, its plan (plan.hpp: set up once,
// executed many times), and its training step where it trains (train_step.hpp). Everything
// else distmm has of a strategy follows from those: the counters and the memory from running
// them, the dry run and the time model's prediction from running them on a communicator that
// moves no data (dry_run.hpp), the report and the trace from the counters. One registry lists
// the strategies by name; a strategy from outside the library registers itself there and is
// then one like the others (examples/custom_strategy.cpp).
#include <armadillo>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distmm/communicator.hpp"
#include "distmm/layout.hpp"
#include "distmm/shape.hpp"

namespace distmm {

template <Element T>
class MatmulPlan;
template <Element T>
class TrainingStep;
template <Element T>
struct TrainingSetup;

// One of a strategy's own options: the program's flag --NAME VALUE (Python: a keyword).
struct StrategyOption {
  std::string name;        // "replicas"
  std::string value_name;  // "R", for --help
  std::string help;
  bool whole_number = true;  // a whole number from 1 to `max` (else any text)
  long long max = 4096;
};

// The values of a run's strategy options, by option name: as given (the program's flags), then
// settled by each strategy for the run (Strategy::settle).
class StrategySettings {
 public:
  StrategySettings() = default;
  StrategySettings(std::initializer_list<std::pair<const std::string, std::string>> values)
      : values_(values) {}

  // The value given for option `name`, or nullptr.
  const std::string* find(std::string_view name) const;
  // Option `name` as an integer, or `fallback` when not given; InputError naming --NAME when
  // the value is not one.
  int integer(std::string_view name, int fallback) const;
  void set(std::string name, std::string value) { values_[std::move(name)] = std::move(value); }
  const std::map<std::string, std::string, std::less<>>& values() const { return values_; }
  bool empty() const { return values_.empty(); }
  bool operator==(const StrategySettings&) const = default;

 private:
  std::map<std::string, std::string, std::less<>> values_;
};

// The run a strategy's settings are settled for: where its ranks are (hsdp: one replica group
// per host) and what it multiplies (grid auto: the grid for the shape and the memory).
struct RunPlacement {
  int ranks = 1;
  int hosts = 1;
  MatmulShape shape{};            // C (m x n) = A (m x k) B (k x n); training: X (m x k), W (k x n)
  std::size_t element_bytes = 8;  // 4 for f32
  double memory_per_rank = 0;     // bytes a rank may hold (0: no limit known)
  bool distributed = false;  // --layout distributed (layout.hpp): what a strategy moves differs
  bool training = false;     // train: the settings of a training step (grid: 2-D grids only)
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // The name --strategy takes ("fsdp").
  virtual std::string_view name() const = 0;
  // One line: what it shards, for --help and listings.
  virtual std::string_view description() const = 0;
  // Its own options (none for most).
  virtual std::vector<StrategyOption> options() const { return {}; }
  // Its settings for a run of `where`: its options' values from `given` (the others'
  // ignored), each default filled in, checked. Throws InputError naming the flag.
  virtual StrategySettings settle(const StrategySettings& given, const RunPlacement& where) const;
  // Its name with its settled settings, as tables show it ("hsdp R=2").
  virtual std::string label(const StrategySettings& settled) const;
  // A line printed under the table about its settled settings that the label has no room for
  // (grid: whether auto chose it, how many ranks idle); empty for none.
  virtual std::string note(const StrategySettings& settled) const {
    (void)settled;
    return {};
  }

  // Its plan for C = A @ B (plan.hpp): B (k x n) read on `root` only; `settings` settled for
  // the communicator's ranks. Collective.
  virtual std::unique_ptr<MatmulPlan<double>> plan(Communicator& comm, const MatmulShape& shape,
                                                   const arma::Mat<double>& b, int root,
                                                   const StrategySettings& settings) const = 0;
  virtual std::unique_ptr<MatmulPlan<float>> plan(Communicator& comm, const MatmulShape& shape,
                                                  const arma::Mat<float>& b, int root,
                                                  const StrategySettings& settings) const = 0;

  // The distributed layout (layout.hpp): this rank's blocks of A, B and C, or nothing where
  // the strategy has no distributed form; its plan, set up from this rank's block of B
  // (b_block, b.rows x b.cols of the layout). Collective.
  virtual std::optional<BlockLayout> distributed_blocks(const MatmulShape& shape, int ranks,
                                                        int rank,
                                                        const StrategySettings& settings) const;
  virtual std::unique_ptr<DistributedPlan<double>> distributed_plan(
      Communicator& comm, const MatmulShape& shape, const arma::Mat<double>& b_block,
      const StrategySettings& settings) const;
  virtual std::unique_ptr<DistributedPlan<float>> distributed_plan(
      Communicator& comm, const MatmulShape& shape, const arma::Mat<float>& b_block,
      const StrategySettings& settings) const;

  // Whether it trains a linear layer (train.hpp), and its training step: data and parameters
  // placed, every buffer allocated. Collective. nullptr for a strategy that does not train.
  virtual bool trains() const { return false; }
  virtual std::unique_ptr<TrainingStep<double>> training_step(
      const TrainingSetup<double>& setup) const;
  virtual std::unique_ptr<TrainingStep<float>> training_step(
      const TrainingSetup<float>& setup) const;
  // Figures of a training run's report that only this strategy has (name, value): the
  // accounting of the paper it comes from, for one. `parameter_bytes`: W's.
  virtual std::vector<std::pair<std::string, double>> training_report(
      double parameter_bytes) const {
    (void)parameter_bytes;
    return {};
  }
};

inline std::ostream& operator<<(std::ostream& out, const Strategy& s) {
  return out << s.name();
}
// A strategy is one object, in the registry: the same strategy is the same object.
inline bool operator==(const Strategy& a, const Strategy& b) {
  return &a == &b;
}

using StrategyList = std::vector<std::reference_wrapper<const Strategy>>;

// StrategyOf<Derived> (strategy_of.hpp) implements a strategy from class templates.

// The registry. The built-in strategies come first, in the order `--strategy all` runs them;
// then any registered by the program or library using distmm, in their order.
StrategyList all_strategies();
// Those of them that train.
StrategyList training_strategies();
// The strategy named `name`, or nullptr.
const Strategy* find_strategy(std::string_view name);
// The same; InputError naming --strategy and the names there are when there is none.
const Strategy& strategy(std::string_view name);
// Adds a strategy; InputError when its name is taken (or "all"). Returns it.
const Strategy& register_strategy(std::unique_ptr<Strategy> s);
// The registered names, "a, b or c" (for messages); `training`: those that train.
std::string strategy_names(bool training = false);

// One-shot C = A @ B by strategy `s`: sets up a plan (plan.hpp), executes it once and returns
// C on `root` (an empty matrix elsewhere); A (m x k) and B (k x n) are read on `root` only.
// It transposes A in and C out of the plan's row-major layout: for repeated multiplies, or
// to move each byte once, use make_plan() and execute(). `settings`: the strategy's options
// (settled for the communicator's ranks, absent ones defaulted).
template <Element T>
arma::Mat<T> matmul(const Strategy& s, Communicator& comm, const MatmulShape& shape,
                    const arma::Mat<T>& a, const arma::Mat<T>& b, int root = 0,
                    const StrategySettings& settings = {});

}  // namespace distmm
