// The distmm program, run as users run it: on the simulator (--ranks) and under mpirun.
// Checks results through --out, exit codes, one-line error messages, and that a failed run
// never writes or changes the output file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <functional>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <armadillo>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>
#include "distmm/model.hpp"
#include "distmm/train.hpp"
#include "strategy/strategy_cases.hpp"
#include "support/memory_cgroup.hpp"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

struct Result {
  int code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

// Lines on stderr other than Open MPI's own libevent warnings ("[warn] Epoll ..."), which its
// daemons sometimes print when a job ends early and which distmm cannot silence.
long lines_of_ours(const std::string& err) {
  long lines = 0;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("[warn] ", 0) != 0) ++lines;
  }
  return lines;
}

enum class Backend { simulator, mpi };

class Program : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    // A parameterized test's name is "Name/0": one directory, not a parent left behind.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::temp_directory_path() /
           ("distmm_program_test_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path path(const std::string& name) const { return dir_ / name; }

  // Runs distmm with `args` on 3 ranks of the backend under test, with a time bound.
  // `shell` comes before the command, in the shell that runs it.
  Result run(const std::string& args, int ranks = 3, const std::string& shell = "") const {
    std::string cmd = shell + "timeout 120 ";
    if (GetParam() == Backend::mpi) {
      cmd += std::string(DISTMM_MPIEXEC) + " -q -np " + std::to_string(ranks) + " " +
             DISTMM_MPIEXEC_PREFLAGS + " " + DISTMM_EXE + " " + args;
    } else {
      cmd += std::string(DISTMM_EXE) + " --ranks " + std::to_string(ranks) + " " + args;
    }
    const fs::path out = dir_ / "stdout.log", err = dir_ / "stderr.log";
    const int status = std::system((cmd + " >" + out.string() + " 2>" + err.string()).c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  // Runs a command that must fail with exit code 2 and one line naming `expected`, leaving
  // an existing --out file untouched.
  void expect_bad_input(const std::string& args, const std::string& expected) {
    const fs::path out = path("c.csv");
    write_file(out, "untouched\n");
    const Result r = run(args + " --out " + out.string());
    EXPECT_EQ(r.code, 2) << args << "\nstderr: " << r.err;
    EXPECT_THAT(r.err, HasSubstr(expected)) << args;
    EXPECT_EQ(lines_of_ours(r.err), 1) << "one line: " << r.err;
    EXPECT_EQ(slurp(out), "untouched\n") << args;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos)
          << "left a temporary file: " << entry.path();
    }
  }

  fs::path dir_;
};

TEST_P(Program, DefaultStyleRunVerifiesBothStrategies) {
  const Result r = run("--m 37 --k 19 --n 23");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("dp "));
  EXPECT_THAT(r.out, HasSubstr("fsdp "));
  EXPECT_THAT(r.out, HasSubstr(GetParam() == Backend::mpi ? "mpi" : "simulator"));
  EXPECT_EQ(r.err, "");
}

TEST_P(Program, GridTableSaysWhichGridAndHowManyRanksIdle) {
  const fs::path report = path("r.json");
  const Result r =
      run("--strategy grid --grid 1x2 --m 20 --k 9 --n 11 --report " + report.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("grid 1x2x1: as --grid gave it; 1 rank idle"));
  const auto doc = nlohmann::json::parse(slurp(report));
  EXPECT_EQ(doc["runs"][0]["idle_ranks"], 1);
  EXPECT_EQ(doc["runs"][0]["grid"], "1x2x1");
  EXPECT_FALSE(doc["runs"][0].contains("grid_auto"));
  const Result automatic = run("--strategy grid --m 300 --k 20 --n 100 --dry-run");
  ASSERT_EQ(automatic.code, 0) << automatic.err;
  EXPECT_THAT(automatic.out, HasSubstr("grid 3x1x1: chosen by --grid auto"));
  EXPECT_THAT(automatic.out, Not(HasSubstr("idle")));
}

// --draw: each of A, B and C is covered exactly once by the ranks' blocks the picture names
// (read back from its rect titles), every rank's collectives are listed, and a refused or
// failed run writes no picture.
TEST_P(Program, DrawShowsEachMatrixCoveredOnceByTheRanksBlocks) {
  const fs::path svg = path("s.svg");
  for (const std::string strategy : {"tp-col", "hsdp", "grid --grid 3x1"}) {
    fs::remove(svg);
    const Result r = run("--strategy " + strategy + " --m 13 --k 7 --n 5 --draw " + svg.string());
    ASSERT_EQ(r.code, 0) << strategy << ": " << r.err;
    const std::string text = slurp(svg);
    ASSERT_EQ(text.rfind("<?xml", 0), 0u) << strategy;
    EXPECT_THAT(text, HasSubstr("on 3 ranks"));
    EXPECT_NE(text.find("</svg>"), std::string::npos);
    // Panels in order A (13 x 7), B (7 x 5), C (13 x 5); a block's title names its cells.
    const std::vector<std::pair<std::string, std::pair<int, int>>> panels{
        {">A (13 x 7)<", {13, 7}}, {">B (7 x 5)<", {7, 5}}, {">C = A @ B (13 x 5)<", {13, 5}}};
    for (std::size_t p = 0; p < panels.size(); ++p) {
      const std::size_t begin = text.find(panels[p].first);
      ASSERT_NE(begin, std::string::npos) << strategy << " " << panels[p].first;
      const std::size_t end =
          p + 1 < panels.size() ? text.find(panels[p + 1].first) : text.find("What moves");
      const auto [rows, cols] = panels[p].second;
      std::vector<int> covered(static_cast<std::size_t>(rows * cols), 0);
      std::set<int> holders;
      for (std::size_t at = text.find("<title>rank ", begin); at < end;
           at = text.find("<title>rank ", at + 1)) {
        int rank = -1, r0 = -1, r1 = -1, c0 = -1, c1 = -1;
        ASSERT_EQ(std::sscanf(text.c_str() + at, "<title>rank %d: rows %d-%d, columns %d-%d", &rank,
                              &r0, &r1, &c0, &c1),
                  5);
        holders.insert(rank);
        for (int i = r0; i <= r1; ++i) {
          for (int j = c0; j <= c1; ++j) ++covered[static_cast<std::size_t>(i * cols + j)];
        }
      }
      EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), rows * cols)
          << strategy << " " << panels[p].first << ": every cell held by exactly one rank";
      EXPECT_FALSE(holders.empty());
    }
    for (int rank = 0; rank < 3; ++rank) {
      EXPECT_THAT(text, HasSubstr(">rank " + std::to_string(rank) + ": ")) << strategy;
    }
  }
  EXPECT_THAT(slurp(svg), HasSubstr("grid 3x1x1 on 3 ranks"));
  // A dry run draws too, at any rank count (the simulator's: a dry run starts no MPI job).
  if (GetParam() == Backend::simulator) {
    fs::remove(svg);
    const Result dry =
        run("--dry-run --strategy grid --m 1000 --k 1000 --n 1000 --draw " + svg.string(), 64);
    ASSERT_EQ(dry.code, 0) << dry.err;
    EXPECT_THAT(slurp(svg), HasSubstr("on 64 ranks"));
    EXPECT_THAT(slurp(svg), HasSubstr("and 48 more ranks"));
  }
  expect_bad_input("--strategy dp --draw " + path("s.png").string(), "--draw: ");
  expect_bad_input("--strategy all --draw " + path("t.svg").string(), "--draw: one --strategy");
  expect_bad_input("train --strategy dp --draw " + path("t.svg").string(),
                   "--draw: not an option of distmm train");
  EXPECT_FALSE(fs::exists(path("t.svg")));
  const Result crashed = run("--strategy fsdp --fault crash:1 --draw " + path("t.svg").string());
  EXPECT_EQ(crashed.code, 3) << crashed.err;
  EXPECT_FALSE(fs::exists(path("t.svg"))) << "a failed run draws nothing";
}

