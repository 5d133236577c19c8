#pragma once
// What the matmul and train jobs share: input checks, telling every rank the shape, and
// writing the output files.
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/options.hpp"
#include "distmm/choose.hpp"
#include "distmm/communicator.hpp"
#include "distmm/model.hpp"
#include "distmm/report.hpp"
#include "distmm/shape.hpp"

namespace distmm::cli {

inline constexpr int kRoot = 0;

// Checks that --out (a matrix file), --report and --trace can be written, before any work.
void check_output_files(const Options& options);

// Arms --fault on this rank's communicator. A fault aimed at a rank the run does not have is
// bad input: rank 0 says so, and every rank gets false.
bool arm_fault(Communicator& comm, const Options& options, std::ostream& err);

// Rank 0 calls load(), which may throw InputError; one broadcast then tells every rank the
// problem's shape, or that the input was bad (rank 0 prints the message on `err`). Returns
// nothing, on every rank, for bad input.
std::optional<MatmulShape> share_shape(Communicator& comm, std::ostream& err,
                                       const std::function<MatmulShape()>& load);

// Refuses a problem too big for the machine before anything big is allocated. Each rank
// reports what it will hold (`need`, with `what` saying of what) and what its host has
// available; rank 0 adds up the needs of the ranks on each host (from `placement`) and
// compares them with that host's memory. When a host is short, rank 0 prints one line (what
// is needed, what is available, where to see the breakdown) and every rank gets false.
bool fits_in_memory(Communicator& comm, std::uint64_t need, const std::string& what,
                    const std::string& breakdown, const std::vector<RankPlacement>& placement,
                    std::ostream& err);

// A strategy of the run with its settings settled for the run's ranks and hosts.
struct RunStrategy {
  const Strategy* strategy = nullptr;
  StrategySettings settings;
  // --strategy auto: every candidate as the model ranked them, this one first (rank 0 only).
  std::vector<RankedStrategy> ranking;
  std::string label() const { return strategy->label(settings); }
};

// --strategy auto: the one of `candidates` the model predicts fastest for a run placed as
// `where` among those whose plans fit in the memory a rank may hold (--memory-per-rank, else
// `host_share` bytes; 0: no limit), with the ranking; nothing when none fits or the model
// cannot cost one (the reason printed on `err`).
std::optional<RunStrategy> pick_strategy(const Options& o, const ModelPlacement& where,
                                         const MatmulShape& shape,
                                         const std::vector<RunStrategy>& candidates,
                                         double host_share, std::ostream& err);
// What auto picked, the runner-up and by how much, for the table (empty unless auto picked);
// a training run's time is its --steps steps'.
std::string auto_note(const Options& o, const RunStrategy& s);
// The same for the report: {"picked", "candidates": [{strategy, label, predicted_time_s,
// bytes_per_rank, fits}, ...]}, fastest first; null unless auto picked.
nlohmann::json auto_json(const RunStrategy& s);

// Each of o.strategies settled (Strategy::settle) for the run `where` (its element size is
// o.dtype's); nothing for bad input, with the reason printed on `err`.
std::optional<std::vector<RunStrategy>> settle_strategies(const Options& o, RunPlacement where,
                                                          std::ostream& err);
// The hosts of a dry run: as --ranks-per-host fills them (default one).
int dry_run_hosts(const Options& o, int ranks);
// A dry run's strategies settled for `ranks` on its hosts, no limit on a rank's memory unless
// --memory-per-rank gives one (the cluster is not this machine); with --strategy auto, the one
// it picks. Nothing for bad input, with the reason printed on `err`.
std::optional<std::vector<RunStrategy>> dry_run_strategies(const Options& o, int ranks,
                                                           const MatmulShape& shape,
                                                           std::ostream& err);

// The strategies settled by every rank for the hosts of `placement` and `shape`, a rank
// holding at most its host's free memory over the host's ranks (rank 0 works both out and
// tells the others); nothing on every rank for bad input (rank 0 has said why). Collective.
std::optional<std::vector<RunStrategy>> agree_strategies(
    Communicator& comm, const Options& o, const std::vector<RankPlacement>& placement,
    const MatmulShape& shape, std::ostream& err);

// With --model: rank 0 predicts every strategy (predict_runs, into `predicted`) before
// anything runs; false on every rank when the model cannot cost one (rank 0 has said why).
// Collective.
bool agree_predictions(Communicator& comm, const Options& o,
                       const std::vector<RankPlacement>& placement, const MatmulShape& shape,
                       const std::vector<RunStrategy>& strategies, bool train,
                       std::vector<PredictedRun>& predicted, std::ostream& err);

// The time model's placement of a run: where `placement`'s ranks are (the most ranks any host
// has; rank r on host r / that), or, for a dry run (empty placement), --ranks-per-host (default
// every rank on one host); the BLAS threads of rank 0 or, for a dry run, the host's cores
// shared among its ranks (as distmm sizes them) where the model has a curve for them, else its
// nearest curve below.
ModelPlacement model_placement(const Options& o, int ranks,
                               const std::vector<RankPlacement>& placement);
// "4 rank(s) on 2 host(s), 2 per host, 1 BLAS thread(s) each": what a dry run's prediction
// assumed.
std::string describe(const ModelPlacement& where);

// --model's prediction of each of `strategies` (in order), or nothing without --model. Throws
// InputError when the model cannot cost one of them.
std::vector<PredictedRun> predict_runs(const Options& o, const ModelPlacement& where,
                                       const MatmulShape& shape,
                                       const std::vector<RunStrategy>& strategies, bool train);

// Rank 0 writes its files through write(); a file that cannot be written is reported on
// `err` and gives kRunFailed, else kSuccess.
int write_outputs(std::ostream& err, const std::function<void()>& write);

}  // namespace distmm::cli
