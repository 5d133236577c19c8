#pragma once
// A cgroup v1 memory group with a limit, for tests of what distmm does inside a container's or
// a batch job's memory limit: made below the test process's own group (found by the test's
// own reading of /proc/self/cgroup, apart from the code under test's), with a group below it
// that has no limit of its own, as a job's processes often sit below the job's group. Both are
// removed when the object goes.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

namespace distmm::test {

inline bool write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  return static_cast<bool>(out);
}

class MemoryCgroup {
 public:
  // `why_not()` says why there is no group (no root, no writable v1 memory hierarchy).
  MemoryCgroup(std::uint64_t limit_bytes, const std::string& tag) {
    std::ifstream in("/proc/self/cgroup");
    std::string own;
    for (std::string line; own.empty() && std::getline(in, line);) {
      const auto at = line.find(":memory:");
      if (at != std::string::npos) own = "/sys/fs/cgroup/memory" + line.substr(at + 8);
    }
    if (geteuid() != 0 || own.empty() ||
        access((own + "/memory.limit_in_bytes").c_str(), W_OK) != 0) {
      why_not_ = "needs root and a writable cgroup v1 memory hierarchy";
      return;
    }
    limited_ = own + "/distmm_" + tag + "_" + std::to_string(getpid());
    inner_ = limited_ + "/inner";
    if (mkdir(limited_.c_str(), 0755) != 0 || mkdir(inner_.c_str(), 0755) != 0 ||
        !write_text(limited_ + "/memory.limit_in_bytes", std::to_string(limit_bytes))) {
      why_not_ = "cannot set up " + limited_;
    }
  }
  ~MemoryCgroup() {
    if (!inner_.empty()) rmdir(inner_.c_str());
    if (!limited_.empty()) rmdir(limited_.c_str());
  }
  MemoryCgroup(const MemoryCgroup&) = delete;
  MemoryCgroup& operator=(const MemoryCgroup&) = delete;

  const std::string& why_not() const { return why_not_; }
  const std::string& limited() const { return limited_; }
  // The group below the limited one, where processes are put.
  const std::string& inner() const { return inner_; }
  // Moves process `pid` into the inner group.
  bool join(long pid) const { return write_text(inner_ + "/tasks", std::to_string(pid)); }

 private:
  std::string limited_, inner_, why_not_;
};

}  // namespace distmm::test