TEST_P(Program, OutputEqualsSingleProcessProductInEveryFormat) {
  const arma::mat a = arma::round(arma::randu<arma::mat>(7, 5) * 20 - 10);
  const arma::mat b = arma::round(arma::randu<arma::mat>(5, 4) * 20 - 10);
  a.save(path("a.csv").string(), arma::csv_ascii);
  b.save(path("b.txt").string(), arma::raw_ascii);
  for (const char* strategy : {"dp", "fsdp", "fsdp-overlap"}) {
    for (const char* ext : {".csv", ".txt", ".bin"}) {
      const fs::path out = path(std::string("c_") + strategy + ext);
      const Result r =
          run("--strategy " + std::string(strategy) + " --a " + path("a.csv").string() + " --b " +
              path("b.txt").string() + " --out " + out.string());
      ASSERT_EQ(r.code, 0) << r.err;
      arma::mat c;
      ASSERT_TRUE(c.load(out.string())) << out;
      EXPECT_TRUE(arma::approx_equal(c, a * b, "absdiff", 0.0)) << strategy << ext;
    }
  }
}

// --layout distributed: from files (the root sends each rank its blocks) and from the seed
// (each rank draws its own, bit-identical to the root layout's matrices), C written by --out
// equals A * B and the root layout's C, for every strategy.
TEST_P(Program, DistributedLayoutGivesTheRootLayoutsProduct) {
  const arma::mat a = arma::round(arma::randu<arma::mat>(7, 5) * 20 - 10);
  const arma::mat b = arma::round(arma::randu<arma::mat>(5, 4) * 20 - 10);
  a.save(path("a.csv").string(), arma::csv_ascii);
  b.save(path("b.csv").string(), arma::csv_ascii);
  const fs::path report = path("r.json");
  const Result files =
      run("--layout distributed --a " + path("a.csv").string() + " --b " + path("b.csv").string() +
          " --out " + path("c.bin").string() + " --report " + report.string());
  ASSERT_EQ(files.code, 0) << files.err;
  EXPECT_THAT(files.out, HasSubstr("layout: distributed"));
  arma::mat c;
  ASSERT_TRUE(c.load(path("c.bin").string()));
  EXPECT_TRUE(arma::approx_equal(c, a * b, "absdiff", 0.0));
  const auto doc = nlohmann::json::parse(slurp(report));
  std::set<std::string> ran;
  for (const auto& run : doc["runs"]) {
    ran.insert(run["strategy"].get<std::string>());
    EXPECT_EQ(run["layout"], "distributed");
    EXPECT_EQ(run["max_abs_error"], 0.0);
  }
  EXPECT_EQ(ran, (std::set<std::string>{"dp", "fsdp", "fsdp-overlap", "hsdp", "tp-col", "tp-row",
                                        "grid"}));

  for (const char* strategy : {"fsdp", "tp-row", "grid"}) {
    for (const char* layout : {"root", "distributed"}) {
      const Result r =
          run(std::string("--strategy ") + strategy + " --m 37 --k 19 --n 23 --seed 5 --layout " +
              layout + " --out " + path(std::string(layout) + ".bin").string());
      ASSERT_EQ(r.code, 0) << r.err;
    }
    arma::mat root_c, distributed_c;
    ASSERT_TRUE(root_c.load(path("root.bin").string()));
    ASSERT_TRUE(distributed_c.load(path("distributed.bin").string()));
    EXPECT_TRUE(arma::approx_equal(root_c, distributed_c, "absdiff", 1e-13)) << strategy;
  }

  // The dry run of the layout: tp-row on 4 ranks reduce-scatters C's rows, (P - 1) m_r n
  // elements received by each rank (m = 8: m_r = 2), nothing else moving.
  const fs::path dry_report = path("dry.json");
  const Result dry =
      run("--dry-run --layout distributed --strategy tp-row --m 8 --k 6 --n 5 "
          "--report " +
              dry_report.string(),
          4);
  ASSERT_EQ(dry.code, 0) << dry.err;
  EXPECT_THAT(dry.out, HasSubstr("layout: distributed"));
  const auto dry_doc = nlohmann::json::parse(slurp(dry_report));
  ASSERT_EQ(dry_doc["runs"].size(), 1U);
  EXPECT_EQ(dry_doc["runs"][0]["layout"], "distributed");
  ASSERT_EQ(dry_doc["runs"][0]["per_rank"].size(), 4U);
  for (const auto& rank : dry_doc["runs"][0]["per_rank"]) {
    EXPECT_EQ(rank["bytes_received"], 3 * 2 * 5 * 8) << rank;
  }
  expect_bad_input("--layout diagonal", "--layout");
}

