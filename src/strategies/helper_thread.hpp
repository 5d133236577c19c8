#pragma once
// A thread that runs one task at a time for its owner, started once (a plan's setup) so that
// executing a plan creates no thread. run() hands it a task; wait() blocks until the task is
// done and rethrows what it threw.
//
// On a rank bound to one core the helper runs at a lower scheduling priority (nice +10) than
// its owner: the owner's short communication call then runs at once instead of waiting out
// the helper's time slice (measured: a ring step's sendrecv started 3.8 ms after the helper's
// multiply at 1024^3), and the helper computes while the owner waits. A rank that may run on
// several cores keeps its helper at its own priority: there the helper shares the cores with
// other ranks' threads too, and at nice +10 it starved behind their main threads polling for
// messages (4 ranks unbound on 2 cores: one ring step's multiply 220 ms where it takes 26-55).
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "distmm/blas.hpp"

namespace distmm {

class HelperThread {
 public:
  HelperThread() : thread_([this] { loop(); }) {}
  ~HelperThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  HelperThread(const HelperThread&) = delete;
  HelperThread& operator=(const HelperThread&) = delete;

  // `task` must stay alive until wait() returns (it is referenced, not copied).
  void run(const std::function<void()>& task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      task_ = &task;
      done_ = false;
      failure_ = nullptr;
    }
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_; });
    if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
  }
  // The same on the owner's failure path: the task reads buffers about to go, so the owner
  // waits for it before unwinding; what the task threw is dropped for the owner's own error.
  void wait_before_unwinding() noexcept {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_; });
    failure_ = nullptr;
  }

 private:
  void loop() {
    // Linux: a thread's own nice value (setpriority on its thread id); best effort.
    if (allowed_cpus().size() == 1) {
      const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
      ::setpriority(PRIO_PROCESS, tid, ::getpriority(PRIO_PROCESS, tid) + 10);
    }
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || task_ != nullptr; });
      if (task_ == nullptr) return;
      const std::function<void()>* task = std::exchange(task_, nullptr);
      lock.unlock();
      std::exception_ptr failure;
      try {
        (*task)();
      } catch (...) {
        failure = std::current_exception();
      }
      lock.lock();
      failure_ = failure;
      done_ = true;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void()>* task_ = nullptr;
  bool done_ = true, stop_ = false;
  std::exception_ptr failure_;
  std::thread thread_;  // last: started once the state above exists
};

}  // namespace distmm
