// distmm: runs the matmul job on the MPI backend (under mpirun) or, with --ranks N, on N
// threads of the in-process simulator.
#include <chrono>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <thread>

#include "cli/matmul_job.hpp"
#include "cli/options.hpp"
#include "cli/train_job.hpp"
#include "distmm/blas.hpp"
#include "distmm/error.hpp"
#include "distmm/mpi_session.hpp"
#include "distmm/simulator.hpp"

namespace {

using namespace distmm;

// Under mpirun, the first process to exit non-zero makes Open MPI end the job at once, and an
// error line rank 0 has not yet written (or mpirun not yet forwarded) is lost. Only rank 0
// prints errors, so the other ranks give it a head start before failing too.
int after_rank_zero(int rank, int code) {
  if (rank != 0 && code != 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  return code;
}
using namespace distmm::cli;

// The launcher's view of this process, read before MPI starts (for messages that must be
// printed once, and for refusing --ranks inside a multi-process job).
int launcher_env(const char* open_mpi, const char* pmi, int fallback) {
  for (const char* name : {open_mpi, pmi}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return fallback;
}

int run_job(Communicator& comm, const Options& options) {
  return options.mode == Options::Mode::train ? run_train_job(comm, options, std::cout, std::cerr)
                                              : run_matmul_job(comm, options, std::cout, std::cerr);
}

int run_simulator(const Options& options) {
  const int ranks = *options.ranks;
  // Every rank is a thread of this process, on this process's CPUs.
  const std::vector<std::vector<int>> masks(static_cast<std::size_t>(ranks), allowed_cpus());
  set_blas_threads(plan_cpus(0, masks, host_cpus(), false).blas_threads);
  int code = kSuccess;
  try {
    run_simulated(ranks, [&](Communicator& comm) {
      const int c = run_job(comm, options);
      if (comm.rank() == 0) code = c;
    });
  } catch (const std::exception& e) {
    std::cerr << "distmm: error: " << e.what() << std::endl;
    return kRunFailed;
  }
  return code;
}

int run_mpi(int argc, char** argv, const Options& options) {
  MpiSession session(argc, argv);
  int rank = 0;
  try {
    const MpiSession::HostMasks host = session.host_masks(allowed_cpus());
    const CpuPlan cpus =
        plan_cpus(host.local_rank, host.masks, host_cpus(), bound_by_launcher_default());
    if (cpus.widened) set_process_affinity(cpus.cpus);
    set_blas_threads(cpus.blas_threads);
    auto world = session.world(MpiOptions{.timeout_s = options.timeout_s});
    rank = world->rank();
    return after_rank_zero(rank, run_job(*world, options));
  } catch (const Error& e) {
    // distmm's errors name their rank already.
    std::cerr << "distmm: error: " << (e.rank() < 0 ? "rank " + std::to_string(rank) + ": " : "")
              << e.what() << std::endl;
    session.abort(kRunFailed);
  } catch (const std::exception& e) {
    std::cerr << "distmm: error: rank " << rank << ": " << e.what() << std::endl;
    session.abort(kRunFailed);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int env_rank = launcher_env("OMPI_COMM_WORLD_RANK", "PMI_RANK", 0);
  const int env_size = launcher_env("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", 1);
  const ParseResult parsed = parse_options(argc, argv);
  if (!parsed.options) {
    if (env_rank == 0) {
      if (parsed.exit_code == kSuccess) {
        std::cout << parsed.message;
      } else {
        std::cerr << "distmm: error: " << parsed.message << std::endl;
      }
    }
    return after_rank_zero(env_rank, parsed.exit_code);
  }
  const Options& options = *parsed.options;
  if (options.dry_run) {
    // Nothing moves, so no ranks are started: one process predicts for all of them.
    if (env_rank != 0) return kSuccess;
    return run_dry_job(options, options.ranks.value_or(env_size), std::cout, std::cerr);
  }
  if (options.ranks) {
    if (env_size > 1) {
      if (env_rank == 0) {
        std::cerr << "distmm: error: --ranks " << *options.ranks
                  << ": cannot be combined with mpirun -np " << env_size
                  << " (use one or the other)" << std::endl;
      }
      return after_rank_zero(env_rank, kBadInput);
    }
    return run_simulator(options);
  }
  return run_mpi(argc, argv, options);
}