TEST_P(Program, BadInputEndsWithOneLineAndExitCode2) {
  write_file(path("a.csv"), "1,2,3\n4,5,6\n");
  write_file(path("b.csv"), "1,2\n3,4\n5,6\n");
  write_file(path("b2.csv"), "1,2\n3,4\n");
  write_file(path("ragged.csv"), "1,2,3\n4,5\n");
  write_file(path("text.csv"), "1,2,3\n4,x,6\n");
  write_file(path("empty.csv"), "");
  write_file(path("ragged.txt"), "1 2 3\n4 5\n");
  write_file(path("nan.txt"), "1 2 nan\n4 5 6\n");
  write_file(path("garbage.bin"), "not a matrix");
  write_file(path("huge.bin"), "ARMA_MAT_BIN_FN008\n100000000000 2\n" + std::string(16, '\0'));
  const std::string a = " --a " + path("a.csv").string();
  const std::string b = " --b " + path("b.csv").string();
  // Parsing is the same code on both backends: under mpirun, the cases where the ranks agree
  // on an error found on one of them (a file) or settled by the world (hsdp's replicas).
  const bool all = GetParam() != Backend::mpi;
  expect_bad_input(a + " --b " + path("b2.csv").string(), "A's columns must equal B's rows");
  expect_bad_input(a + " --b " + path("missing.csv").string(), "missing.csv: no such file");
  if (all)
    expect_bad_input(" --a " + path("ragged.csv").string() + b,
                     "line 2 has 2 values, line 1 has 3");
  expect_bad_input(" --a " + path("text.csv").string() + b, "'x' is not a number");
  if (all) expect_bad_input(" --a " + path("empty.csv").string() + b, "empty.csv: is empty");
  if (all) expect_bad_input(" --a " + path("ragged.txt").string() + b, "line 2 has 2 values");
  if (all) expect_bad_input(" --a " + path("nan.txt").string() + b, "'nan' is not finite");
  expect_bad_input(" --a " + path("garbage.bin").string() + b, "not an Armadillo binary matrix");
  if (all) {  // found by matrix_fuzz: Armadillo allocated what the header said (1.7 TB)
    expect_bad_input(" --a " + path("huge.bin").string() + b,
                     "says 100000000000 x 2 doubles but holds 16 bytes");
  }
  if (all) expect_bad_input(" --a " + path("a.xlsx").string() + b, "unknown format '.xlsx'");
  fs::create_directories(path("dir.csv"));
  expect_bad_input(" --a " + path("dir.csv").string() + b, "is a directory");
  if (all) expect_bad_input(a, "--a requires --b");
  if (all) expect_bad_input(b, "--b requires --a");
  if (all) expect_bad_input(" --m 0", "--m: must be a whole number");
  if (all) expect_bad_input(" --n -4", "--n: must be a whole number");
  expect_bad_input(" --k many", "--k: must be a whole number");
  if (all) expect_bad_input(" --strategy zero", "--strategy: unknown strategy 'zero'");
  if (all) expect_bad_input(" --repeat 0", "--repeat: must be a whole number from 1");
  if (all) expect_bad_input(" --dtype f16", "--dtype: f16 not in {f32,f64}");
  if (all) expect_bad_input(" train --optimizer rmsprop", "--optimizer: rmsprop not in {sgd,adam}");
  if (all) expect_bad_input(" --warmup -1", "--warmup: must be a whole number from 0");
  if (all) expect_bad_input(" --warmup 1.5", "--warmup: must be a whole number from 0");
  if (all) expect_bad_input(" train --repeat 2", "--repeat: not an option of distmm train");
  if (all) expect_bad_input(" --replicas 0", "--replicas: must be a whole number from 1");
  if (all) expect_bad_input(" --replicas two", "--replicas: must be a whole number from 1");
  expect_bad_input(" --strategy fsdp --replicas 1",
                   "--replicas: none of the strategies asked for has it (only hsdp has)");
  expect_bad_input(" --strategy hsdp --replicas 2", "--replicas 2: does not divide the 3 ranks");
  if (all) expect_bad_input(" train --strategy tp-row", "'tp-row' is not a training strategy");
  expect_bad_input(" train --strategy hsdp --replicas 2",
                   "--replicas 2: does not divide the 3 ranks");
  if (all)
    expect_bad_input(" train --strategy tp-col --replicas 1",
                     "--replicas: none of the strategies asked for has it (only hsdp has)");
  if (all)
    expect_bad_input(" --strategy tp-col --replicas 3",
                     "--replicas: none of the strategies asked for has it (only hsdp has)");
  if (all)
    expect_bad_input(" train --strategy hsdp --replicas 1.5", "--replicas: must be a whole number");
  if (all)
    expect_bad_input(" train --checkpoint-every 3", "--checkpoint-every requires --checkpoint-dir");
  if (all)
    expect_bad_input(" train --strategy dp --checkpoint-dir " + path("ck").string() + " --keep 0",
                     "--keep: must be a whole number from 1");
  if (all)
    expect_bad_input(" train --resume " + path("ck").string(), "--resume: give one --strategy");
  expect_bad_input(" train --strategy fsdp --resume " + path("none").string(),
                   "checkpoint " + path("none").string() + ": no such directory");
  fs::create_directories(path("empty"));
  expect_bad_input(" train --strategy fsdp --resume " + path("empty").string(),
                   "holds no committed checkpoint");
}

// A value quoted from a file or an argument is escaped and cut: the error is one line of
// printable text, about 200 characters at most, whatever bytes the input holds (escape
// sequences, line breaks, invalid UTF-8, a long value).
TEST_P(Program, ErrorsQuoteInputAsOnePrintableLine) {
  std::string junk = "1,2\n3,\x1b[2J\x1b]0;title\x07\nx\r\xff\xfe";
  junk += std::string(500, 'z') + "\n";
  write_file(path("junk.csv"), junk);
  write_file(path("b.csv"), "1\n2\n");
  const std::string long_value(300, '7');
  for (const std::string& args :
       {" --a " + path("junk.csv").string() + " --b " + path("b.csv").string(),
        " --strategy 'dp\x1b[31m" + long_value + "'",
        std::string(" --grid '2x\n2' --strategy grid"), " --fault 'delay:" + long_value + "'"}) {
    const Result r = run(args, 2);
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    EXPECT_EQ(lines_of_ours(r.err), 1) << args << ": " << r.err;
    const std::string line = r.err.substr(0, r.err.find('\n'));
    EXPECT_LE(line.size(), 220u) << line;
    for (const char c : line) {
      EXPECT_TRUE(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f)
          << "byte " << int(c) << ": " << line;
    }
  }
}

// Under mpirun, bad arguments or input end every rank through agreement: rank 0 prints its one
// line every time, and every rank exits with the same code (30 runs, alternating a bad flag and
// a missing file; each rank's exit code is written by a wrapper, so mpirun's own handling of
// non-zero exits stays out of it).
TEST_P(Program, BadInputUnderMpirunEndsEveryRankWithTheSameCode) {
  if (GetParam() != Backend::mpi) GTEST_SKIP() << "an mpirun behaviour";
  // A race between the ranks' exits shows in some runs only: 30 of them, 8 under the
  // sanitizers (whose start-up makes each run several times longer).
  const int runs = distmm::testing::kSanitizer ? 8 : 30;
  double slowest = 0;
  for (int i = 0; i < runs; ++i) {
    const std::string args =
        i % 2 ? "--m 0" : "--a " + path("missing.csv").string() + " --b " + path("b.csv").string();
    const std::string wrapper = "sh -c '\"$0\" \"$@\"; echo $? > " + dir_.string() +
                                "/code.$OMPI_COMM_WORLD_RANK' " + DISTMM_EXE + " " + args;
    const std::string cmd = "timeout 60 " + std::string(DISTMM_MPIEXEC) + " -q -np 3 " +
                            DISTMM_MPIEXEC_PREFLAGS + " " + wrapper + " 2>" +
                            path("err.log").string();
    const auto start = std::chrono::steady_clock::now();
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    slowest = std::max(
        slowest, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    const std::string err = slurp(path("err.log"));
    EXPECT_EQ(lines_of_ours(err), 1) << "run " << i << ": " << err;
    EXPECT_THAT(err, HasSubstr(i % 2 ? "--m: must be a whole number" : "missing.csv: no such file"))
        << "run " << i;
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(slurp(path("code." + std::to_string(r))), "2\n") << "run " << i << " rank " << r;
    }
  }
  std::cout << "slowest of " << runs << " runs, mpirun included: " << slowest << " s\n";
}

