#include "distmm/strategy.hpp"

#include <algorithm>
#include <charconv>
#include <mutex>

#include "distmm/error.hpp"
#include "distmm/layout.hpp"
#include "distmm/plan.hpp"
#include "distmm/train_step.hpp"
#include "strategies/builtin.hpp"

namespace distmm {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<Strategy>> strategies;
};

Registry& registry() {
  static Registry* r = [] {
    auto* made = new Registry;  // never destroyed: strategies may be looked up at exit
    made->strategies = builtin_strategies();
    return made;
  }();
  return *r;
}

}  // namespace

const std::string* StrategySettings::find(std::string_view name) const {
  const auto it = values_.find(name);
  return it == values_.end() ? nullptr : &it->second;
}

int StrategySettings::integer(std::string_view name, int fallback) const {
  const std::string* v = find(name);
  if (v == nullptr) return fallback;
  int out = 0;
  const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (ec != std::errc() || end != v->data() + v->size()) {
    throw InputError("--" + std::string(name) + " " + *v + ": not an integer", -1,
                     "--" + std::string(name));
  }
  return out;
}

StrategySettings Strategy::settle(const StrategySettings& given, const RunPlacement&) const {
  StrategySettings own;
  for (const StrategyOption& o : options()) {
    if (const std::string* v = given.find(o.name)) own.set(o.name, *v);
  }
  return own;
}

std::string Strategy::label(const StrategySettings&) const {
  return std::string(name());
}

std::optional<BlockLayout> Strategy::distributed_blocks(const MatmulShape&, int, int,
                                                        const StrategySettings&) const {
  return std::nullopt;
}

std::unique_ptr<DistributedPlan<double>> Strategy::distributed_plan(Communicator&,
                                                                    const MatmulShape&,
                                                                    const arma::Mat<double>&,
                                                                    const StrategySettings&) const {
  return nullptr;
}

std::unique_ptr<DistributedPlan<float>> Strategy::distributed_plan(Communicator&,
                                                                   const MatmulShape&,
                                                                   const arma::Mat<float>&,
                                                                   const StrategySettings&) const {
  return nullptr;
}

std::unique_ptr<TrainingStep<double>> Strategy::training_step(const TrainingSetup<double>&) const {
  return nullptr;
}
std::unique_ptr<TrainingStep<float>> Strategy::training_step(const TrainingSetup<float>&) const {
  return nullptr;
}

StrategyList all_strategies() {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  StrategyList out;
  for (const auto& s : r.strategies) out.push_back(*s);
  return out;
}

StrategyList training_strategies() {
  StrategyList out;
  for (const Strategy& s : all_strategies()) {
    if (s.trains()) out.push_back(s);
  }
  return out;
}

const Strategy* find_strategy(std::string_view name) {
  for (const Strategy& s : all_strategies()) {
    if (s.name() == name) return &s;
  }
  return nullptr;
}

std::string strategy_names(bool training) {
  const auto list = training ? training_strategies() : all_strategies();
  std::string out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (i > 0) out += i + 1 == list.size() ? " or " : ", ";
    out += list[i].get().name();
  }
  return out;
}

const Strategy& strategy(std::string_view name) {
  if (const Strategy* s = find_strategy(name)) return *s;
  throw InputError(
      "--strategy " + quote(name) + ": no such strategy (there are " + strategy_names() + ")", -1,
      "--strategy");
}

const Strategy& register_strategy(std::unique_ptr<Strategy> s) {
  if (!s) throw InputError("register_strategy: no strategy", -1, "register_strategy");
  const std::string name(s->name());
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  const bool taken = std::any_of(r.strategies.begin(), r.strategies.end(),
                                 [&](const auto& other) { return other->name() == name; });
  if (name.empty() || name == "all" || taken) {
    throw InputError("register_strategy: the name '" + name + "' is taken", -1,
                     "register_strategy");
  }
  r.strategies.push_back(std::move(s));
  return *r.strategies.back();
}

template <Element T>
arma::Mat<T> matmul(const Strategy& s, Communicator& comm, const MatmulShape& shape,
                    const arma::Mat<T>& a, const arma::Mat<T>& b, int root,
                    const StrategySettings& settings) {
  const bool at_root = comm.rank() == root;
  if (at_root && (a.n_rows != shape.m || a.n_cols != shape.k)) {
    throw Error("matmul: A is " + std::to_string(a.n_rows) + "x" + std::to_string(a.n_cols) +
                    ", expected " + std::to_string(shape.m) + "x" + std::to_string(shape.k),
                comm.rank(), "matmul");
  }
  const auto plan = make_plan(s, comm, shape, b, root, settings);
  // The plan's row-major layout, by transposing in and out: one pass each way.
  const arma::Mat<T> a_t = at_root ? arma::Mat<T>(a.t()) : arma::Mat<T>();
  arma::Mat<T> c_t(at_root ? shape.n : 0, at_root ? shape.m : 0);
  plan->execute(a_t, c_t);
  return at_root ? arma::Mat<T>(c_t.t()) : arma::Mat<T>();
}

template arma::Mat<double> matmul(const Strategy&, Communicator&, const MatmulShape&,
                                  const arma::Mat<double>&, const arma::Mat<double>&, int,
                                  const StrategySettings&);
template arma::Mat<float> matmul(const Strategy&, Communicator&, const MatmulShape&,
                                 const arma::Mat<float>&, const arma::Mat<float>&, int,
                                 const StrategySettings&);

}  // namespace distmm
