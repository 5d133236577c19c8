// The host's CPUs as distmm sees them: CPU lists, even shares, and the cpuset of the
// process's own cgroup (a container, or one of bench/validate_model.py's namespace hosts).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "distmm/blas.hpp"

namespace {

using distmm::host_cpus;

TEST(CpuList, RoundTripsLinuxFormat) {
  EXPECT_EQ(distmm::parse_cpu_list("0-3,6\n"), (std::vector<int>{0, 1, 2, 3, 6}));
  EXPECT_EQ(distmm::parse_cpu_list(""), std::vector<int>{});
  EXPECT_EQ(distmm::cpu_list({0, 1, 2, 3, 6, 8, 9}), "0-3,6,8-9");
  EXPECT_THROW(distmm::parse_cpu_list("3-1"), std::invalid_argument);
}

TEST(CpuList, SharesAreEvenAndContiguous) {
  const std::vector<int> cpus{0, 1, 2, 3, 4};
  EXPECT_EQ(distmm::share_of_cpus(cpus, 0, 2), (std::vector<int>{0, 1}));
  EXPECT_EQ(distmm::share_of_cpus(cpus, 1, 2), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(distmm::share_of_cpus({0, 1}, 3, 4), (std::vector<int>{1}));
}

// Where systemd and Docker mount the cgroup v1 cpuset hierarchy (the test's own way of
// finding it, apart from the code under test's mountinfo reading).
constexpr const char* kCpusetV1 = "/sys/fs/cgroup/cpuset";

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  return static_cast<bool>(out);
}

// A process placed in a cpuset of one CPU sees a host of that one CPU: the namespace hosts
// of the model's validation are given one each, and calibrate and the BLAS threads must see
// the host a rank would see on a real one-core machine.
TEST(HostCpus, FollowTheCpusetOfTheProcesssCgroup) {
  const std::vector<int> all = host_cpus();
  const std::string mount = kCpusetV1;
  if (geteuid() != 0 || access((mount + "/cpuset.cpus").c_str(), W_OK) != 0 || all.size() < 2) {
    GTEST_SKIP() << "needs root, a cgroup v1 cpuset hierarchy and 2 CPUs";
  }
  const std::string group = mount + "/distmm_cpus_test_" + std::to_string(getpid());
  if (mkdir(group.c_str(), 0755) != 0) GTEST_SKIP() << "cannot create " << group;
  const std::string one = std::to_string(all.back());
  std::ifstream mems_in(mount + "/cpuset.mems");
  std::string mems;
  std::getline(mems_in, mems);
  if (!write_file(group + "/cpuset.cpus", one) || !write_file(group + "/cpuset.mems", mems)) {
    rmdir(group.c_str());
    FAIL() << "cannot set up " << group;
  }
  const pid_t child = fork();
  if (child == 0) {
    // Joins the group, then reports what it sees through its exit status.
    if (!write_file(group + "/tasks", std::to_string(getpid()))) _exit(2);
    _exit(host_cpus() == std::vector<int>{all.back()} ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  rmdir(group.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: host_cpus() did not report the cgroup's CPU " << one
                                    << "; 2: could not join " << group;
}

}  // namespace