// --timeout bounds MPI's start-up too: a rank stalled inside it (as one whose host vanished)
// makes the others give up in MPI_Init instead of waiting for ever.
TEST_P(Program, TimeoutBoundsMpiStartup) {
  if (GetParam() != Backend::mpi) GTEST_SKIP() << "the simulator has no start-up to bound";
  ::setenv("DISTMM_TEST_STARTUP_DELAY", "1:20000", 1);
  const auto start = std::chrono::steady_clock::now();
  const Result r = run("--timeout 1 --m 8 --k 8 --n 8", 2);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::unsetenv("DISTMM_TEST_STARTUP_DELAY");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("MPI start-up did not finish within 1 s (--timeout): still in"));
  EXPECT_LT(seconds, 15) << "the stalled rank sleeps 20 s: the bound, not the stall, ended it";
}

// A problem too big for the machine is refused before anything big is allocated: exit 2, one
// line with what it needs and what is available, at once (not std::bad_alloc, not the OOM
// killer). 200000^3 doubles: A, B and C are 320 GB each.
TEST_P(Program, ProblemTooBigForMemoryIsRefusedBeforeAllocating) {
  const auto start = std::chrono::steady_clock::now();
  for (const std::string args :
       {"--m 200000 --k 200000 --n 200000", "train --m 20000000 --k 200000 --n 2000"}) {
    const Result r = run(args, 2);
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    EXPECT_EQ(lines_of_ours(r.err), 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr("does not fit in memory: 2 ranks on"));
    EXPECT_THAT(r.err, HasSubstr("GiB is available there"));
    EXPECT_THAT(r.err, HasSubstr("--dry-run"));
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30);
}

// Inside a container's or a batch job's memory limit (a cgroup's, set on a group above the
// processes'), a problem that fits the machine but not the limit is refused the same way,
// instead of the kernel killing a rank half-way through. 8000^3: A, B and C are 512 MB each.
TEST_P(Program, ProblemTooBigForTheCgroupsMemoryLimitIsRefused) {
  const distmm::test::MemoryCgroup group(768u << 20, "program_test");
  if (!group.why_not().empty()) GTEST_SKIP() << group.why_not();
  const Result r =
      run("--m 8000 --k 8000 --n 8000", 2, "echo $$ > " + group.inner() + "/tasks && exec ");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(lines_of_ours(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("does not fit in memory: 2 ranks on"));
}

TEST_P(Program, MissingOutputDirectoryIsCheckedBeforeAnyWork) {
  const Result r = run("--m 4000 --k 4000 --n 4000 --out " + path("no/such/dir/c.csv").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--out"));
  EXPECT_THAT(r.err, HasSubstr("does not exist"));
  EXPECT_FALSE(fs::exists(path("no")));
}

TEST_P(Program, RanksBelowOneOrNotANumber) {
  const Result zero = run("--ranks 0");
  EXPECT_EQ(zero.code, 2);
  EXPECT_THAT(zero.err, HasSubstr("--ranks: must be a whole number"));
  const Result word = run("--ranks four");
  EXPECT_EQ(word.code, 2);
  EXPECT_THAT(word.err, HasSubstr("--ranks"));
}

TEST_P(Program, HelpAndVersion) {
  const Result help = run("--help");
  EXPECT_EQ(help.code, 0);
  for (const char* flag : {"--strategy", "--ranks", "--m", "--seed", "--a", "--b", "--out",
                           "--no-verify", "Exit codes", "verification failed"}) {
    EXPECT_THAT(help.out, HasSubstr(flag));
  }
  // Each subcommand's help lists every option it accepts, its own and distmm's.
  const Result train = run("train --help");
  EXPECT_EQ(train.code, 0);
  for (const char* flag : {"--steps",
                           "--lr",
                           "--print-every",
                           "--x",
                           "--t",
                           "--w",
                           "--strategy",
                           "--ranks",
                           "--m",
                           "--k",
                           "--n",
                           "--seed",
                           "--report",
                           "--trace",
                           "--out",
                           "--timeout",
                           "--fault",
                           "--checkpoint-dir",
                           "--checkpoint-every",
                           "--keep",
                           "--resume",
                           "--dry-run",
                           "Exit codes"}) {
    EXPECT_THAT(train.out, HasSubstr(flag)) << "train --help";
  }
  for (const char* flag : {"--no-verify", "--warmup", "--repeat", "read A from FILE"}) {
    EXPECT_THAT(train.out, Not(HasSubstr(flag))) << "train --help lists " << flag;
  }
  const Result matmul = run("matmul --help");
  EXPECT_EQ(matmul.code, 0);
  for (const char* flag : {"--strategy", "--ranks", "--warmup", "--repeat", "--dry-run", "--a",
                           "--out", "--timeout", "--fault"}) {
    EXPECT_THAT(matmul.out, HasSubstr(flag)) << "matmul --help";
  }
  const Result version = run("--version");
  EXPECT_EQ(version.code, 0);
  EXPECT_THAT(version.out, HasSubstr("distmm 0.1.0"));
}

// An injected crash or skipped collective ends the run within seconds with exit code 3 and
// a message naming the rank; the output file is neither written nor changed.
TEST_P(Program, InjectedFaultsEndTheRunQuicklyAndWriteNothing) {
  struct Case {
    std::string fault, expected;
  };
  const bool mpi = GetParam() == Backend::mpi;
  const std::vector<Case> cases{
      {"crash:0", "rank 0: injected fault crash:0"},
      {"crash:2", "rank 2: injected fault crash:2"},
      // MPI matches rank 1's next collective against the others' broadcast: depending on the
      // collectives involved that is an MPI error or a wait that --timeout ends.
      {"skip:1", mpi ? "distmm: error: rank " : "deadlock: no rank can progress"},
  };
  for (const Case& c : cases) {
    const fs::path out = path("c.csv");
    write_file(out, "untouched\n");
    const auto start = std::chrono::steady_clock::now();
    const Result r =
        run("--m 30 --k 20 --n 10 --timeout 2 --fault " + c.fault + " --out " + out.string());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(r.code, 3) << c.fault << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.expected)) << c.fault;
    EXPECT_LT(seconds, 15) << c.fault;
    EXPECT_EQ(slurp(out), "untouched\n") << c.fault;
  }
}

TEST_P(Program, SkipIsDiagnosedWithWhatEachRankWaitsFor) {
  if (GetParam() == Backend::mpi) GTEST_SKIP() << "MPI cannot see other ranks: see --timeout";
  const Result r = run("--m 30 --k 20 --n 10 --fault skip:2");
  EXPECT_EQ(r.code, 3);
  EXPECT_THAT(r.err, HasSubstr("rank 0 waits in broadcast(root=0) (collective #0), waiting for "
                               "rank(s) 2 to join"));
  EXPECT_THAT(r.err, HasSubstr("rank 2 waits in gatherv(root=0) (collective #1)"));
}

TEST_P(Program, DelayedMessagesStillGiveExactResults) {
  const Result r = run("--m 23 --k 9 --n 14 --fault delay:3:7");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("fsdp"));
}

TEST_P(Program, BadFaultSpecOrRankIsBadInput) {
  expect_bad_input(" --fault explode:1", "--fault explode:1: unknown fault");
  expect_bad_input(" --fault crash:x", "'x' is not a rank");
  expect_bad_input(" --fault crash:3", "--fault crash:3: rank 3 does not exist in a run of 3");
  expect_bad_input(" --timeout 0", "--timeout: must be a number of seconds above 0");
}

