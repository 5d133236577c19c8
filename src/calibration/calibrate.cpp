// calibrate() (calibration.hpp): the phases in turn, each measuring one family
// (measure.hpp) and recording it in the model; rank 0's figures decide for all.

#include <algorithm>
#include <armadillo>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "calibration/measure.hpp"
#include "distmm/blas.hpp"
#include "distmm/calibration.hpp"
#include "distmm/error.hpp"
#include "distmm/report.hpp"

namespace distmm {
namespace calibration {
namespace {

constexpr int kRoot = 0;

// Parts of a progress line as text, figures to 3 significant digits.
template <class... Parts>
std::string text(const Parts&... parts) {
  std::ostringstream line;
  line.precision(3);
  (line << ... << parts);
  return line.str();
}

// One calibration's state: what the phases measured so far and what later ones need of it.
struct Calibration {
  Calibration(Communicator& c, const CalibrationOptions& options,
              const std::function<void(const std::string&)>& report);
  LinkModel link_sweep(int peer, const char* what);
  void links();
  void topology();
  void collectives();
  void multiplies();
  // Whether ranks multiplying at once with `threads` each have cores of their own (gemm_curve
  // then keeps the slowest rank's rate). Only judged on one host: hosts that are namespaces of
  // one machine share its cores, and nothing here tells them from machines of their own.
  bool own_cores(int threads, bool one_per_host = false) const {
    const int ranks = one_per_host ? 1 : on_host[0];
    return hosts == 1 && ranks * threads <= static_cast<int>(host_cpus().size());
  }
  void memory();
  void rounds();
  void finish();
  // One progress line on rank 0.
  template <class... Parts>
  void say(const Parts&... parts) const {
    if (root && on_progress) on_progress(text(parts...));
  }

