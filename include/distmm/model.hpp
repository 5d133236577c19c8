#pragma once
// A machine model and the time it predicts for a strategy run.
//
// The model (a JSON file, docs/model.schema.json; `distmm calibrate` measures one, a user may
// write one for a cluster they do not have) says what the machine's parts cost:
//   links        per link class — "intra" (ranks on one host) and "inter" (ranks on different
//                hosts) — a piecewise latency/bandwidth curve: a message of s bytes costs
//                latency_s + s / bandwidth_Bps of the first piece whose max_bytes >= s (MPI
//                switches protocols with the size, so one line rarely fits), and what a
//                buffer's first use costs more per page (the cold execution pays it);
//   gemm         GFLOP/s of a local multiply by BLAS threads, as a curve over the multiply's
//                flops (small multiplies run slower), interpolated log-linearly;
//   memory       copy bandwidth (a simulator message is one copy) and the reduction rate;
//   first_touch  seconds per 4 KiB page of memory touched for the first time;
//   host         cores per host (more ranks than cores slow each rank down).
// The prediction replays the sequence of communication and compute events a real run records
// (planned_events(), the same sequence: a test asserts it), costing each collective by the
// algorithm the backend picks for it at that size and group, and synchronizing the ranks at
// every collective (a collective starts when its last member arrives).
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "distmm/dry_run.hpp"
#include "distmm/shape.hpp"
#include "distmm/stats.hpp"
#include "distmm/strategy.hpp"