TEST_P(Program, TrainWritesTheWeightsOfSingleProcessSgd) {
  arma::mat x(9, 4), t(9, 3);
  for (arma::uword i = 0; i < x.n_elem; ++i) x(i) = static_cast<double>((i * 7) % 11) - 5;
  for (arma::uword i = 0; i < t.n_elem; ++i) t(i) = static_cast<double>((i * 5) % 7) - 3;
  x.save(path("x.csv").string(), arma::csv_ascii);
  t.save(path("t.txt").string(), arma::raw_ascii);
  for (const char* strategy : {"dp", "fsdp", "grid"}) {
    const fs::path out = path(std::string("w_") + strategy + ".bin");
    const Result r =
        run(std::string("train --strategy ") + strategy + " --steps 6 --lr 0.01 --x " +
            path("x.csv").string() + " --t " + path("t.txt").string() + " --out " + out.string());
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("step      6/6"));
    arma::mat w;
    ASSERT_TRUE(w.load(out.string()));
    const auto want = distmm::train_single_process(x, t, arma::mat(arma::zeros(4, 3)), {6, 0.01});
    EXPECT_LE(arma::abs(w - want.w).max(), 1e-10 * arma::abs(want.w).max()) << strategy;
  }
}

// On one host calibrate also sweeps the groups of each size dividing the world, all at once
// (grid's rows and columns, hsdp's groups), to a quarter of the world's largest size; a
// grid's dry run is costed by them.
TEST_P(Program, CalibrateOnFourRanksSweepsTheGroupsDividingTheWorld) {
  const fs::path model = path("model4.json");
  const Result cal = run("calibrate --quick --out " + model.string(), 4);
  ASSERT_EQ(cal.code, 0) << cal.err;
  EXPECT_THAT(cal.err, HasSubstr("on the world and the groups dividing it (to 4 MiB)"));
  nlohmann::json m = nlohmann::json::parse(slurp(model));
  std::set<std::string> pairs;
  for (const auto& c : m["collectives"]) {
    if (c["ranks"] == 4) {
      EXPECT_EQ(c["groups"], 1);
      continue;
    }
    EXPECT_EQ(c["ranks"], 2);
    EXPECT_EQ(c["ranks_per_host"], 2);
    EXPECT_EQ(c["groups"], 2);
    EXPECT_LE(c["points"].back()["bytes"].get<std::uint64_t>(), 4u << 20) << c["op"];
    pairs.insert(c["op"].get<std::string>());
  }
  EXPECT_EQ(pairs.size(), std::size(distmm::kCollectiveOps));
  // One process predicts for 4 ranks (a dry run needs no launch).
  const auto predicted = [&](const fs::path& file) {
    const fs::path out = path("dry.log");
    const std::string cmd = "timeout 120 " + std::string(DISTMM_EXE) +
                            " --dry-run --ranks 4 --strategy grid --grid 2x2x1 --m 600 --k 600 "
                            "--n 600 --model " +
                            file.string() + " >" + out.string() + " 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << slurp(out);
    const std::string text = slurp(out);
    return text.substr(0, text.find('\n', text.find("grid 2x2x1")));
  };
  const std::string with = predicted(model);
  auto& curves = m["collectives"];
  curves.erase(std::remove_if(curves.begin(), curves.end(),
                              [](const nlohmann::json& c) { return c["ranks"] == 2; }),
               curves.end());
  write_file(path("world_only.json"), m.dump());
  EXPECT_NE(with, predicted(path("world_only.json")));
}

TEST_P(Program, TrainBadInputIsExitCode2) {
  write_file(path("x.csv"), "1,2\n3,4\n5,6\n");
  write_file(path("t.csv"), "1\n2\n");
  write_file(path("t3.csv"), "1\n2\n3\n");
  write_file(path("w.csv"), "1,2\n");
  const std::string x = " --x " + path("x.csv").string();
  expect_bad_input("train --steps 0", "--steps: must be a whole number");
  expect_bad_input("train --steps -2", "--steps: must be a whole number");
  expect_bad_input("train --lr 0", "--lr: must be a finite number above 0");
  expect_bad_input("train --lr -0.5", "--lr: must be a finite number above 0");
  expect_bad_input("train --lr nan", "--lr: must be a finite number above 0");
  expect_bad_input("train --lr inf", "--lr: must be a finite number above 0");
  expect_bad_input("train" + x + " --t " + path("t.csv").string(),
                   "X and T must have the same number of rows");
  expect_bad_input(
      "train" + x + " --t " + path("t3.csv").string() + " --w " + path("w.csv").string(),
      "expected 2x1 (X's columns x T's columns)");
  expect_bad_input("train" + x, "--x requires --t");
  expect_bad_input("train --strategy fsdp-overlap", "is not a training strategy");
  expect_bad_input("train --strategy grid --grid 1x1x2",
                   "--grid 1x1x2: train takes 2-D grids (PMxPNx1)");
  expect_bad_input("train --a " + path("x.csv").string() + " --b " + path("x.csv").string(),
                   "--a: not an option of distmm train (use --x and --t)");
}

INSTANTIATE_TEST_SUITE_P(Backends, Program, ::testing::Values(Backend::simulator, Backend::mpi),
                         [](const ::testing::TestParamInfo<Backend>& p) {
                           return p.param == Backend::mpi ? std::string("Mpi")
                                                          : std::string("Simulator");
                         });

