#include "distmm/blas.hpp"

#include <dirent.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "cgroup.hpp"

extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
}

namespace distmm {

void set_blas_threads(int threads) {
  openblas_set_num_threads(std::max(1, threads));
}

int blas_threads() {
  return openblas_get_num_threads();
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return {0};
  for (std::size_t c = 0; c < static_cast<std::size_t>(CPU_SETSIZE); ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(static_cast<int>(c));
  }
  return cpus;
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out.push_back(',');
    out.append(std::to_string(cpus[i]));
    if (j > i) {
      out.push_back('-');
      out.append(std::to_string(cpus[j]));
    }
    i = j + 1;
  }
  return out;
}

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    part.erase(std::remove_if(part.begin(), part.end(), [](char c) { return std::isspace(c); }),
               part.end());
    if (part.empty()) continue;
    const auto dash = part.find('-');
    const int first = std::stoi(part.substr(0, dash));
    const int last = dash == std::string::npos ? first : std::stoi(part.substr(dash + 1));
    if (first < 0 || last < first) throw std::invalid_argument("bad CPU range " + part);
    for (int c = first; c <= last; ++c) cpus.push_back(c);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::vector<int> host_cpus() {
  std::vector<std::string> files;
  for (const CgroupDir& d : own_cgroup_dirs("cpuset")) {
    files.push_back(d.path + (d.v1 ? "/cpuset.effective_cpus" : "/cpuset.cpus.effective"));
  }
  files.push_back("/sys/devices/system/cpu/online");
  for (const std::string& path : files) {
    std::ifstream in(path);
    std::string text;
    if (in && std::getline(in, text)) {
      try {
        std::vector<int> cpus = parse_cpu_list(text);
        if (!cpus.empty()) return cpus;
      } catch (const std::exception&) {
      }
    }
  }
  return allowed_cpus();
}

bool bound_by_launcher_default() {
  const char* bound = std::getenv("OMPI_MCA_orte_bound_at_launch");
  return bound != nullptr && std::string(bound) == "1" &&
         std::getenv("OMPI_MCA_hwloc_base_binding_policy") == nullptr;
}

void set_process_affinity(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(static_cast<std::size_t>(c), &set);
  // Every thread: OpenBLAS starts its workers when it is loaded, under the launcher's mask.
  if (DIR* tasks = opendir("/proc/self/task")) {
    while (const dirent* e = readdir(tasks)) {
      const int tid = std::atoi(e->d_name);
      if (tid > 0) sched_setaffinity(tid, sizeof set, &set);
    }
    closedir(tasks);
  }
  sched_setaffinity(0, sizeof set, &set);
}

std::vector<int> share_of_cpus(const std::vector<int>& cpus, std::size_t rank, std::size_t ranks) {
  const std::size_t n = cpus.size();
  if (n == 0 || ranks == 0) return cpus;
  if (ranks > n) return {cpus[rank % n]};
  return {cpus.begin() + static_cast<std::ptrdiff_t>(rank * n / ranks),
          cpus.begin() + static_cast<std::ptrdiff_t>((rank + 1) * n / ranks)};
}

void set_thread_affinity(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(static_cast<std::size_t>(c), &set);
  sched_setaffinity(0, sizeof set, &set);  // 0: the calling thread
}

CpuPlan plan_cpus(int local_rank, const std::vector<std::vector<int>>& host_masks,
                  const std::vector<int>& host, bool default_binding) {
  std::vector<std::vector<int>> masks = host_masks;
  CpuPlan plan;
  std::vector<int> used;
  for (const auto& m : masks) used.insert(used.end(), m.begin(), m.end());
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  const std::size_t ranks = masks.size(), cpus = host.size();
  if (default_binding && ranks > 0 && cpus > 0 && used.size() < cpus) {
    // An even contiguous share of the host's CPUs per rank (ranks share CPUs when more).
    for (std::size_t r = 0; r < ranks; ++r) masks[r] = share_of_cpus(host, r, ranks);
    plan.widened = masks[static_cast<std::size_t>(local_rank)] !=
                   host_masks[static_cast<std::size_t>(local_rank)];
  }
  plan.cpus = masks[static_cast<std::size_t>(local_rank)];
  // Each of this rank's CPUs counts for 1 / (ranks whose mask holds it).
  std::map<int, int> sharing;
  for (const auto& m : masks) {
    for (int c : m) ++sharing[c];
  }
  double share = 0;
  for (int c : plan.cpus) share += 1.0 / sharing[c];
  plan.blas_threads = std::max(1, static_cast<int>(std::floor(share + 1e-9)));
  return plan;
}

}  // namespace distmm