namespace distmm {

// y at x along `points` (ascending in x_of, not empty): linear in the logarithm of x between
// the two points around it, held beyond the ends.
template <class Points, class X, class Y>
double interpolate_in_log(const Points& points, double x, X x_of, Y y_of) {
  if (x <= x_of(points.front())) return y_of(points.front());
  if (x >= x_of(points.back())) return y_of(points.back());
  for (std::size_t i = 1; i < points.size(); ++i) {
    if (x <= x_of(points[i])) {
      const double x0 = x_of(points[i - 1]), x1 = x_of(points[i]);
      const double w = (std::log(x) - std::log(x0)) / (std::log(x1) - std::log(x0));
      return y_of(points[i - 1]) + w * (y_of(points[i]) - y_of(points[i - 1]));
    }
  }
  return y_of(points.back());
}

struct LinkPiece {
  std::uint64_t max_bytes = 0;  // this piece serves messages of up to max_bytes
  double latency_s = 0;
  double bandwidth_Bps = 0;
};

// The largest LinkModel::overlap_contention a model may give.
inline constexpr double kMaxContention = 4.0;

struct LinkModel {
  std::vector<LinkPiece> pieces;  // by max_bytes, ascending; the last serves larger ones too
  // What a message costs more, per 4 KiB page of its buffers (sent and received), when the
  // buffers are used for communication the first time: Open MPI's single-copy mechanism
  // (CMA) maps the peer's pages on first use (measured here: about 6 us per page; 0 in the
  // simulator, whose messages are plain copies).
  double first_use_s_per_page = 0;
  // A multiply on a helper thread beside a ring exchange over this link (fsdp-overlap) takes
  // the longer of the two plus this fraction of the shorter: 0 when they run truly in
  // parallel, 1 when they share the CPU that moves the bytes (Open MPI's shared-memory copy
  // on a rank bound to one core), more (up to kMaxContention) when they hinder each other
  // beyond that (more ranks than cores: the lower-priority helpers wait while other ranks'
  // main threads poll). Calibrate measures it.
  double overlap_contention = 0;
  // A ring shift's messages (every rank sending to the next while receiving from the one
  // before, all at once: fsdp-overlap's steps) take this many times the link's time for their
  // size, which a ping-pong measured one direction at a time: across the namespace hosts TCP
  // carried both directions at once at about half the rate; with 4 ranks on 2 cores four
  // copies share the cores. Calibrate measures it beside the contention (up to
  // kMaxContention); 1 when absent.
  double exchange_slowdown = 1;
  // Seconds to move one message of `bytes` over the link.
  double time(std::uint64_t bytes) const;
};

// The link through ping-pong points (message bytes ascending, one-way seconds): piecewise
// linear, piece i serving sizes up to the i-th point (beyond the last, its slope goes on).
// Noise is ironed out: a message is never faster than a smaller one, and no piece's rate is
// above 4 times the whole sweep's (at most 1 TB/s): every bandwidth is positive and finite.
LinkModel fit_link(const std::vector<std::size_t>& sizes, const std::vector<double>& times);

struct GemmPoint {
  double flops = 0;   // 2 m k n of the multiply
  double gflops = 0;  // its rate
};

// A multiply with a narrow side runs below the curve's rate for its flops: `rows` is the
// efficiency when the smaller of its output's sides (rows or cols) is `dim`, `inner` when its
// inner dimension is `dim` (1 beyond the largest dim measured), with its other two
// dimensions `other` (0: any). The narrower the multiply, the more of it is streaming its
// big operand through memory, so the efficiency falls as that operand outgrows the caches:
// between measured `other`s it is interpolated log-linearly, beyond them the nearest holds.
struct GemmNarrow {
  double dim = 0;
  double rows = 1, inner = 1;
  double other = 0;
};

struct GemmModel {
  int threads = 1;                 // BLAS threads per multiply
  std::vector<GemmPoint> curve;    // by flops, ascending
  std::vector<GemmNarrow> narrow;  // by other, then dim, ascending (may be empty: no penalty)
  // Ranks that multiplied at once on the host when the curve was measured (every rank of a
  // host multiplies at once in a run: they share its memory bandwidth and caches; more of
  // them than cores also share the cores).
  int concurrent = 1;
  double rate(double flops) const;  // GFLOP/s, interpolated log-linearly, clamped at the ends
  // GFLOP/s of a rows x inner times inner x cols multiply: rate(flops) times the narrow
  // efficiencies (interpolated log-linearly in dim).
  double rate(double rows, double inner, double cols) const;
};

// What one collective measured on the machine costs (distmm calibrate's collective sweep):
// the real backend's own algorithm choice, contention and protocol switches, by size. It
// serves a collective of the same op over a group of the same size, spread the same way over
// hosts, with the same number of such groups running it at once; other collectives are
// costed from the links by the algorithm the backend picks.
struct CollectivePoint {
  std::uint64_t bytes = 0;  // the collective's whole size, as PlannedEvent::total_bytes
  double s = 0;             // a warm call: from a common start to the last member's end
  // What the first call on freshly allocated buffers costs more (an all-gather's: from blocks
  // the network wrote before, as a plan sends the shard its setup placed).
  double first_use_s = 0;
};

struct CollectiveCurve {
  // "broadcast", "scatterv", "gatherv", "allgatherv", "allreduce", "reduce", "reduce_scatter"
  std::string op;
  int ranks = 2;                        // in the group
  int ranks_per_host = 1;               // the most members the group has on one host
  int groups = 1;                       // disjoint groups running it at once
  std::vector<CollectivePoint> points;  // by bytes, ascending
  bool one_host() const { return ranks_per_host >= ranks; }  // every member on one host
  // Interpolated log-log between points; below the first, the first. Beyond the last: that
  // call plus what `links` (the link model's cost of a call of so many bytes) says the extra
  // bytes cost, times how much slower than the links that call ran when it was large and
  // long enough that its bytes set its time (>= 1 MiB and >= 50 ms across hosts, where TCP
  // stalls for milliseconds, and there no more than the last two calls' difference over
  // the links' when both are >= 1 MiB; >= 8 MiB within one host) (1 to 4 times: never faster than
  // the links, and one noisy call cannot set more) — and within one host never less per byte than
  // that call. Across hosts, beyond a call that does not say so: the links' cost, or that call's
  // time if more (its excess was a stall). Without `links`, the last call's bandwidth goes on.
  double time(std::uint64_t bytes, const std::function<double(double)>& links) const;
  double first_use(std::uint64_t bytes) const;  // linear between points, proportional beyond
};

// The collectives the strategies call, as CollectiveCurve::op spells them (calibrate sweeps
// each; load_model accepts these and kThenComputeOps). The columns
// forms (tp-col's and tp-row's gather and scatter of columns) have no curve: they are costed
// from the links and the strided copy rate (a held-out ablation showed their curves cost
// accuracy, docs/time-model.md).
inline constexpr const char* kCollectiveOps[] = {
    "broadcast", "scatterv", "gatherv", "allgatherv", "allreduce", "reduce", "reduce_scatter"};
// A broadcast or scatter from its root whose members multiply as soon as they have their part
// (dp's scatter of A's rows, tp-col's broadcast of A): with more ranks than cores, the members
// served first take the cores from the root and the members still waiting (measured, mpirun
// -np 4 on 2 cores: a 1000 x 1500 A's scatter 1.3 ms after a barrier, 9-15 ms before the
// multiplies). Timed at the root, the members multiplying after their part; CollectiveCurve::op
// spells it as the collective's name and kThenCompute. Its excess over the plain call serves
// tp-row's scatter of A's columns too (a columns form of it, measured so, had said 2 MiB took
// 35 ms and 16 MiB 95, where tp-row's own 12 MB took 24).
inline constexpr const char* kThenCompute = "_then_compute";
inline constexpr const char* kThenComputeOps[] = {"broadcast_then_compute",
                                                  "scatterv_then_compute"};

// How far from a prediction a measured time may lie: an interval of nominal 80 % coverage,
// [t e^low, t e^high] with low and high the 10th and 90th percentiles of ln(measured /
// predicted) over held-out cases of the prediction's state (cold: a first execution or step;
// warm: a later one). Not symmetric: the model's misses lean one way (it runs low more often
// than high), and an interval centred on the prediction held too few measurements.
struct LogInterval {
  double low = 0, high = 0;
};
// The intervals distmm's model was last validated with (docs/time-model.md, "Intervals"): what
// a model that says none (a hand-written one) is taken to have.
inline constexpr LogInterval kHeldOutCold{-0.06, 0.36}, kHeldOutWarm{-0.12, 0.28};
struct Uncertainty {
  // Calibrate's measured spread on this machine, recorded, not in the interval (held-out data
  // showed it widened intervals without making them hold more often, docs/time-model.md): the
  // standard deviation of ln(time) of its repeated measures (warm: the rounds of a 1024^3
  // multiply on every rank; cold: passes populating fresh memory), 0 for a hand-written model.
  double spread_cold = 0, spread_warm = 0;
  // The model's held-out intervals (bench/validate_model.py's drawn cases); calibrate writes
  // these. A model file's older symmetric `error_cold` w reads as {-w, w}.
  LogInterval cold = kHeldOutCold, warm = kHeldOutWarm;
};
struct Interval {
  double low_s = 0, high_s = 0;
};

// Copying a block of columns between a row-major matrix and a column-major block (the columns
// collectives' packing) at `Bps`, for blocks of `bytes`: small blocks stay in the caches and
// copy several times faster.
struct StridedPoint {
  std::uint64_t bytes = 0;
  double Bps = 0;
};

struct MachineModel {
  std::string name;         // what machine it describes
  std::string file;         // the file it was loaded from (not in the JSON), or empty
  std::string measured_by;  // "distmm calibrate ..." or "hand-written"
  // Whose collective algorithms cost a collective from the links (where no curve measured
  // it): "mpi" (Open MPI's coll/tuned decision rules) or "simulator".
  std::string backend = "mpi";
  int cores_per_host = 1;
  LinkModel intra, inter;
  std::vector<GemmModel> gemm;  // by threads
  double copy_Bps = 0;          // memcpy bandwidth of one core
  double strided_copy_Bps = 0;  // copying a block of columns out of a row-major matrix
  // The same by the block's size, ascending (empty: strided_copy_Bps serves every size).
  std::vector<StridedPoint> strided_copy_curve;
  double reduce_Bps = 0;  // bytes summed per second (element-wise a += b) by one core
  double first_touch_s_per_page = 0;
  Uncertainty uncertainty;
  std::vector<CollectiveCurve> collectives;  // may be empty (every collective from the links)

