#pragma once
// This process's own control groups, where a container, a batch system or the model's
// namespace hosts set the CPUs and the memory a process may use. Both layouts are read:
// cgroup v1 (a hierarchy per controller) and v2 (one hierarchy), each mounted wherever
// /proc/self/mountinfo says, its root possibly a subgroup (a cgroup namespace).
#include <string>
#include <vector>

namespace distmm {

struct CgroupDir {
  std::string path;  // a directory of cgroupfs
  bool v1 = false;   // in a v1 hierarchy (its files are named as v1 names them)
};

// The directories of this process's group for `controller` ("cpuset", "memory"), nearest
// first, then each ancestor up to its hierarchy's mount: in the v1 hierarchy holding the
// controller, and in the v2 hierarchy. A limit set on an ancestor applies to the process too.
std::vector<CgroupDir> own_cgroup_dirs(const std::string& controller);

}  // namespace distmm
