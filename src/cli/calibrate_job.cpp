#include "cli/calibrate_job.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <armadillo>
#include <chrono>
#include <cstring>
#include <ostream>
#include <sstream>
#include <vector>

#include "cli/job_common.hpp"
#include "cli/run_record.hpp"
#include "distmm/blas.hpp"
#include "distmm/error.hpp"
#include "distmm/matrix_io.hpp"
#include "distmm/memory.hpp"
#include "distmm/model.hpp"
#include "distmm/report.hpp"

namespace distmm::cli {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One-way time of a message of `bytes` between ranks a and b (half a round trip), the median
// of several batches. Every rank calls it; ranks other than a and b only wait.
double ping_pong(Communicator& comm, int a, int b, std::size_t bytes, std::vector<double>& buf) {
  const int me = comm.rank();
  const std::size_t count = bytes / sizeof(double);
  const std::span<double> data(buf.data(), count);
  const int rounds =
      static_cast<int>(std::clamp<double>(2e7 / (static_cast<double>(bytes) + 1e3), 2.0, 200.0));
  std::vector<double> batches;
  for (int batch = 0; batch < 5; ++batch) {
    comm.barrier();
    const auto start = Clock::now();
    for (int i = 0; i < rounds; ++i) {
      if (me == a) {
        comm.send(data, b, 7);
        comm.recv(data, b, 7);
      } else if (me == b) {
        comm.recv(data, a, 7);
        comm.send(data, a, 7);
      }
    }
    batches.push_back(since(start) / (2.0 * rounds));
  }
  std::vector<double> t{me == a ? median_of(batches) : 0.0};
  comm.broadcast(t, a);
  return t[0];
}

// What a buffer's first use for communication costs more, per 4 KiB page: a round trip of
// `bytes` between ranks a and b on fresh (locally written) buffers, then again on the same
// ones; the first message used two buffers (a's and b's) for the first time.
double first_use_per_page(Communicator& comm, int a, int b, std::size_t bytes) {
  const int me = comm.rank();
  std::vector<double> times;
  for (int trial = 0; trial < 3; ++trial) {
    // Allocated as plans allocate their buffers (populated at once, one write per page).
    arma::mat fresh = fresh_matrix<double>(me == a || me == b ? bytes / sizeof(double) : 0, 1);
    fresh.fill(1.0);
    double round[2] = {0, 0};
    for (double& t : round) {
      comm.barrier();
      const auto start = Clock::now();
      if (me == a) {
        comm.send(fresh, b, 8);
        comm.recv(fresh, b, 8);
      } else if (me == b) {
        comm.recv(fresh, a, 8);
        comm.send(fresh, a, 8);
      }
      t = since(start);
    }
    times.push_back(std::max(0.0, round[0] - round[1]));
  }
  std::vector<double> t{me == a ? median_of(times) / (2.0 * static_cast<double>(bytes) / 4096.0)
                                : 0.0};
  comm.broadcast(t, a);
  return t[0];
}

// Piecewise-linear interpolation through the measured (bytes, seconds) points as link pieces:
// piece i serves sizes up to the i-th point (beyond the last, the last slope goes on).
LinkModel fit_link(const std::vector<std::size_t>& sizes, const std::vector<double>& times) {
  LinkModel link;
  for (std::size_t i = 1; i < sizes.size(); ++i) {
    const double ds = static_cast<double>(sizes[i] - sizes[i - 1]);
    double slope = (times[i] - times[i - 1]) / ds;
    // Noise can make a step look free or negative: no faster than the largest messages.
    const double floor_slope =
        (times.back() - times.front()) / static_cast<double>(sizes.back() - sizes.front()) * 0.25;
    slope = std::max(slope, floor_slope);
    LinkPiece piece;
    piece.max_bytes = sizes[i];
    piece.bandwidth_Bps = 1.0 / slope;
    piece.latency_s = std::max(0.0, times[i] - slope * static_cast<double>(sizes[i]));
    link.pieces.push_back(piece);
  }
  return link;
}

// GFLOP/s of c = a * b: the median of repeated multiplies for at least `seconds` (and at
// least 3), after one that warms BLAS's buffers and the pages.
double multiply_gflops(const arma::mat& a, const arma::mat& b, arma::mat& c, double seconds) {
  c = a * b;
  const double flops = 2.0 * static_cast<double>(a.n_rows) * static_cast<double>(a.n_cols) *
                       static_cast<double>(b.n_cols);
  std::vector<double> rates;
  const auto start = Clock::now();
  do {
    const auto t = Clock::now();
    c = a * b;
    rates.push_back(flops / since(t) / 1e9);
  } while (since(start) < seconds || rates.size() < 3);
  return median_of(rates);
}

// GFLOP/s of n x n x n multiplies with `threads` BLAS threads, on this rank alone.
GemmModel gemm_curve(int threads, const std::vector<std::size_t>& sizes) {
  GemmModel g;
  g.threads = threads;
  set_blas_threads(threads);
  for (std::size_t n : sizes) {
    arma::mat a(n, n, arma::fill::randu), b(n, n, arma::fill::randu), c(n, n);
    const double flops =
        2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
    g.curve.push_back({flops, multiply_gflops(a, b, c, 0.15)});
  }
  // Narrow multiplies against the square curve: a few rows (or columns) of output, and a short
  // inner dimension, at n = the largest square measured but at most 1024.
  const std::size_t n = std::min<std::size_t>(sizes.back(), 1024);
  const auto rate_of = [&](std::size_t rows, std::size_t inner, std::size_t cols) {
    arma::mat a(rows, inner, arma::fill::randu), b(inner, cols, arma::fill::randu), c;
    return multiply_gflops(a, b, c, 0.05) / g.rate(2.0 * static_cast<double>(rows * inner * cols));
  };
  for (std::size_t d = 4; d < n; d *= 2) {
    g.narrow.push_back({static_cast<double>(d), rate_of(d, n, n), rate_of(n, d, n)});
  }
  return g;
}

// What a multiply costs more, per 4 KiB page of its operands, the first time it runs on
// freshly allocated (populated) matrices: n x n x n, cold then warm.
double gemm_first_use_per_page(std::size_t n) {
  std::vector<double> extra;
  for (int trial = 0; trial < 3; ++trial) {
    arma::mat a = fresh_matrix<double>(n, n), b = fresh_matrix<double>(n, n),
              c = fresh_matrix<double>(n, n);
    a.fill(1.0);
    b.fill(2.0);
    double t[2];
    for (double& x : t) {
      const auto start = Clock::now();
      c = a * b;
      x = since(start);
    }
    extra.push_back(std::max(0.0, t[0] - t[1]));
  }
  return median_of(extra) / (3.0 * static_cast<double>(n * n * sizeof(double)) / 4096.0);
}

double first_touch_per_page(std::size_t bytes) {
  const long page = sysconf(_SC_PAGESIZE);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 0;
  auto* c = static_cast<volatile unsigned char*>(p);
  const auto start = Clock::now();
  for (std::size_t i = 0; i < bytes; i += static_cast<std::size_t>(page)) c[i] = 1;
  const double s = since(start);
  munmap(p, bytes);
  // Per 4 KiB page, whatever the kernel's page size.
  return s / (static_cast<double>(bytes) / 4096.0);
}

// Bytes per second of copying a block of columns out of a row-major matrix into a
// column-major block (what packing a column datatype, or the simulator's strided copy, does).
double strided_copy_Bps(std::size_t bytes) {
  const std::size_t rows = 2048, width = bytes / sizeof(double) / rows, cols = width / 2;
  std::vector<double> matrix(rows * width, 1.0), block(rows * cols, 0.0);
  std::vector<double> rates;
  for (int i = 0; i < 4; ++i) {
    const auto t = Clock::now();
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t c = 0; c < cols; ++c) block[c * rows + r] = matrix[r * width + c];
    }
    rates.push_back(static_cast<double>(rows * cols * sizeof(double)) / since(t));
  }
  if (block[rows] < 0) rates.push_back(0);  // keeps the copies observable
  return median_of(rates);
}

