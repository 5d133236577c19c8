// The distmm program (distmm/program.hpp): runs a job on the MPI backend (under mpirun) or,
// with --ranks N, on N threads of the in-process simulator.
#include "distmm/program.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>

#include "cli/calibrate_job.hpp"
#include "cli/matmul_job.hpp"
#include "cli/options.hpp"
#include "cli/train_job.hpp"
#include "distmm/blas.hpp"
#include "distmm/error.hpp"
#include "distmm/memory.hpp"
#include "distmm/mpi_session.hpp"
#include "distmm/simulator.hpp"

namespace {

using namespace distmm;
using namespace distmm::cli;

// The launcher's view of this process, read before MPI starts (for messages that must be
// printed once, and for refusing --ranks inside a multi-process job).
int launcher_env(const char* open_mpi, const char* pmi, int fallback) {
  for (const char* name : {open_mpi, pmi}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return fallback;
}

// Bounds MPI's start-up by --timeout: MPI_Init, communicator creation and the host exchange
// wait on every other rank, and a rank whose peer's host vanished would wait for ever. If
// start-up has not finished when the bound passes, the rank says which stage it is in and
// leaves with exit code 3 (it cannot use MPI to tell the others: MPI is what hangs).
class StartupWatchdog {
 public:
  StartupWatchdog(double timeout_s, int rank) : rank_(rank) {
    if (timeout_s <= 0) return;
    thread_ = std::thread([this, timeout_s] {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [this] { return done_; }))
        return;
      char line[256];
      std::snprintf(line, sizeof line,
                    "distmm: error: rank %d: MPI start-up did not finish within %g s (--timeout): "
                    "still in %s\n",
                    rank_, timeout_s, stage_.load());
      // write(2) and _exit: no locks, no destructors of a half-started MPI.
      const ssize_t ignored = write(STDERR_FILENO, line, std::strlen(line));
      (void)ignored;
      _exit(kRunFailed);
    });
  }
  ~StartupWatchdog() { finish(); }
  StartupWatchdog(const StartupWatchdog&) = delete;
  StartupWatchdog& operator=(const StartupWatchdog&) = delete;

