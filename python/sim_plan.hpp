#pragma once
// A plan on the simulator that lives across calls: its N ranks are threads of run_simulated()
// that set the plan up once and then execute it each time the caller asks, as a plan under
// mpirun does. The caller (Python) holds A and C; rank 0 reads and writes them in place.
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "distmm/communicator.hpp"
#include "distmm/plan.hpp"
#include "distmm/report.hpp"
#include "distmm/simulator.hpp"

namespace distmm::python {

template <Element T>
class SimPlan {
 public:
  // Sets the plan up on `ranks` threads (make(comm) on each; rank 0's reads B). Throws what a
  // rank threw.
  SimPlan(int ranks, std::function<std::unique_ptr<MatmulPlan<T>>(Communicator&)> make)
      : ranks_(ranks), figures_(static_cast<std::size_t>(ranks)) {
    runner_ = std::thread([this, make = std::move(make)] {
      try {
        run_simulated(ranks_, [&](Communicator& comm) { serve(comm, make); });
      } catch (...) {
        std::lock_guard lock(mu_);
        error_ = std::current_exception();
      }
      std::lock_guard lock(mu_);
      finished_ = true;
      cv_.notify_all();
    });
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return ready_ == ranks_ || finished_; });
    if (finished_) {
      lock.unlock();
      runner_.join();
      std::rethrow_exception(error_);
    }
  }
  ~SimPlan() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      ++generation_;
      cv_.notify_all();
    }
    if (runner_.joinable()) runner_.join();
  }
  SimPlan(const SimPlan&) = delete;
  SimPlan& operator=(const SimPlan&) = delete;

  // C^T (n x m, c_t) = (A B)^T from A^T (k x m, a_t), both the caller's memory. Every rank
  // executes once; throws what a rank threw (the plan is closed after that).
  void execute(const arma::Mat<T>& a_t, arma::Mat<T>& c_t) {
    std::unique_lock lock(mu_);
    if (finished_) throw Error("distmm: this plan's ranks stopped after an error; make another");
    a_t_ = &a_t;
    c_t_ = &c_t;
    done_ = 0;
    ++generation_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return done_ == ranks_ || finished_; });
    if (finished_) {
      lock.unlock();
      if (runner_.joinable()) runner_.join();
      std::rethrow_exception(error_);
    }
  }

  // Every rank's figures of the last execution, and its plan's allocation.
  const std::vector<RankFigures>& figures() const { return figures_; }
  std::uint64_t allocated_bytes() const { return allocated_; }
  int ranks() const { return ranks_; }

 private:
  // A rank that fails tells the others waiting here (those in a collective are released by
  // the simulator); run_simulated() then rethrows the first failure.
  void serve(Communicator& comm,
             const std::function<std::unique_ptr<MatmulPlan<T>>(Communicator&)>& make) {
    try {
      serve_calls(comm, make);
    } catch (...) {
      std::lock_guard lock(mu_);
      failed_ = true;
      cv_.notify_all();
      throw;
    }
  }
  void serve_calls(Communicator& comm,
                   const std::function<std::unique_ptr<MatmulPlan<T>>(Communicator&)>& make) {
    const std::unique_ptr<MatmulPlan<T>> plan = make(comm);
    const bool root = comm.rank() == plan->root();
    std::size_t seen = 0;
    {
      std::lock_guard lock(mu_);
      if (root) allocated_ = plan->allocated_bytes();
      ++ready_;
      cv_.notify_all();
    }
    const arma::Mat<T> none_a;
    arma::Mat<T> none_c;
    while (true) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return generation_ > seen || failed_; });
        seen = generation_;
        if (stop_ || failed_) return;
      }
      comm.stats().reset();
      plan->execute(root ? *a_t_ : none_a, root ? *c_t_ : none_c);
      figures_[static_cast<std::size_t>(comm.rank())] = measured(comm, sizeof(T));
      std::lock_guard lock(mu_);
      ++done_;
      cv_.notify_all();
    }
  }

  int ranks_;
  std::vector<RankFigures> figures_;
  std::thread runner_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::size_t generation_ = 0;
  int ready_ = 0, done_ = 0;
  bool stop_ = false, finished_ = false, failed_ = false;
  std::exception_ptr error_;
  std::uint64_t allocated_ = 0;
  const arma::Mat<T>* a_t_ = nullptr;
  arma::Mat<T>* c_t_ = nullptr;
};

}  // namespace distmm::python
