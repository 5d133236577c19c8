#pragma once
// The base of a strategy written as class templates over the element type (strategy.hpp).
#include <memory>

#include "distmm/layout.hpp"
#include "distmm/plan.hpp"
#include "distmm/strategy.hpp"
#include "distmm/train_step.hpp"

namespace distmm {

// A strategy whose plan and training step are class templates over the element type:
// Derived defines
//   template <Element T> std::unique_ptr<MatmulPlan<T>> make_plan(Communicator&,
//       const MatmulShape&, const arma::Mat<T>& b, int root, const StrategySettings&) const;
// and, if it has a distributed layout (layout.hpp), its blocks and
//   template <Element T> std::unique_ptr<DistributedPlan<T>> make_distributed_plan(
//       Communicator&, const MatmulShape&, const arma::Mat<T>& b_block,
//       const StrategySettings&) const;
// and, if it trains,
//   template <Element T> std::unique_ptr<TrainingStep<T>> make_training_step(
//       const TrainingSetup<T>&) const;
template <class Derived>
class StrategyOf : public Strategy {
 public:
  std::unique_ptr<MatmulPlan<double>> plan(Communicator& comm, const MatmulShape& shape,
                                           const arma::Mat<double>& b, int root,
                                           const StrategySettings& settings) const override {
    return self().template make_plan<double>(comm, shape, b, root, settings);
  }
  std::unique_ptr<MatmulPlan<float>> plan(Communicator& comm, const MatmulShape& shape,
                                          const arma::Mat<float>& b, int root,
                                          const StrategySettings& settings) const override {
    return self().template make_plan<float>(comm, shape, b, root, settings);
  }
  std::unique_ptr<DistributedPlan<double>> distributed_plan(
      Communicator& comm, const MatmulShape& shape, const arma::Mat<double>& b_block,
      const StrategySettings& settings) const override {
    return make_distributed<double>(comm, shape, b_block, settings);
  }
  std::unique_ptr<DistributedPlan<float>> distributed_plan(
      Communicator& comm, const MatmulShape& shape, const arma::Mat<float>& b_block,
      const StrategySettings& settings) const override {
    return make_distributed<float>(comm, shape, b_block, settings);
  }
  bool trains() const override {
    return requires(const Derived& d, const TrainingSetup<double>& s) {
      d.template make_training_step<double>(s);
    };
  }
  std::unique_ptr<TrainingStep<double>> training_step(
      const TrainingSetup<double>& setup) const override {
    return make_step<double>(setup);
  }
  std::unique_ptr<TrainingStep<float>> training_step(
      const TrainingSetup<float>& setup) const override {
    return make_step<float>(setup);
  }

 private:
  const Derived& self() const { return static_cast<const Derived&>(*this); }
  template <Element T>
  std::unique_ptr<DistributedPlan<T>> make_distributed(Communicator& comm, const MatmulShape& shape,
                                                       const arma::Mat<T>& b_block,
                                                       const StrategySettings& settings) const {
    if constexpr (requires {
                    self().template make_distributed_plan<T>(comm, shape, b_block, settings);
                  }) {
      return self().template make_distributed_plan<T>(comm, shape, b_block, settings);
    } else {
      return Strategy::distributed_plan(comm, shape, b_block, settings);
    }
  }
  template <Element T>
  std::unique_ptr<TrainingStep<T>> make_step(const TrainingSetup<T>& setup) const {
    if constexpr (requires { self().template make_training_step<T>(setup); }) {
      return self().template make_training_step<T>(setup);
    } else {
      return Strategy::training_step(setup);
    }
  }
};

}  // namespace distmm