  const GemmModel& gemm_for(int threads) const;
  // Bytes per second of a strided copy of a block of `bytes`: the curve's, linear in the log of
  // the size between its points, its end points' beyond them (0: not measured).
  double strided_rate(double bytes) const;
  // The measured curve for this collective and group, or nullptr.
  const CollectiveCurve* collective(const std::string& op, int ranks, int ranks_per_host,
                                    int groups) const;
};

// Reads and validates a model file: throws InputError with one line naming the file and the
// bad field (missing, of the wrong type or unit, negative, ...). Fields of terms the model no
// longer has (a held-out ablation dropped them: revisit_s_per_page, first_touch_pool_bytes,
// first_touch_beyond_s_per_page, memory.strided_copy, gemm[].first_call_s, the collectives'
// first_use_pages, their columns forms, allgatherv_after_scatterv and straggler) are read and
// ignored: older calibrations still load.
MachineModel load_model(const std::filesystem::path& path);
// How an error names a model: "--model FILE (NAME)", or "--model NAME" for one not from a file.
std::string model_label(const MachineModel& model);
// The JSON text of a model (what calibrate writes; load_model reads it back).
std::string model_json(const MachineModel& model);

// Where the ranks run: rank r on host r / ranks_per_host.
struct ModelPlacement {
  int ranks = 1;
  int ranks_per_host = 1;
  int blas_threads = 1;  // per rank
  int host_of(int rank) const { return rank / ranks_per_host; }
};

struct PlannedRun {
  std::vector<std::vector<int>> groups;          // world ranks of each communicator, in order
  std::vector<std::vector<PlannedEvent>> ranks;  // per rank, in order
};

// The events each rank's plan records: setup, then `executions` executions (matmul), or
// `executions` training steps (train = true; their setup is not counted) — what
// RankStats::events() of a real run holds, in the same order. Needs no data. For tests and
// small runs: it holds every event of every rank (a dry run folds repeats, dry_run.hpp).
PlannedRun planned_events(const Strategy& strategy, const MatmulShape& shape, int ranks,
                          std::size_t element_bytes, const StrategySettings& settings,
                          std::size_t executions, bool train = false);

// "world" for group 0, else "ranks 0,2 of world", as Communicator::name() says.
std::string group_name(const PlannedRun& run, int group);

struct PredictedRun {
  double setup_s = 0;  // placing the parameters and populating the plan's buffers
  double cold_s = 0;   // the first execution (matmul) or training step
  double warm_s = 0;   // a later one
  std::vector<double> comm_s, compute_s;  // per rank, of a warm execution or step
  Interval cold_interval, warm_interval;  // nominal 80 % (Uncertainty)
};

// The nominal 80 % interval of a predicted time (`cold`: of a first execution or step).
Interval interval_of(const Uncertainty& u, double predicted_s, bool cold);

// Replays the strategy's events on the model: matmul executions of a plan (as the program
// times them: from a barrier to rank 0's end), or training steps (train = true).
// What of a cold execution's memory is new to the process (its first use costs). A plan's
// own buffers always count as new (measured: cold executions pay their first use even where
// the memory was recycled from a plan before).
struct FreshMemory {
  bool caller = true;  // the caller's A and C (false once a plan has used them)
};

PredictedRun predict_time(const MachineModel& model, const ModelPlacement& placement,
                          const Strategy& strategy, const MatmulShape& shape,
                          std::size_t element_bytes, const StrategySettings& settings,
                          bool train = false, const FreshMemory& fresh = {});
// The same for the events of a dry run (dry_run.hpp) that recorded setup and two executions
// (training: three steps), for a program that has one already.
PredictedRun predict_time(const MachineModel& model, const ModelPlacement& placement,
                          const DryRun& run, const MatmulShape& shape, std::size_t element_bytes,
                          bool train = false, const FreshMemory& fresh = {});

}  // namespace distmm
