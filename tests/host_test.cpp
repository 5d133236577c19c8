// The host as distmm sees it: CPU lists, even shares, the cpuset and the memory limit of the
// process's own cgroup (a container, a batch job, or one of bench/validate_model.py's
// namespace hosts).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "distmm/blas.hpp"
#include "distmm/memory.hpp"
#include "support/memory_cgroup.hpp"

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

// A process placed in a cpuset of one CPU sees a host of that one CPU: the namespace hosts
// of the model's validation are given one each, and calibrate and the BLAS threads must see
// the host a rank would see on a real one-core machine.
TEST(HostCpus, FollowTheCpusetOfTheProcesssCgroup) {
  const std::vector<int> all = host_cpus();
  const std::string mount = kCpusetV1;
  if (geteuid() != 0 || access((mount + "/cpuset.cpus").c_str(), W_OK) != 0 || all.size() < 2) {
    GTEST_SKIP() << "needs root, a cgroup v1 cpuset hierarchy and 2 CPUs";
  }
  const std::string group = mount + "/distmm_host_test_" + std::to_string(getpid());
  if (mkdir(group.c_str(), 0755) != 0) GTEST_SKIP() << "cannot create " << group;
  const std::string one = std::to_string(all.back());
  std::ifstream mems_in(mount + "/cpuset.mems");
  std::string mems;
  std::getline(mems_in, mems);
  if (!distmm::test::write_text(group + "/cpuset.cpus", one) ||
      !distmm::test::write_text(group + "/cpuset.mems", mems)) {
    rmdir(group.c_str());
    FAIL() << "cannot set up " << group;
  }
  const pid_t child = fork();
  if (child == 0) {
    // Joins the group, then reports what it sees through its exit status.
    if (!distmm::test::write_text(group + "/tasks", std::to_string(getpid()))) _exit(2);
    _exit(host_cpus() == std::vector<int>{all.back()} ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  rmdir(group.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: host_cpus() did not report the cgroup's CPU " << one
                                    << "; 2: could not join " << group;
}

// A process in a memory cgroup sees the group's limit, and its ancestors': a container's or a
// batch job's limit sits on the job's group, while the process may be in a group below it.
// distmm refuses a problem that does not fit in what it sees (exit 2), rather than being
// killed by the kernel half-way through.
TEST(HostMemory, FollowsTheMemoryLimitOfTheProcesssCgroupAndItsAncestors) {
  constexpr std::uint64_t kLimit = 64u << 20;
  ASSERT_GT(distmm::available_memory(), kLimit) << "the test needs more than its limit outside";
  const distmm::test::MemoryCgroup group(kLimit, "host_test");
  if (!group.why_not().empty()) GTEST_SKIP() << group.why_not();
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  if (child == 0) {
    // Joins the group below the limited one, then reports what it sees.
    close(pipe_fds[0]);
    const std::uint64_t seen = group.join(getpid()) ? distmm::available_memory() : 0;
    _exit(write(pipe_fds[1], &seen, sizeof seen) == sizeof seen ? 0 : 1);
  }
  close(pipe_fds[1]);
  std::uint64_t seen = 0;
  const bool got = read(pipe_fds[0], &seen, sizeof seen) == sizeof seen;
  close(pipe_fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(got && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_GT(seen, 0u) << "0: could not join " << group.inner();
  EXPECT_LE(seen, kLimit) << "available_memory() ignored the limit of " << group.limited();
}

}  // namespace
