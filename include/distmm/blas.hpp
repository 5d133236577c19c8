#pragma once
// The BLAS (OpenBLAS) thread count and the CPUs a rank runs on.
//
// A rank sizes its BLAS threads from the CPUs it may actually run on (its affinity mask),
// shared with the other ranks of its host whose masks hold the same CPUs: two ranks bound to
// one core each run one thread each; one unbound rank on a 2-core host runs two.
//
// Open MPI binds each rank to one core by default when a job has at most 2 ranks, so a
// single rank on a 2-core host would leave a core idle. When the binding is Open MPI's default
// (not asked for with --bind-to) and the ranks of a host together hold fewer of its CPUs than
// the host has, distmm spreads them over the host's CPUs (an even contiguous share each).
// An explicit --bind-to is always kept.
#include <string>
#include <vector>

namespace distmm {

// Sets how many threads each BLAS call may use (at least 1).
void set_blas_threads(int threads);
int blas_threads();

// The CPUs this thread may run on (sched_getaffinity), ascending.
std::vector<int> allowed_cpus();

// The CPUs of this host that processes may use: the cpuset of this process's cgroup (v1 or
// v2) if one is set, else every online CPU.
std::vector<int> host_cpus();

// True when Open MPI bound this process by its default policy (bound at launch, no binding
// policy given by the user).
bool bound_by_launcher_default();

// Binds every thread of this process (OpenBLAS's workers included) to `cpus`.
void set_process_affinity(const std::vector<int>& cpus);

// Rank `rank` of `ranks`'s even contiguous share of `cpus` (sizes differ by at most one);
// with more ranks than CPUs, one CPU each, round robin.
std::vector<int> share_of_cpus(const std::vector<int>& cpus, std::size_t rank, std::size_t ranks);

// Binds the calling thread (and the threads it starts later) to `cpus`.
void set_thread_affinity(const std::vector<int>& cpus);

struct CpuPlan {
  std::vector<int> cpus;  // this rank's CPUs
  bool widened = false;   // the launcher's default binding was replaced by `cpus`
  int blas_threads = 1;
};

// Decides rank `local_rank`'s CPUs and BLAS threads from the masks of every rank on its host
// (in local rank order), the host's CPUs and whether the masks are the launcher's default.
CpuPlan plan_cpus(int local_rank, const std::vector<std::vector<int>>& host_masks,
                  const std::vector<int>& host, bool default_binding);

// "0-3,6": a CPU list as Linux writes it.
std::string cpu_list(const std::vector<int>& cpus);
// Parses that format ("" -> empty; throws std::invalid_argument on anything else).
std::vector<int> parse_cpu_list(const std::string& text);

}  // namespace distmm