  void stage(const char* name) { stage_ = name; }
  void finish() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  int rank_;
  std::atomic<const char*> stage_{"MPI_Init"};
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// A test hook: DISTMM_TEST_STARTUP_DELAY=RANK:MS makes that rank stall for MS ms inside
// start-up, as a rank whose host has vanished would.
void test_startup_delay(int rank) {
  const char* spec = std::getenv("DISTMM_TEST_STARTUP_DELAY");
  if (spec == nullptr) return;
  int who = -1, ms = 0;
  if (std::sscanf(spec, "%d:%d", &who, &ms) == 2 && who == rank) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
}

int run_job(Communicator& comm, const Options& options) {
  switch (options.mode) {
    case Options::Mode::train:
      return run_train_job(comm, options, std::cout, std::cerr);
    case Options::Mode::calibrate:
      return run_calibrate_job(comm, options, std::cout, std::cerr);
    case Options::Mode::matmul:
      break;
  }
  return run_matmul_job(comm, options, std::cout, std::cerr);
}

int run_dry(const Options& options, int ranks) {
  return options.mode == Options::Mode::train
             ? run_train_dry_job(options, ranks, std::cout, std::cerr)
             : run_dry_job(options, ranks, std::cout, std::cerr);
}

int run_simulator(const Options& options) {
  const int ranks = *options.ranks;
  // Every rank is a thread of this process, bound to its even share of the process's CPUs,
  // as mpirun binds its processes: left to the scheduler, two rank threads shared one core
  // for a whole multiply in about half the processes (both ranks' first multiply twice as
  // long).
  const std::vector<int> cpus = allowed_cpus();
  const std::vector<std::vector<int>> masks(static_cast<std::size_t>(ranks), cpus);
  set_blas_threads(plan_cpus(0, masks, host_cpus(), false).blas_threads);
  int code = kSuccess;
  try {
    run_simulated(ranks, [&](Communicator& comm) {
      set_thread_affinity(share_of_cpus(cpus, static_cast<std::size_t>(comm.rank()),
                                        static_cast<std::size_t>(ranks)));
      const int c = run_job(comm, options);
      if (comm.rank() == 0) code = c;
    });
  } catch (const std::exception& e) {
    std::cerr << "distmm: error: " << printable(e.what()) << std::endl;
    return kRunFailed;
  }
  return code;
}

// Prints what parsing the command line gave instead of options: help or version on stdout
// (code 0), or the one-line error.
void print_parse_result(const ParseResult& parsed) {
  if (parsed.exit_code == kSuccess) {
    std::cout << parsed.message << std::flush;
  } else {
    std::cerr << "distmm: error: " << printable(parsed.message) << std::endl;
  }
}

// Under mpirun every process runs this. The ranks always start MPI, so that whatever ends the
// run — help, a bad argument, bad input, a finished job — ends it on every rank at once with
// one agreed exit code: rank 0 prints, everyone leaves through MPI_Finalize together, and no
// rank's early exit makes Open MPI cut the job (and rank 0's message) short.
int run_mpi(int argc, char** argv, const ParseResult& parsed, int env_rank, int env_size) {
  const double timeout_s = parsed.options ? parsed.options->timeout_s : 0;
  StartupWatchdog watchdog(timeout_s, env_rank);
  test_startup_delay(env_rank);
  MpiSession session(argc, argv);
  const bool root = session.world_rank() == 0;
  if (!parsed.options) {
    watchdog.finish();
    if (root) print_parse_result(parsed);
    return session.agree_max(parsed.exit_code);
  }
  const Options& options = *parsed.options;
  if (options.ranks && env_size > 1) {
    watchdog.finish();
    if (root) {
      std::cerr << "distmm: error: --ranks " << *options.ranks
                << ": cannot be combined with mpirun -np " << env_size << " (use one or the other)"
                << std::endl;
    }
    return session.agree_max(kBadInput);
  }
  if (options.dry_run) {
    // Nothing moves: rank 0 predicts for every rank, the others wait for its verdict.
    watchdog.finish();
    const int code =
        root ? run_dry(options, options.ranks.value_or(session.world_size())) : kSuccess;
    return session.agree_max(code);
  }
  int rank = session.world_rank();
  try {
    watchdog.stage("the exchange of CPU masks between the ranks of each host");
    const MpiSession::HostMasks host = session.host_masks(allowed_cpus());
    const CpuPlan cpus =
        plan_cpus(host.local_rank, host.masks, host_cpus(), bound_by_launcher_default());
    if (cpus.widened) set_process_affinity(cpus.cpus);
    set_blas_threads(cpus.blas_threads);
    watchdog.stage("communicator creation (MPI_Comm_dup)");
    auto world = session.world(MpiOptions{.timeout_s = options.timeout_s});
    // From here every wait is bounded by --timeout inside the communicator.
    watchdog.finish();
    rank = world->rank();
    return run_job(*world, options);  // every rank returns the code rank 0 decided
  } catch (const Error& e) {
    // distmm's errors name their rank already.
    std::cerr << "distmm: error: " << (e.rank() < 0 ? "rank " + std::to_string(rank) + ": " : "")
              << printable(e.what()) << std::endl;
    session.abort(kRunFailed);
  } catch (const std::exception& e) {
    std::cerr << "distmm: error: rank " << rank << ": " << printable(e.what()) << std::endl;
    session.abort(kRunFailed);
  }
}

}  // namespace

int distmm::run_program(int argc, char** argv) {
  // Freed memory is kept for reuse by both backends (memory.hpp): a plan's warm executions
  // then take no fresh pages, also inside MPI's or the simulator's collectives.
  retain_freed_memory();
  const int env_rank = launcher_env("OMPI_COMM_WORLD_RANK", "PMI_RANK", 0);
  const int env_size = launcher_env("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", 1);
  const ParseResult parsed = parse_options(argc, argv);
  if (MpiSession::launched_by_mpirun() &&
      !(parsed.options && parsed.options->ranks && env_size == 1)) {
    return run_mpi(argc, argv, parsed, env_rank, env_size);
  }
  // Not under mpirun (or mpirun -np 1 --ranks N): one process, no MPI unless the job needs it.
  if (!parsed.options) {
    print_parse_result(parsed);
    return parsed.exit_code;
  }
  const Options& options = *parsed.options;
  if (options.dry_run) return run_dry(options, options.ranks.value_or(1));
  if (options.ranks) return run_simulator(options);
  return run_mpi(argc, argv, parsed, 0, 1);
}
