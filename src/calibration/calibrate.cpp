// calibrate() (calibration.hpp): the phases in turn, each measuring one family
// (measure.hpp) and recording it in the model; rank 0's figures decide for all.

#include <algorithm>
#include <armadillo>
#include <cmath>
#include <memory>
#include <optional>
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

// One calibration's state: what the phases measured so far and what later ones need of it.
struct Calibration {
  Calibration(Communicator& c, const CalibrationOptions& options,
              const std::function<void(const std::string&)>& report);
  LinkModel link_sweep(int peer, const char* what);
  void links();
  void topology();
  void collectives();
  void multiplies();
  void memory();
  void rounds();
  void links_again();
  void gemm_again();
  void finish();
  void progress(const std::string& line) const {
    if (root && on_progress) on_progress(line);
  }

  Communicator& comm;
  bool root, quick;
  Clock::time_point started, t;
  std::function<void(const std::string&)> on_progress;
  std::vector<RankPlacement> placement;
  std::vector<double> peers{-1, -1};  // a rank on rank 0's host, and one on another
  std::vector<std::size_t> sizes{8, 64, 512, 4096, 32768, 262144, 1u << 20, 4u << 20};
  std::vector<double> buffer;
  MachineModel model;
  // The ping-pong across hosts as measured (sizes, one-way times): measured again later.
  std::vector<std::size_t> inter_sizes;
  std::vector<double> inter_times;
  // Where the ranks are: each rank's host (0: rank 0's), rank 0's host's ranks, how many
  // ranks each host has, this rank's index on its host, the most on one.
  std::vector<double> host_of;
  std::unique_ptr<Communicator> host0;
  int hosts = 1, local_index = 0, most = 1;
  std::vector<int> on_host;
  std::size_t max_bytes = 0;
  double max_call_s = 0, idle_s = 0;
  double world_sweep_s = 0;  // how long the world's collective sweep took
  // The multiplies: this launch's BLAS threads, rank 0's CPUs, the sizes, the one-thread
  // curve's time; the memory figures (first touch, copy, reduce, cores, strided copy).
  int threads_now = 1, mine = 1;
  std::vector<std::size_t> n;
  double primary_s = 0;
  bool one_process = false;
  std::vector<double> local;
  // The rounds of a reference multiply on every rank: its size, flops and rate.
  std::size_t reference_n = 0;
  double reference_flops = 0, reference_rate = 0;
};

Calibration::Calibration(Communicator& c, const CalibrationOptions& options,
                         const std::function<void(const std::string&)>& report)
    : comm(c),
      root(c.rank() == kRoot),
      quick(options.quick),
      started(Clock::now()),
      on_progress(report) {
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
    // well into the link's bandwidth (the fitted line goes on beyond the last size
    // measured). Rank 0 decides for all.
    if (!times.empty() && times.back() > 0.05) break;
    // The last size's time scaled to this one (an overestimate while latency dominates).
    const double expected = times.empty() ? 0.0
                                          : times.back() * static_cast<double>(s) /
                                                static_cast<double>(measured.back());
    times.push_back(ping_pong(comm, 0, peer, s, buffer, expected));
    measured.push_back(s);
  }
  std::ostringstream line;
  line.precision(3);
  line << "ping-pong " << what << " (ranks 0 and " << peer << "): " << measured.size()
       << " sizes, 8 B to " << (measured.back() >> 10) << " KiB: " << times.front() * 1e6
       << " us latency, " << static_cast<double>(measured.back()) / times.back() / 1e9
       << " GB/s at the largest (" << since(start) << " s)";
  if (peer == static_cast<int>(peers[1])) {
    inter_sizes = measured;
    inter_times = times;
  }
  LinkModel link = fit_link(measured, times);
  link.first_use_s_per_page = first_use_per_page(
      comm, 0, peer, std::min<std::size_t>(measured.back(), quick ? (4u << 20) : (16u << 20)));
  line << "; first use of a buffer " << link.first_use_s_per_page * 1e6 << " us per 4 KiB page";
  progress(line.str());
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
  // Collective sweeps: on the world, and where ranks span hosts, on the groups of each host
  // and the groups across hosts (HSDP's shard and replica groups), each group beside the
  // others as HSDP runs them.
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
  // Between calls across hosts: up to 10 ms (a 256 KiB token bucket refills in 10 ms at
  // 200 Mbit/s).
  idle_s = hosts > 1 ? 0.01 : 0.0;
  world_sweep_s = 0;
}