// distmm calibrate writes a model that --model reads back: every run then carries a
// prediction (table and report), the dry run predicts any rank count, and bad model files or
// flags are bad input (exit 2, one line naming the field) before anything runs.
TEST_P(Program, CalibrateAndPredict) {
  const fs::path model = path("model.json");
  const Result cal = run("calibrate --quick --out " + model.string(), 2);
  ASSERT_EQ(cal.code, 0) << cal.err;
  EXPECT_THAT(cal.err, HasSubstr("distmm calibrate: ping-pong on one host"));
  EXPECT_THAT(cal.err, HasSubstr("distmm calibrate: gemm"));
  EXPECT_THAT(cal.err, HasSubstr("distmm calibrate: done"));
  const nlohmann::json m = nlohmann::json::parse(slurp(model));
  EXPECT_EQ(m["distmm_model"], 1);
  // Whose collective algorithms the links cost where no curve measured one.
  EXPECT_EQ(m["backend"], GetParam() == Backend::mpi ? "mpi" : "simulator");
  EXPECT_GT(m["links"]["intra"]["pieces"].size(), 3u);
  EXPECT_GT(m["gemm"][0]["curve"].back()["gflops"].get<double>(), 0.1);
  // The collective sweep: every collective the strategies call (their contiguous forms), on
  // the 2 ranks of one host, and the broadcast and scatter again with the members multiplying
  // after their part (from 4 KiB).
  EXPECT_THAT(cal.err, HasSubstr("distmm calibrate: collectives: 7 kinds on the world"));
  ASSERT_EQ(m["collectives"].size(), 9u);
  std::set<std::string> ops;
  for (const auto& c : m["collectives"]) {
    const std::string op = c["op"];
    ops.insert(op);
    EXPECT_EQ(c["ranks"], 2);
    EXPECT_EQ(c["ranks_per_host"], 2);
    if (op.ends_with("_then_compute")) {
      EXPECT_EQ(c["points"].front()["bytes"], 4096) << op;
      EXPECT_GE(c["points"].size(), 3u) << op;
      for (const auto& pt : c["points"]) EXPECT_GT(pt["s"].get<double>(), 0) << op;
      continue;
    }
    // Sizes grow (each time is the median as measured), and the sweep stopped where its rule
    // says: at 16 MiB (--quick), or after a call that took more than an eighth of 0.1 s, back
    // to back and after idling (the file keeps the latter; under load, ASan and another test
    // beside it, an all-reduce of 4 KiB took 16 ms). No call moved more than 1 TB/s.
    ASSERT_FALSE(c["points"].empty()) << op;
    for (std::size_t i = 1; i < c["points"].size(); ++i) {
      EXPECT_GT(c["points"][i]["bytes"], c["points"][i - 1]["bytes"]) << op;
      EXPECT_GT(c["points"][i]["s"].get<double>(), 0) << op;
    }
    const double last_bytes = c["points"].back()["bytes"].get<double>();
    const double last_s = c["points"].back()["s"].get<double>();
    EXPECT_TRUE(last_bytes >= 0.99 * (16 << 20) || last_s * 8 > 0.1)
        << op << ": stopped at " << last_bytes << " B after a call of " << last_s << " s";
    EXPECT_LT(last_bytes / last_s, 1e12) << op;
  }
  EXPECT_EQ(ops.size(), 9u);
  EXPECT_EQ(ops.count("scatterv_then_compute"), 1u);
  EXPECT_EQ(ops.count("broadcast_then_compute"), 1u);
  const double contention = m["links"]["intra"]["overlap_contention"].get<double>();
  EXPECT_GE(contention, 0.0);
  EXPECT_LE(contention, 4.0);
  const double slowdown = m["links"]["intra"]["exchange_slowdown"].get<double>();
  EXPECT_GE(slowdown, 0.25);
  EXPECT_LE(slowdown, 4.0);
  EXPECT_THAT(cal.err, HasSubstr("times the link's time"));
  EXPECT_EQ(m["gemm"][0]["concurrent"], 2);
  EXPECT_THAT(cal.err, HasSubstr("rounds: 2 ranks' 512^3 multiplies at once"));
  EXPECT_FALSE(m.contains("straggler"));
  // The strided copy by block size: --quick measures blocks of about 64 KiB, 512 KiB and 4 MiB.
  const auto& strided = m["memory"]["strided_copy_curve"];
  ASSERT_EQ(strided.size(), 3u);
  EXPECT_LE(strided[0]["bytes"].get<double>(), 64u << 10);
  EXPECT_GT(strided[0]["bytes"].get<double>(), 60u << 10);
  EXPECT_GT(strided[2]["bytes"].get<double>(), (4u << 20) - (64u << 10));
  for (const auto& p : strided) {
    EXPECT_GT(p["Bps"].get<double>(), 1e7);
    EXPECT_LT(p["Bps"].get<double>(), 1e12);
  }
  // The spreads of calibrate's repeated measures (recorded), and the model's held-out error,
  // which every prediction's interval takes.
  for (const char* f : {"spread_cold", "spread_warm"}) {
    EXPECT_GE(m["uncertainty"][f].get<double>(), 0.0) << f;
    EXPECT_LT(m["uncertainty"][f].get<double>(), 2.0) << f;
  }
  EXPECT_DOUBLE_EQ(m["uncertainty"]["interval_cold"][0].get<double>(), distmm::kHeldOutCold.low);
  EXPECT_DOUBLE_EQ(m["uncertainty"]["interval_cold"][1].get<double>(), distmm::kHeldOutCold.high);
  EXPECT_DOUBLE_EQ(m["uncertainty"]["interval_warm"][0].get<double>(), distmm::kHeldOutWarm.low);
  EXPECT_DOUBLE_EQ(m["uncertainty"]["interval_warm"][1].get<double>(), distmm::kHeldOutWarm.high);

  const fs::path report = path("r.json");
  const Result r = run("--m 300 --k 200 --n 100 --warmup 1 --repeat 3 --model " + model.string() +
                       " --report " + report.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("predicted_s  interval_80%_s"));
  const nlohmann::json doc = nlohmann::json::parse(slurp(report));
  for (const auto& run : doc["runs"]) {
    const double predicted = run["predicted_time_s"].get<double>();
    EXPECT_GT(predicted, 0) << run["strategy"];
    // warm-up 1, repeat 3: the median of three warm executions is the warm prediction.
    EXPECT_DOUBLE_EQ(predicted, run["predicted_warm_s"].get<double>());
    EXPECT_GE(run["predicted_cold_s"].get<double>(),
              0.999999 * run["predicted_warm_s"].get<double>());
    // Each prediction's nominal 80 % interval: [t e^low, t e^high], [low, high] the state's
    // held-out interval (time_s here is warm).
    for (const std::string state : {"warm", "cold"}) {
      const std::string f = state == "warm" ? "predicted" : "predicted_cold";
      const double at = run[state == "warm" ? "predicted_time_s" : "predicted_cold_s"];
      const auto& w = m["uncertainty"]["interval_" + state];
      EXPECT_NEAR(run[f + "_low_s"].get<double>(), at * std::exp(w[0].get<double>()), 1e-9 * at)
          << f;
      EXPECT_NEAR(run[f + "_high_s"].get<double>(), at * std::exp(w[1].get<double>()), 1e-9 * at)
          << f;
    }
    for (const auto& rank : run["per_rank"]) {
      EXPECT_GE(rank["predicted_compute_s"].get<double>(), 0);
      EXPECT_GE(rank["predicted_comm_s"].get<double>(), 0);
    }
  }
  const Result train = run("train --steps 3 --m 64 --k 8 --n 4 --model " + model.string() +
                           " --report " + report.string());
  ASSERT_EQ(train.code, 0) << train.err;
  EXPECT_THAT(train.out, HasSubstr("pred_step_s"));
  EXPECT_THAT(train.out, HasSubstr("step_80%_s"));
  // The document lives in a variable: a range over a temporary's member would dangle.
  const nlohmann::json train_doc = nlohmann::json::parse(slurp(report));
  ASSERT_EQ(train_doc["runs"].size(), 5u);  // dp, fsdp, hsdp, tp-col, grid
  for (const auto& run : train_doc["runs"]) {
    EXPECT_GT(run["predicted_time_s"].get<double>(), 0) << run["strategy"];
  }
  // Any shape and rank count, no data: 1e6^3 on 4096 ranks, 8 per host (the model has no
  // inter-host link, so that is refused; on one host it is predicted). One process.
  const auto plain = [&](const std::string& args) {
    const fs::path out = path("plain.log"), err = path("plain.err");
    const int status = std::system(("timeout 120 " + std::string(DISTMM_EXE) + " " + args + " >" +
                                    out.string() + " 2>" + err.string())
                                       .c_str());
    return Result{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
  };
  const Result far = plain("--dry-run --ranks 4096 --m 1000000 --k 1000000 --n 1000000 --model " +
                           model.string() + " --ranks-per-host 8");
  EXPECT_EQ(far.code, 2) << far.err;
  EXPECT_THAT(far.err, HasSubstr("no links.inter"));
  // The line names the file, not only the machine the model describes.
  EXPECT_THAT(far.err, HasSubstr("--model " + model.string() + " ("));
  const Result one_host = plain("--dry-run --ranks 64 --m 100000 --k 1000 --n 1000 --model " +
                                model.string() + " --strategy fsdp-overlap");
  EXPECT_EQ(one_host.code, 0) << one_host.err;
  EXPECT_THAT(one_host.out, HasSubstr("predicted_s"));

  // Bad model files and flags.
  const auto bad_model = [&](const std::string& name,
                             const std::function<void(nlohmann::json&)>& edit,
                             const std::string& expected) {
    nlohmann::json j = m;
    edit(j);
    write_file(path(name), j.dump());
    expect_bad_input(" --model " + path(name).string(), expected);
  };
  bad_model(
      "negative.json", [](nlohmann::json& j) { j["memory"]["copy_Bps"] = -1; },
      "memory.copy_Bps: must not be negative");
  bad_model(
      "unit.json",
      [](nlohmann::json& j) { j["links"]["intra"]["pieces"][0]["latency_s"] = "2 us"; },
      "links.intra.pieces[0].latency_s: must be a number, not the string");
  bad_model(
      "missing.json", [](nlohmann::json& j) { j.erase("gemm"); }, "gemm: missing");
  bad_model(
      "typo.json", [](nlohmann::json& j) { j["cores"] = 2; }, "cores: not a field of the model");
  bad_model(
      "backend.json", [](nlohmann::json& j) { j["backend"] = "nccl"; },
      "backend: must be \"mpi\" or \"simulator\", got \"nccl\"");
  bad_model(
      "op.json", [](nlohmann::json& j) { j["collectives"][0]["op"] = "alltoall"; },
      "collectives[0].op: unknown collective \"alltoall\"");
  bad_model(
      "order.json",
      [](nlohmann::json& j) {
        j["collectives"][1]["points"][1]["bytes"] = j["collectives"][1]["points"][0]["bytes"];
      },
      "collectives[1].points[1].bytes: must grow from point to point");
  bad_model(
      "strided.json",
      [](nlohmann::json& j) {
        j["memory"]["strided_copy_curve"] = {{{"bytes", 4096}, {"Bps", 1e9}},
                                             {{"bytes", 4096}, {"Bps", 2e9}}};
      },
      "memory.strided_copy_curve[1].bytes: must grow from point to point");
  bad_model(
      "strided_rate.json",
      [](nlohmann::json& j) {
        j["memory"]["strided_copy_curve"] = {{{"bytes", 4096}, {"Bps", "1 GB/s"}}};
      },
      "memory.strided_copy_curve[0].Bps: must be a number, not the string");
  bad_model(
      "contention.json", [](nlohmann::json& j) { j["links"]["intra"]["overlap_contention"] = 4.5; },
      "links.intra.overlap_contention: must be at most 4");
  bad_model(
      "slowdown.json", [](nlohmann::json& j) { j["links"]["intra"]["exchange_slowdown"] = 0; },
      "links.intra.exchange_slowdown: must be above 0");
  bad_model(
      "uncertainty.json", [](nlohmann::json& j) { j["uncertainty"]["error_warm"] = -0.1; },
      "uncertainty.error_warm: must not be negative");
  bad_model(
      "interval.json",
      [](nlohmann::json& j) {
        j["uncertainty"]["interval_cold"] = {0.2, -0.1};
      },
      "uncertainty.interval_cold: must be [low, high] with low below high");
  bad_model(
      "interval_size.json", [](nlohmann::json& j) { j["uncertainty"]["interval_warm"] = {0.2}; },
      "uncertainty.interval_warm: must be [low, high], two numbers");
  // Fields of terms the model no longer has load and are ignored, whatever they hold: older
  // calibrations still predict, and as the same model without them.
  {
    nlohmann::json old = m;
    old["revisit_s_per_page"] = -1;
    old["first_touch_pool_bytes"] = "1 GiB";
    old["first_touch_beyond_s_per_page"] = 2e-5;
    old["memory"]["strided_copy"] = {{{"row_bytes", 8192}, {"Bps", 1e9}}};
    old["gemm"][0]["first_call_s"] = 5.0;
    old["gemm"][0]["first_use_s_per_page"] = 1e-3;  // would add seconds to a cold multiply
    old["collectives"][0]["points"][0]["first_use_pages"] = 1e9;
    old["collectives"].push_back({{"op", "gatherv_columns"}, {"points", "anything"}});
    old["collectives"].push_back({{"op", "allgatherv_after_scatterv"}});
    old["straggler"] = {{"ranks", 2.5}};
    write_file(path("old.json"), old.dump());
    const std::string args = " --dry-run --ranks 2 --m 300 --k 200 --n 100 --model ";
    const Result a = plain(args + path("old.json").string());
    const Result b = plain(args + model.string());
    EXPECT_EQ(a.code, 0) << a.err;
    EXPECT_EQ(a.out.substr(0, a.out.find("predicted_s:")),
              b.out.substr(0, b.out.find("predicted_s:")));
  }
  // An older model's symmetric held-out error w is the interval [-w, w].
  {
    nlohmann::json old = m;
    old["uncertainty"].erase("interval_cold");
    old["uncertainty"]["error_cold"] = 0.2;
    write_file(path("symmetric.json"), old.dump());
    const fs::path sym_report = path("symmetric_report.json");
    const Result a =
        plain(" --dry-run --ranks 2 --m 300 --k 200 --n 100 --strategy dp --warmup 1 --model " +
              path("symmetric.json").string() + " --report " + sym_report.string());
    ASSERT_EQ(a.code, 0) << a.err;
    const nlohmann::json run = nlohmann::json::parse(slurp(sym_report))["runs"][0];
    const double at = run["predicted_cold_s"].get<double>();
    EXPECT_NEAR(run["predicted_cold_low_s"].get<double>(), at * std::exp(-0.2), 1e-9 * at);
    EXPECT_NEAR(run["predicted_cold_high_s"].get<double>(), at * std::exp(0.2), 1e-9 * at);
    const double warm = run["predicted_time_s"].get<double>();
    EXPECT_NEAR(run["predicted_high_s"].get<double>(), warm * std::exp(distmm::kHeldOutWarm.high),
                1e-9 * warm)
        << "warm keeps the model's own interval_warm (calibrate writes the defaults)";
  }
  write_file(path("garbage.json"), "{ not json");
  expect_bad_input(" --model " + path("garbage.json").string(), "not valid JSON");
  expect_bad_input(" --model " + path("absent.json").string(), "absent.json: cannot be read");
  expect_bad_input(" --dry-run --model " + model.string() + " --ranks-per-host 0",
                   "--ranks-per-host: must be a whole number from 1");
  expect_bad_input(" --dry-run --model " + model.string() + " --ranks-per-host 1.5",
                   "--ranks-per-host: must be a whole number from 1");
  expect_bad_input(" --ranks-per-host 2", "--ranks-per-host: only with --dry-run --model");
}

// A hand-written time model of hosts of 2 cores: 1 GFLOP/s on one thread, 100 on two; links
// of 10 GB/s.
nlohmann::json gemm_curve(int threads, double gflops) {
  return nlohmann::json{{"threads", threads},
                        {"curve", {{{"flops", 1e6}, {"gflops", gflops}}}},
                        {"first_use_s_per_page", 0}};
}

nlohmann::json two_core_model() {
  const auto link = [](double bandwidth) {
    return nlohmann::json{
        {"pieces", {{{"max_bytes", 1u << 30}, {"latency_s", 1e-6}, {"bandwidth_Bps", bandwidth}}}},
        {"first_use_s_per_page", 0}};
  };
  return nlohmann::json{
      {"distmm_model", 1},
      {"name", "two cores"},
      {"measured_by", "hand-written"},
      {"cores_per_host", 2},
      {"links", {{"intra", link(1e10)}, {"inter", link(1e10)}}},
      {"gemm", {gemm_curve(1, 1.0), gemm_curve(2, 100.0)}},
      {"memory", {{"copy_Bps", 1e10}, {"reduce_Bps", 1e10}, {"strided_copy_Bps", 1e9}}},
      {"first_touch_s_per_page", 0}};
}

// A dry run's ranks multiply with their share of the host's cores, as distmm sizes their BLAS
// threads when it runs (one rank per host of 2 cores: 2 threads), on the model's curve for
// that many threads, or its nearest below; hsdp's R defaults to the hosts --ranks-per-host
// fills.
TEST(ProgramDryRun, RanksMultiplyWithTheirShareOfTheHostsCores) {
  nlohmann::json m = two_core_model();
  const fs::path dir = fs::temp_directory_path() / ("distmm_dry_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto predict = [&](const std::string& args) {
    write_file(dir / "m.json", m.dump());
    const std::string cmd = std::string("timeout 60 ") + DISTMM_EXE + " --dry-run --model " +
                            (dir / "m.json").string() + " --m 1000 --k 1000 --n 1000 " + args +
                            " 2>&1";
    FILE* pipe = ::popen(cmd.c_str(), "r");
    std::string output;
    char buf[512];
    while (pipe != nullptr && std::fgets(buf, sizeof buf, pipe)) output += buf;
    if (pipe != nullptr) ::pclose(pipe);
    return output;
  };
  // dp on 2 ranks: 1 GFLOP each, 1 s on one thread, 0.01 s on two.
  const std::string alone = predict("--ranks 2 --ranks-per-host 1 --strategy all");
  EXPECT_THAT(alone, HasSubstr("2 rank(s) on 2 host(s), 1 per host, 2 BLAS thread(s) each"));
  EXPECT_THAT(alone, HasSubstr("hsdp R=2"));
  const std::string shared = predict("--ranks 2 --strategy all");
  EXPECT_THAT(shared, HasSubstr("2 rank(s) on 1 host(s), 2 per host, 1 BLAS thread(s) each"));
  EXPECT_THAT(shared, HasSubstr("hsdp R=1"));
  const auto predicted_s = [](const std::string& out) {
    std::istringstream in(out.substr(out.find("\ndp ") + 1));
    std::string line, word;
    std::getline(in, line);
    std::istringstream fields(line);
    std::vector<std::string> words;
    while (fields >> word) words.push_back(word);
    return std::stod(words.at(words.size() - 2));  // predicted_s, before its interval
  };
  EXPECT_LT(predicted_s(alone), 0.1) << alone;
  EXPECT_GT(predicted_s(shared), 0.9) << shared;
  // Without a 2-thread curve: the 1-thread one.
  m["gemm"] = nlohmann::json::array({gemm_curve(1, 1.0)});
  const std::string fallback = predict("--ranks 2 --ranks-per-host 1 --strategy dp");
  EXPECT_THAT(fallback, HasSubstr("1 per host, 1 BLAS thread(s) each"));
  EXPECT_GT(predicted_s(fallback), 0.9) << fallback;
  fs::remove_all(dir);
}

// With --layout distributed a dry run predicts the layout's time; a real run's prediction
// (which would cost the root layout) is refused.
// A run under the layout is predicted from the same dry run of its plans as --dry-run predicts
// it: the same figure for the same run.
TEST(ProgramDryRun, DistributedLayoutIsPredictedAsItsDryRun) {
  const fs::path dir = fs::temp_directory_path() / ("distmm_dryl_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  write_file(dir / "m.json", two_core_model().dump());
  const auto run_program = [&](const std::string& args) {
    const std::string cmd = std::string("timeout 60 ") + DISTMM_EXE + " --model " +
                            (dir / "m.json").string() + " --m 64 --k 64 --n 64 " + args + " 2>&1";
    FILE* pipe = ::popen(cmd.c_str(), "r");
    std::string output;
    char buf[512];
    while (pipe != nullptr && std::fgets(buf, sizeof buf, pipe)) output += buf;
    const int status = pipe != nullptr ? ::pclose(pipe) : -1;
    return std::pair(WEXITSTATUS(status), output);
  };
  const auto [dry_code, dry] =
      run_program("--dry-run --ranks 4 --layout distributed --strategy grid");
  EXPECT_EQ(dry_code, 0) << dry;
  EXPECT_THAT(dry, HasSubstr("layout: distributed"));
  EXPECT_THAT(dry, HasSubstr("predicted_s"));
  const auto predicted = [&](const std::string& args, const fs::path& report) {
    const auto [code, out] = run_program(args + " --report " + report.string());
    EXPECT_EQ(code, 0) << out;
    std::map<std::string, double> by_strategy;
    if (code != 0) return by_strategy;
    const nlohmann::json doc = nlohmann::json::parse(slurp(report));
    for (const auto& run : doc["runs"]) {
      by_strategy[run["strategy"].get<std::string>()] = run["predicted_time_s"].get<double>();
    }
    return by_strategy;
  };
  const std::string common = "--ranks 2 --layout distributed --strategy all --repeat 3";
  const auto real = predicted(common, dir / "real.json");
  const auto planned = predicted("--dry-run " + common, dir / "dry.json");
  EXPECT_EQ(real.size(), 7u);
  EXPECT_EQ(real, planned);
  // Not the root layout's figures (there A comes from the root and C goes back to it).
  const auto root = predicted("--ranks 2 --strategy all --repeat 3", dir / "root.json");
  EXPECT_NE(real, root);
  fs::remove_all(dir);
}

TEST(ProgramMpi, RanksCannotBeCombinedWithSeveralMpiProcesses) {
  const std::string cmd = std::string("timeout 60 ") + DISTMM_MPIEXEC + " -q -np 2 " +
                          DISTMM_MPIEXEC_PREFLAGS + " " + DISTMM_EXE + " --ranks 2 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[512];
  while (std::fgets(buf, sizeof buf, pipe)) output += buf;
  const int status = ::pclose(pipe);
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_THAT(output, HasSubstr("--ranks 2: cannot be combined with mpirun -np 2"));
}

}  // namespace