  Communicator& comm;
  bool root, quick;
  Clock::time_point t;
  std::function<void(const std::string&)> on_progress;
  std::vector<RankPlacement> placement;
  std::vector<double> peers{-1, -1};  // a rank on rank 0's host, and one on another
  std::vector<std::size_t> sizes{8, 64, 512, 4096, 32768, 262144, 1u << 20, 4u << 20};
  std::vector<double> buffer;
  MachineModel model;
  // Where the ranks are: each rank's host (0: rank 0's), rank 0's host's ranks, how many
  // ranks each host has, this rank's index on its host, the most on one.
  std::vector<double> host_of;
  std::unique_ptr<Communicator> host0;
  int hosts = 1, local_index = 0, most = 1;
  std::vector<int> on_host;
  std::size_t max_bytes = 0;
  double max_call_s = 0, idle_s = 0;
  // The multiplies: this launch's BLAS threads, rank 0's CPUs, the sizes; the memory figures
  // (first touch, copy, reduce, cores, strided copy).
  int threads_now = 1, mine = 1;
  std::vector<std::size_t> n;
  bool one_process = false;
  std::vector<double> local;
};

Calibration::Calibration(Communicator& c, const CalibrationOptions& options,
                         const std::function<void(const std::string&)>& report)
    : comm(c), root(c.rank() == kRoot), quick(options.quick), on_progress(report) {
  placement = gather_placement(comm, kRoot);
  // Which rank shares rank 0's host, and which does not (the two link classes).
  if (root) {
    for (std::size_t r = 1; r < placement.size(); ++r) {
      const bool same = placement[r].host == placement[0].host;
      double& slot = peers[same ? 0 : 1];
      if (slot < 0) slot = static_cast<double>(r);
    }
  }
  comm.broadcast(peers, kRoot);
  if (!quick) {
    sizes.push_back(16u << 20);
    sizes.push_back(64u << 20);
  }
  buffer.assign(sizes.back() / sizeof(double), 1.0);
}

LinkModel Calibration::link_sweep(int peer, const char* what) {
  const auto start = Clock::now();
  std::vector<double> times;
  std::vector<std::size_t> measured;
  for (std::size_t s : sizes) {
    // On a slow link the largest messages would take minutes: stop once one takes 50 ms,
    // well into the link's bandwidth (the fit goes on beyond). Rank 0 decides for all.
    if (!times.empty() && times.back() > 0.05) break;
    // The last size's time scaled to this one (an overestimate while latency dominates).
    const double expected = times.empty() ? 0.0
                                          : times.back() * static_cast<double>(s) /
                                                static_cast<double>(measured.back());
    times.push_back(ping_pong(comm, 0, peer, s, buffer, expected));
    measured.push_back(s);
  }
  const double sweep_s = since(start);
  LinkModel link = fit_link(measured, times);
  link.first_use_s_per_page = first_use_per_page(
      comm, 0, peer, std::min<std::size_t>(measured.back(), quick ? (4u << 20) : (16u << 20)));
  say("ping-pong ", what, " (ranks 0 and ", peer, "): ", measured.size(), " sizes, 8 B to ",
      measured.back() >> 10, " KiB: ", times.front() * 1e6, " us latency, ",
      static_cast<double>(measured.back()) / times.back() / 1e9, " GB/s at the largest (", sweep_s,
      " s); first use of a buffer ", link.first_use_s_per_page * 1e6, " us per 4 KiB page");
  return link;
}

// The ping-pong sweeps: on one host, and across hosts where the ranks span several.
void Calibration::links() {
  if (comm.size() < 2) {
    throw InputError(
        "calibrate: needs at least 2 ranks to measure links (mpirun -np 2, or "
        "--ranks 2)",
        -1, "calibrate");
  }
  if (peers[0] >= 0) model.intra = link_sweep(static_cast<int>(peers[0]), "on one host");
  if (peers[1] >= 0) model.inter = link_sweep(static_cast<int>(peers[1]), "across hosts");
  if (model.intra.pieces.empty()) model.intra = model.inter;  // one rank per host
}

// Which host each rank is on, and the sizes the collective sweeps go to.
void Calibration::topology() {
  // Which host each rank is on (0: rank 0's), known to every rank.
  host_of.assign(static_cast<std::size_t>(comm.size()), 0.0);
  if (root) {
    std::vector<std::string> names;
    for (std::size_t r = 0; r < placement.size(); ++r) {
      auto it = std::find(names.begin(), names.end(), placement[r].host);
      host_of[r] = static_cast<double>(it - names.begin());
      if (it == names.end()) names.push_back(placement[r].host);
    }
  }
  comm.broadcast(host_of, kRoot);
  // The ranks of rank 0's host (the intra-host contention).
  host0 =
      comm.split(host_of[static_cast<std::size_t>(comm.rank())] == 0 ? 0 : kNoColor, comm.rank());
  hosts = static_cast<int>(*std::max_element(host_of.begin(), host_of.end())) + 1;
  on_host.assign(static_cast<std::size_t>(hosts), 0);
  local_index = 0;
  for (int r = 0; r < comm.size(); ++r) {
    const auto h = static_cast<std::size_t>(host_of[static_cast<std::size_t>(r)]);
    if (r == comm.rank()) local_index = on_host[h];
    ++on_host[h];
  }
  most = *std::max_element(on_host.begin(), on_host.end());
  max_bytes = quick ? (16u << 20) : (64u << 20);
  max_call_s = 0.1;
  // Between calls across hosts: up to 10 ms (a shaped link's token bucket refills).
  idle_s = hosts > 1 ? 0.01 : 0.0;
}

// Every collective over sizes on the world and, where ranks span hosts, on HSDP's shard and
// replica groups at once, as HSDP runs them (on one host, on the groups of each size dividing
// the world); and a ring exchange beside a multiply.
void Calibration::collectives() {
  {
    t = Clock::now();
    const bool even = std::all_of(on_host.begin(), on_host.end(), [&](int c) { return c == most; });
    std::vector<CollectiveCurve> curves =
        collective_sweep(comm, comm, most, 1, max_bytes, max_call_s, idle_s);
    std::string groups = "the world";
    if (hosts > 1 && most > 1 && even) {
      // The ranks across hosts with the same index on theirs (HSDP's replica groups).
      const auto cross_group = comm.split(local_index, comm.rank());
      const auto host_group =
          comm.split(static_cast<int>(host_of[static_cast<std::size_t>(comm.rank())]), comm.rank());
      // Only what HSDP's shard groups call (the other kinds would cost seconds of the 90).
      for (auto& c : collective_sweep(comm, *host_group, most, hosts, max_bytes, max_call_s, idle_s,
                                      {"scatterv", "allgatherv", "reduce_scatter", "gatherv"})) {
        curves.push_back(std::move(c));
      }
      // HSDP's replica groups only broadcast (placing B) and all-reduce (training's gradients).
      for (auto& c : collective_sweep(comm, *cross_group, 1, most, max_bytes, max_call_s, idle_s,
                                      {"broadcast", "allreduce"})) {
        curves.push_back(std::move(c));
      }
      groups += ", each host's ranks and the ranks across hosts";
    }
    if (hosts == 1) {
      // Groups of each size that divides the world, all at once (grid's rows, columns and
      // layers, hsdp's shard and replica groups): with more ranks than cores, their members
      // wait on one another's turn at the cores, which a ping-pong between two ranks does not.
      // To a quarter of the world's largest size (mpirun -np 8 on 2 cores: calibrate 77 s
      // without these groups, 97 with them to 64 MiB, 81 to 16); beyond it the largest call's
      // rate goes on.
      const std::size_t group_max_bytes = max_bytes / 4;
      bool divided = false;
      for (int size = 2; size < comm.size(); ++size) {
        if (comm.size() % size != 0) continue;
        divided = true;
        const auto group = comm.split(comm.rank() / size, comm.rank());
        for (auto& c : collective_sweep(comm, *group, size, comm.size() / size, group_max_bytes,
                                        max_call_s, idle_s, {})) {
          curves.push_back(std::move(c));
        }
      }
      if (divided)
        groups += text(" and the groups dividing it (to ", group_max_bytes >> 20, " MiB)");
    }
    model.collectives = std::move(curves);
    // fsdp-overlap's contention, within rank 0's host and across hosts, and how much longer
    // than the links' time the exchange takes alone.
    RingFigures intra, inter;
    if (host0 && host0->size() > 1) intra = overlap_contention(*host0, model.intra, max_bytes);
    comm.barrier();
    if (hosts > 1) {
      // fsdp-overlap's own ring: the world's, in rank order over the real placement.
      inter = overlap_contention(comm, model.inter, max_bytes);
      if (!(host0 && host0->size() > 1)) intra = inter;
    }
    std::vector<double> figures{intra.contention, inter.contention, intra.exchange_slowdown,
                                inter.exchange_slowdown};
    comm.broadcast(figures, kRoot);
    model.intra.overlap_contention = figures[0];
    model.inter.overlap_contention = figures[1];
    model.intra.exchange_slowdown = figures[2];
    model.inter.exchange_slowdown = figures[3];
    const bool across = hosts > 1;
    say("collectives: ", std::size(kCollectiveOps), " kinds on ", groups, ", 8 B to ",
        max_bytes >> 20, " MiB; a ring exchange beside a multiply: contention ",
        model.intra.overlap_contention, " on one host",
        across ? text(", ", model.inter.overlap_contention, " across hosts") : "",
        "; the exchange alone ", model.intra.exchange_slowdown,
        across ? text(" and ", model.inter.exchange_slowdown) : "", " times the link's time (",
        since(t), " s)");
  }
}

// The gemm curves, measured as a run multiplies: on every rank at once, sharing the memory
// bandwidth and the cores (also where hosts share a machine). First one BLAS thread per rank;
// then, under MPI, the thread counts a run may use: every rank with its own (as this launch's
// runs), and one rank per host with all its CPUs. The simulator's ranks share one process
// and its BLAS: those on rank 0 alone. Rank 0 records.
void Calibration::multiplies() {
  threads_now = blas_threads();
  local.assign(5, 0.0);
  t = Clock::now();
  n = {32, 64, 128, 256, 512};
  if (!quick) {
    n.push_back(1024);
    n.push_back(2048);
  }
  {
    GemmModel g = gemm_curve(1, n, comm, own_cores(1));
    g.concurrent = on_host[0];
    comm.barrier();
    if (root) model.gemm.push_back(g);
  }
  // Rank 0's thread counts, which decide for all: all its CPUs, and what this launch's runs
  // use. Each rank taking part measures with its own.
  mine = static_cast<int>(allowed_cpus().size());
  std::vector<double> counts{static_cast<double>(mine), static_cast<double>(threads_now)};
  comm.broadcast(counts, kRoot);
  one_process = comm.backend() == "simulator";
  const auto more_threads = [&](int threads, bool one_per_host) {
    const bool in = one_process ? root : !one_per_host || local_index == 0;
    const auto group = comm.split(in ? 0 : kNoColor, comm.rank());
    if (group) {
      // With their own narrow efficiencies (threads sharing cores lose far more on narrow
      // shapes); one rank per host where the launch has more is a secondary curve.
      GemmModel g = gemm_curve(threads, n, *group, own_cores(threads, one_per_host),
                               one_per_host && on_host[0] > 1);
      if (root) model.gemm.push_back(g);
    }
    comm.barrier();
  };
  // More threads only where rank 0 may run them (under mpirun -np 2 each rank has a core).
  if (counts[0] > 1) more_threads(mine, true);
  if (counts[1] != 1 && counts[1] != counts[0]) more_threads(threads_now, false);
  set_blas_threads(threads_now);
  if (root) {
    std::string curves;
    for (const GemmModel& g : model.gemm) {
      curves += text(curves.empty() ? " " : "; ", g.threads, " thread(s): ", g.curve.back().gflops,
                     " GFLOP/s");
    }
    say("gemm: n = 32 to ", n.back(), " with", curves, " (", since(t), " s)");
  }
}

// First touch, copy, reduction and strided-copy rates (rank 0).
void Calibration::memory() {
  const std::unique_ptr<Communicator> self = comm.split(root ? 0 : kNoColor, 0);
  if (!root) return;
  t = Clock::now();
  const std::size_t bytes = quick ? (16u << 20) : (64u << 20);
  // First touch five times over a quarter of the bytes: the median is the figure, the spread
  // of the five the cold executions' (their first touches and first uses) on this machine.
  std::vector<double> touches;
  for (int i = 0; i < 5; ++i) touches.push_back(first_touch_per_page(bytes / 4));
  local[0] = median_of(touches);
  model.uncertainty.spread_cold = log_spread(touches);
  const auto [copy, reduce] = copy_and_reduce_Bps(bytes);
  local[1] = copy;
  local[2] = reduce;
  local[3] = static_cast<double>(host_cpus().size());
  local[4] = strided_copy_Bps(2048, bytes / sizeof(double) / 2048);
  model.strided_copy_curve = strided_copy_curve(*self, bytes / 2);
  say("memory: first touch ", local[0] * 1e6, " us per 4 KiB page, copy ", copy / 1e9,
      " GB/s, reduction ", reduce / 1e9, " GB/s, strided copy ", local[4] / 1e9, " GB/s (",
      model.strided_copy_curve.front().Bps / 1e9, " GB/s in blocks of ",
      model.strided_copy_curve.front().bytes >> 10, " KiB) (", since(t), " s)");
}

// The runs' multiply rate, every rank at once, round after round: how much it varies is the
// warm executions' spread on this machine.
void Calibration::rounds() {
  const std::size_t size = quick ? 512 : 1024;
  const auto start = Clock::now();
  const Rounds measured = multiply_rounds(comm, size, quick ? 5 : 9);
  model.uncertainty.spread_warm = measured.spread;
  say("rounds: ", comm.size(), " ranks' ", size, "^3 multiplies at once, ",
      2.0 * std::pow(static_cast<double>(size), 3.0) / measured.mean_s / 1e9, " GFLOP/s each, ",
      100 * measured.spread, " % apart from round to round (", since(start), " s)");
}

// The model's remaining figures and its name.
void Calibration::finish() {
  model.first_touch_s_per_page = local[0];
  model.copy_Bps = local[1];
  model.reduce_Bps = local[2];
  model.cores_per_host = std::max(1, static_cast<int>(local[3]));
  model.strided_copy_Bps = local[4];
  std::ostringstream by;
  by << "distmm calibrate" << (quick ? " --quick" : "") << " on " << comm.size() << " "
     << comm.backend() << " ranks";
  model.measured_by = by.str();
  model.backend = comm.backend() == "simulator" ? "simulator" : "mpi";
  model.name = (root ? placement[0].host : std::string()) + " (" + comm.backend() + ")";
}

}  // namespace
}  // namespace calibration

MachineModel calibrate(Communicator& comm, const CalibrationOptions& options,
                       const std::function<void(const std::string&)>& progress) {
  calibration::Calibration c(comm, options, progress);
  c.links();
  c.topology();
  c.collectives();
  c.multiplies();
  c.memory();
  c.rounds();
  c.finish();
  return std::move(c.model);
}

}  // namespace distmm
