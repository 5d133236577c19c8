#pragma once
// The base of a strategy written as class templates over the element type (strategy.hpp).
#include <memory>

#include "distmm/plan.hpp"
#include "distmm/strategy.hpp"
#include "distmm/train_step.hpp"

namespace distmm {

// A strategy whose plan and training step are class templates over the element type:
// Derived defines
//   template <Element T> std::unique_ptr<MatmulPlan<T>> make_plan(Communicator&,
//       const MatmulShape&, const arma::Mat<T>& b, int root, const StrategySettings&) const;
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
  std::unique_ptr<TrainingStep<T>> make_step(const TrainingSetup<T>& setup) const {
    if constexpr (requires { self().template make_training_step<T>(setup); }) {
      return self().template make_training_step<T>(setup);
    } else {
      return Strategy::training_step(setup);
    }
  }
};

}  // namespace distmm