// Every collective over sizes, and a ring exchange beside a multiply.
void Calibration::collectives() {
  {
    t = Clock::now();
    const bool even = std::all_of(on_host.begin(), on_host.end(), [&](int c) { return c == most; });
    std::vector<CollectiveCurve> curves =
        collective_sweep(comm, comm, most, 1, max_bytes, max_call_s, idle_s);
    world_sweep_s = since(t);
    std::string groups = "the world";
    if (hosts > 1 && most > 1 && even) {
      // The ranks across hosts with the same index on theirs (HSDP's replica groups).
      const auto cross_group = comm.split(local_index, comm.rank());
      const auto host_group =
          comm.split(static_cast<int>(host_of[static_cast<std::size_t>(comm.rank())]), comm.rank());
      // HSDP's shard groups scatter B's shards, all-gather them, reduce-scatter training's
      // gradients and gather W: the other five kinds had taken 4.9 s of a calibration on 2
      // hosts of 2 ranks at 200 Mbit/s, whose target is 90 s.
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
    model.collectives = std::move(curves);
    // fsdp-overlap's contention: within rank 0's host, and across hosts.
    // And how much longer than the links' time the exchange takes alone.
    RingFigures intra, inter;
    if (host0 && host0->size() > 1) intra = overlap_contention(*host0, model.intra, max_bytes);
    comm.barrier();
    if (hosts > 1) {
      // fsdp-overlap's own ring: the world's, in rank order over the real placement (with 2
      // ranks per host one message each way crosses between the hosts, where the groups across
      // hosts had sent two).
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
    std::ostringstream line;
    line.precision(3);
    line << "collectives: " << std::size(kCollectiveOps) << " kinds on " << groups << ", 8 B to "
         << (max_bytes >> 20) << " MiB; a ring exchange beside a multiply: contention "
         << model.intra.overlap_contention << " on one host";
    if (hosts > 1) line << ", " << model.inter.overlap_contention << " across hosts";
    line << "; the exchange alone " << model.intra.exchange_slowdown;
    if (hosts > 1) line << " and " << model.inter.exchange_slowdown;
    line << " times the link's time";
    line << " (" << since(t) << " s)";
    progress(line.str());
  }

  // The multiply rates, measured as a run multiplies: on every rank at once, sharing the
  // memory bandwidth, and the cores where ranks share them (also where hosts share a machine,
  // as bench/validate_model.py's namespace hosts do: measured on one host's ranks alone while
  // the other host's idled, 1 rank per host, 2 BLAS threads, the curve said 77 GFLOP/s and
  // training steps ran at half that). Rank 0 records. First one BLAS thread per rank; then,
  // under MPI, the thread counts a run may use: every rank with its own (as this launch's
  // runs), and one rank per host with all its CPUs (as with one rank per host). The
  // simulator's ranks share one process and its BLAS: those on rank 0 alone.
}

// The gemm curves.
void Calibration::multiplies() {
  threads_now = blas_threads();
  local.assign(5, 0.0);
  t = Clock::now();
  n = {32, 64, 128, 256, 512};
  if (!quick) {
    n.push_back(1024);
    n.push_back(2048);
  }
  primary_s = 0;
  {
    GemmModel g = gemm_curve(1, n, comm);
    primary_s = since(t);
    g.concurrent = on_host[0];
    comm.barrier();
    g.first_use_s_per_page = gemm_first_use_per_page(quick ? 512 : 1024, comm);
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
      // With their own narrow efficiencies: threads that share cores with other ranks' (the
      // namespace hosts, 1 rank per host, 2 threads each) ran 16 x 2048 x 2048 at 3-9
      // GFLOP/s, a fifth of what the one-thread curve's efficiency said.
      // One rank per host where the launch has more: for runs placed otherwise than this
      // launch's (which use one thread each), a secondary curve.
      GemmModel g = gemm_curve(threads, n, *group, one_per_host && on_host[0] > 1);
      if (root) model.gemm.push_back(g);
    }
    comm.barrier();
  };
  // More threads only where rank 0 may run them (under mpirun -np 2 each rank has a core).
  if (counts[0] > 1) more_threads(mine, true);
  if (counts[1] != 1 && counts[1] != counts[0]) more_threads(threads_now, false);
  set_blas_threads(threads_now);
  if (root) {
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
  }
}

// First touch, copy, reduction and strided-copy rates (rank 0).
void Calibration::memory() {
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
  local[4] = strided_copy_Bps(2048, bytes / sizeof(double) / 2048, one_process);
  std::ostringstream mem;
  mem.precision(3);
  mem << "memory: first touch " << local[0] * 1e6 << " us per 4 KiB page, copy " << copy / 1e9
      << " GB/s, reduction " << reduce / 1e9 << " GB/s, strided copy " << local[4] / 1e9
      << " GB/s (" << since(t) << " s)";
  progress(mem.str());
}

// The runs' multiply rate, every rank at once, round after round: how much it varies is the
// warm executions' spread on this machine.
void Calibration::rounds() {
  reference_n = quick ? 512 : 1024;
  reference_flops = 2.0 * std::pow(static_cast<double>(reference_n), 3.0);
  const auto t_rounds = Clock::now();
  const Rounds measured = multiply_rounds(comm, reference_n, quick ? 5 : 9);
  model.uncertainty.spread_warm = measured.spread;
  reference_rate = reference_flops / measured.mean_s / 1e9;
  if (root) {
    std::ostringstream line;
    line.precision(3);
    line << "rounds: " << comm.size() << " ranks' " << reference_n << "^3 multiplies at once, "
         << reference_rate << " GFLOP/s each, " << 100 * measured.spread
         << " % apart from round to round (" << since(t_rounds) << " s)";
    progress(line.str());
  }
}

// The link across hosts once more (and the collectives, where it was slower).
void Calibration::links_again() {
  if (hosts > 1) {
    // The link across hosts once more, a minute of multiplies later: this machine's namespace
    // links had run a whole calibration at 56-86 MB/s of a 1 Gbit/s link (stalls of 4 ms at
    // 4 MiB; 256 KiB gathers in 11 ms), while the runs right after it, and every other
    // calibration, moved at 116-119 MB/s (its predictions 55 % off at the median). Each size
    // keeps the faster of its two measures; where the first sweep's largest message took
    // more than kSlowerLink times the second's, the world's collectives (measured right
    // after it) are measured again too and each point keeps the faster call.
    constexpr double kSlowerLink = 1.25;
    t = Clock::now();
    const int peer = static_cast<int>(peers[1]);
    std::vector<double> again;
    for (std::size_t i = 0; i < inter_sizes.size(); ++i) {
      // Three batches (the first sweep's five took 3.9 s at 200 Mbit/s).
      again.push_back(ping_pong(comm, 0, peer, inter_sizes[i], buffer, inter_times[i], 3));
    }
    const double slower = inter_times.back() / again.back();
    for (std::size_t i = 0; i < again.size(); ++i) {
      inter_times[i] = std::min(inter_times[i], again[i]);
    }
    // New pieces; the figures measured beside them (first use, contention, exchange) stay.
    model.inter.pieces = fit_link(inter_sizes, inter_times).pieces;
    // One rank per host: the intra link is the inter's.
    if (peers[0] < 0) model.intra = model.inter;
    std::ostringstream line;
    line.precision(3);
    line << "ping-pong across hosts again: the first sweep's largest message took " << slower
         << " times as long";
    // Within the 90 s a calibration may take: rank 0's clock decides for all.
    std::vector<double> fits{since(started) + 1.2 * world_sweep_s <= kBudget_s ? 1.0 : 0.0};
    comm.broadcast(fits, kRoot);
    if (slower > kSlowerLink && fits[0] > 0) {
      merge_faster(model.collectives,
                   collective_sweep(comm, comm, most, 1, max_bytes, max_call_s, idle_s));
      line << "; the world's collectives measured again, the faster of each point kept";
    } else if (slower > kSlowerLink) {
      line << "; no time left to measure the collectives again (they may describe a slower "
              "link than the runs will see: calibrate again)";
    }
    line << " (" << since(t) << " s)";
    progress(line.str());
  }
}

// The runs' multiply rate once more, against the curve.
void Calibration::gemm_again() {
  {
    // The runs' multiply rate once more, a while after the gemm phase: the reference
    // multiplies (every rank at once, with the threads this launch's runs use) against the
    // curve of that thread count, where every rank measured it. This machine slows down for
    // tens of seconds at a time: a --ranks 2 calibration's one-thread curve read 12.7-29.5
    // GFLOP/s (21.0 at n = 2048) while 1024^3 probes before and after it read 63.6 and
    // 67.6 with 2 threads, as usual, and three calibrations later 29-37 at n = 1024 and 2048:
    // its predictions came out 45 % slow. Where the reference rounds' rate is more than
    // kFasterGemm times the curve's, the curve is measured again (within the budget) and
    // each size keeps the faster figure.
    constexpr double kFasterGemm = 1.25;
    const bool all_ranks_curve =
        threads_now == 1 || (!one_process && on_host[0] == 1 && threads_now == mine);
    // The launch's curve (rank 0 holds the model).
    const auto launch = std::find_if(model.gemm.begin(), model.gemm.end(),
                                     [&](const GemmModel& g) { return g.threads == threads_now; });
    std::vector<double> check{0.0, 0.0, 0.0};  // the rounds' rate over the curve's, fits, curve's
    if (root && all_ranks_curve && launch != model.gemm.end()) {
      check[2] = launch->rate(reference_flops);
      check[0] = reference_rate / check[2];
      check[1] = since(started) + 1.2 * primary_s <= kBudget_s ? 1.0 : 0.0;
    }
    comm.broadcast(check, kRoot);
    if (check[0] > kFasterGemm) {
      t = Clock::now();
      std::optional<GemmModel> again;
      if (check[1] > 0) again = gemm_curve(threads_now, n, comm);
      if (root) {
        std::ostringstream line;
        line.precision(3);
        line << "gemm again: " << reference_n << "^3 multiplies on every rank ran at "
             << reference_rate << " GFLOP/s, the " << threads_now << "-thread curve said "
             << check[2];
        if (again) {
          std::vector<GemmPoint>& curve = launch->curve;
          for (std::size_t i = 0; i < curve.size() && i < again->curve.size(); ++i) {
            curve[i].gflops = std::max(curve[i].gflops, again->curve[i].gflops);
          }
          line << "; measured again, the faster of each size kept: " << curve.back().gflops
               << " GFLOP/s at n = " << n.back();
        } else {
          line << "; no time left to measure it again (it may describe a slower machine than "
                  "the runs will see: calibrate again)";
        }
        line << " (" << since(t) << " s)";
        progress(line.str());
      }
    }
  }
}

// The model's remaining figures and its name.
void Calibration::finish() {
  model.first_touch_s_per_page = local[0];
  cap_first_use_across_hosts(model.collectives, local[0]);
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
  c.links_again();
  c.gemm_again();
  c.finish();
  return std::move(c.model);
}

}  // namespace distmm