std::pair<double, double> copy_and_reduce_Bps(std::size_t bytes) {
  const std::size_t n = bytes / sizeof(double);
  std::vector<double> a(n, 1.0), b(n, 2.0);
  std::memcpy(a.data(), b.data(), bytes);  // warm
  std::vector<double> copies, sums;
  for (int i = 0; i < 5; ++i) {
    auto t = Clock::now();
    std::memcpy(a.data(), b.data(), bytes);
    copies.push_back(static_cast<double>(bytes) / since(t));
    t = Clock::now();
    for (std::size_t j = 0; j < n; ++j) a[j] += b[j];
    sums.push_back(static_cast<double>(bytes) / since(t));
  }
  if (a[n / 2] < 0) copies.push_back(0);  // keeps the sums observable
  return {median_of(copies), median_of(sums)};
}

}  // namespace

int run_calibrate_job(Communicator& comm, const Options& options, std::ostream& out,
                      std::ostream& err) {
  const bool root = comm.rank() == kRoot;
  const auto started = Clock::now();
  const bool quick = options.calibrate_quick;
  const std::vector<RankPlacement> placement = gather_placement(comm, kRoot);
  // Which rank shares rank 0's host, and which does not (the two link classes).
  std::vector<double> peers{-1, -1};
  if (root) {
    for (std::size_t r = 1; r < placement.size(); ++r) {
      const bool same = placement[r].host == placement[0].host;
      double& slot = peers[same ? 0 : 1];
      if (slot < 0) slot = static_cast<double>(r);
    }
  }
  comm.broadcast(peers, kRoot);
  const auto progress = [&](const std::string& line) {
    if (root) err << "distmm calibrate: " << line << std::endl;
  };

  std::vector<std::size_t> sizes{8, 64, 512, 4096, 32768, 262144, 1u << 20, 4u << 20};
  if (!quick) {
    sizes.push_back(16u << 20);
    sizes.push_back(64u << 20);
  }
  std::vector<double> buffer(sizes.back() / sizeof(double), 1.0);
  MachineModel model;
  std::vector<int> ranks_of_host0;
  const auto sweep = [&](int peer, const char* what) {
    auto t = Clock::now();
    std::vector<double> times;
    std::vector<std::size_t> measured;
    for (std::size_t s : sizes) {
      // On a slow link the largest messages would take minutes: stop once one takes 0.25 s
      // (the fitted line goes on beyond the last size measured). Rank 0 decides for all.
      if (!times.empty() && times.back() > 0.25) break;
      times.push_back(ping_pong(comm, 0, peer, s, buffer));
      measured.push_back(s);
    }
    std::ostringstream line;
    line.precision(3);
    line << "ping-pong " << what << " (ranks 0 and " << peer << "): " << measured.size()
         << " sizes, 8 B to " << (measured.back() >> 10) << " KiB: " << times.front() * 1e6
         << " us latency, " << static_cast<double>(measured.back()) / times.back() / 1e9
         << " GB/s at the largest (" << since(t) << " s)";
    LinkModel link = fit_link(measured, times);
    link.first_use_s_per_page = first_use_per_page(
        comm, 0, peer, std::min<std::size_t>(measured.back(), quick ? (4u << 20) : (16u << 20)));
    line << "; first use of a buffer " << link.first_use_s_per_page * 1e6 << " us per 4 KiB page";
    progress(line.str());
    return link;
  };
  if (comm.size() < 2) {
    throw InputError(
        "calibrate: needs at least 2 ranks to measure links (mpirun -np 2, or "
        "--ranks 2)",
        -1, "calibrate");
  }
  if (peers[0] >= 0) model.intra = sweep(static_cast<int>(peers[0]), "on one host");
  if (peers[1] >= 0) model.inter = sweep(static_cast<int>(peers[1]), "across hosts");
  if (model.intra.pieces.empty()) model.intra = model.inter;  // one rank per host

  // Local rates, measured on rank 0 while the others wait.
  const int threads_now = blas_threads();
  std::vector<double> local(5, 0.0);
  if (root) {
    auto t = Clock::now();
    std::vector<std::size_t> n{32, 64, 128, 256, 512};
    if (!quick) {
      n.push_back(1024);
      n.push_back(2048);
    }
    model.gemm.push_back(gemm_curve(1, n));
    model.gemm.back().first_use_s_per_page = gemm_first_use_per_page(quick ? 512 : 1024);
    const int cores = static_cast<int>(host_cpus().size());
    // More threads only where rank 0 may run them (under mpirun -np 2 each rank has a core).
    const int mine = static_cast<int>(allowed_cpus().size());
    if (mine > 1) model.gemm.push_back(gemm_curve(mine, n));
    if (threads_now != 1 && threads_now != mine) model.gemm.push_back(gemm_curve(threads_now, n));
    set_blas_threads(threads_now);
    std::ostringstream line;
    line.precision(3);
    line << "gemm: n = 32 to " << n.back() << " with";
    for (const GemmModel& g : model.gemm) {
      line << " " << g.threads << " thread(s): " << g.curve.back().gflops << " GFLOP/s;";
    }
    line << " first use of fresh operands " << model.gemm.front().first_use_s_per_page * 1e6
         << " us per 4 KiB page;";
    for (std::size_t i = 1; i < model.gemm.size(); ++i) {
      model.gemm[i].first_use_s_per_page = model.gemm.front().first_use_s_per_page;
    }
    line << " (" << since(t) << " s)";
    progress(line.str());
    t = Clock::now();
    const std::size_t bytes = quick ? (16u << 20) : (64u << 20);
    local[0] = first_touch_per_page(bytes);
    const auto [copy, reduce] = copy_and_reduce_Bps(bytes);
    local[1] = copy;
    local[2] = reduce;
    local[3] = static_cast<double>(cores);
    local[4] = strided_copy_Bps(bytes);
    std::ostringstream mem;
    mem.precision(3);
    mem << "memory: first touch " << local[0] * 1e6 << " us per 4 KiB page, copy " << copy / 1e9
        << " GB/s, reduction " << reduce / 1e9 << " GB/s, strided copy " << local[4] / 1e9
        << " GB/s (" << since(t) << " s)";
    progress(mem.str());
  }
  comm.barrier();
  model.first_touch_s_per_page = local[0];
  model.copy_Bps = local[1];
  model.reduce_Bps = local[2];
  model.cores_per_host = std::max(1, static_cast<int>(local[3]));
  model.strided_copy_Bps = local[4];
  std::ostringstream by;
  by << "distmm calibrate" << (quick ? " --quick" : "") << " on " << comm.size() << " "
     << comm.backend() << " ranks";
  model.measured_by = by.str();
  model.name = (root ? placement[0].host : std::string()) + " (" + comm.backend() + ")";
  comm.stats().reset();
  int code = kSuccess;
  if (root) {
    const std::string text = model_json(model);
    if (options.out_file.empty()) {
      out << text << std::flush;
    } else {
      code = write_outputs(err, [&] { save_text(text, options.out_file, "--out"); });
    }
    std::ostringstream line;
    line.precision(3);
    line << "done in " << since(started) << " s"
         << (options.out_file.empty() ? "" : ": " + options.out_file);
    progress(line.str());
  }
  std::vector<double> agreed{static_cast<double>(code)};
  comm.broadcast(agreed, kRoot);
  return static_cast<int>(agreed[0]);
}

}  // namespace distmm::cli
