#include "cli/options.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "distmm/error.hpp"
#include "distmm/layout.hpp"
#include "distmm/matrix_io.hpp"
#include "distmm/train.hpp"

namespace distmm::cli {
namespace {

constexpr const char* kExitCodes =
    "Exit codes:\n"
    "  0  success\n"
    "  1  verification failed: a result differs from single-process A * B\n"
    "  2  bad usage or input (one line on stderr names the flag or file), a bad checkpoint\n"
    "  3  failure during the run (a rank failed, deadlock, timeout, a checkpoint not written)\n";

// A whole number in [min, max], with a message that says so.
CLI::Validator whole_number(unsigned long long max, unsigned long long min = 1) {
  return CLI::Validator(
      [max, min](std::string& value) -> std::string {
        unsigned long long n = 0;
        std::size_t used = 0;
        try {
          if (!value.empty() && value.front() != '-') n = std::stoull(value, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != value.size() || n < min || n > max) {
          return "must be a whole number from " + std::to_string(min) + " to " +
                 std::to_string(max) + ", got " + quote(value);
        }
        return {};
      },
      "", "whole number");
}

// Options of distmm that distmm train refuses.
const std::set<std::string> kNotForTrain = {"--a",      "--b",      "--no-verify", "--warmup",
                                            "--repeat", "--layout", "--draw"};

// The command line's options, declared on `app` (the strategies' own options as the registry
// lists them) and then checked together once parsed.
class Parser {
 public:
  Parser() : app(about(), "distmm") {
    app.set_version_flag("--version", "distmm 0.1.0");
    app.footer(kExitCodes);
    app.get_formatter()->column_width(28);
    add_strategy_options();
    add_run_options();
    add_subcommands();
    add_train_options();
    relate_options();
  }
  ParseResult parse(int argc, const char* const* argv);

 private:
  static std::string about();
  void add_strategy_options();
  void add_run_options();
  void add_subcommands();
  void add_train_options();
  void relate_options();
  // A subcommand's help: its own options and every option of distmm it accepts too.
  std::string help_of(CLI::App* sub) const;
  ParseResult finish();
  ParseResult fail(const std::string& message) const { return {std::nullopt, kBadInput, message}; }
  // The strategies asked for, or the message saying why not.
  std::optional<std::string> choose_strategies();
  std::optional<std::string> choose_distributed();
  std::optional<std::string> check_draw() const;

  CLI::App app;
  Options o;
  TrainOptions& t = o.train;
  std::string strategy = "all", dtype = "f64", fault, optimizer = "sgd", layout = "root";
  int ranks = 0, ranks_per_host = 1;
  bool no_verify = false;
  // Each strategy option's value as given, and the strategies that have it.
  std::map<std::string, std::string> option_values;
  std::map<std::string, std::vector<std::string>> option_owners;
  CLI::Option *ranks_opt = nullptr, *m_opt = nullptr, *k_opt = nullptr, *n_opt = nullptr,
              *seed_opt = nullptr, *a_opt = nullptr, *b_opt = nullptr, *rph_opt = nullptr,
              *x_opt = nullptr, *t_opt = nullptr, *ck_dir = nullptr, *ck_every = nullptr,
              *ck_keep = nullptr;
  CLI::App *matmul_cmd = nullptr, *train_cmd = nullptr, *calibrate_cmd = nullptr;
};

std::string Parser::about() {
  // The strategies as the registry lists them, each with what it shards.
  std::string about =
      "distmm: distributed C = A @ B by the sharding strategies of distributed "
      "training:\n";
  for (const Strategy& s : all_strategies()) {
    about += "  " + std::string(s.name()) + ": " + std::string(s.description()) + "\n";
  }
  about +=
      "Run under mpirun (one rank per process) or with --ranks N (N threads of the "
      "in-process simulator).";
  return about;
}

// --strategy, --ranks and each strategy's own options.
void Parser::add_strategy_options() {
  const auto names = [](bool training) {
    std::string list;
    for (const Strategy& s : training ? training_strategies() : all_strategies()) {
      list += std::string(s.name()) + " | ";
    }
    return list + "all | auto";
  };
  app.add_option("--strategy", strategy,
                 names(false) +
                     " (all: each in turn, one row each; auto: the one --model "
                     "predicts fastest within --memory-per-rank; train: " +
                     names(true) + ")")
      ->capture_default_str();
  ranks_opt = app.add_option("--ranks", ranks, "run N ranks as threads of the simulator")
                  ->check(whole_number(4096));
  // Each strategy's own options, as the strategies declare them (one flag per name).
  for (const Strategy& s : all_strategies()) {
    for (const StrategyOption& so : s.options()) {
      option_owners[so.name].push_back(std::string(s.name()));
      if (option_owners[so.name].size() > 1) continue;
      auto* opt =
          app.add_option("--" + so.name, option_values[so.name], so.help)->type_name(so.value_name);
      if (so.whole_number) opt->check(whole_number(static_cast<unsigned long long>(so.max)));
    }
  }
}

// The shape, the files, the outputs, the run's settings.
void Parser::add_run_options() {
  m_opt = app.add_option("--m", o.shape.m,
                         "rows of A; train: of the batch X (random problem; train default 2048)")
              ->check(whole_number(1ULL << 40))
              ->capture_default_str();
  k_opt = app.add_option("--k", o.shape.k,
                         "columns of A, rows of B; train: of X, rows of W (train default 256)")
              ->check(whole_number(1ULL << 40))
              ->capture_default_str();
  n_opt = app.add_option("--n", o.shape.n, "columns of B; train: of W and T (train default 128)")
              ->check(whole_number(1ULL << 40))
              ->capture_default_str();
  seed_opt = app.add_option("--seed", o.seed, "seed of the random problem")->capture_default_str();
  a_opt = app.add_option("--a", o.a_file, "read A from FILE (.csv, .txt or .bin)");
  b_opt = app.add_option("--b", o.b_file, "read B from FILE (.csv, .txt or .bin)");
  app.add_option("--out", o.out_file,
                 "write C (train: the trained W) from rank 0 to FILE (.csv, .txt or .bin)");
  app.add_option("--report", o.report_file, "write a JSON report of every run to FILE");
  app.add_option("--draw", o.draw_file,
                 "draw the strategy's sharding to FILE.svg: A, B and C with each block coloured "
                 "by the rank that holds it under --layout distributed, and what each rank's "
                 "collectives move (one strategy; with --dry-run too)");
  app.add_option("--trace", o.trace_file,
                 "write a timeline of every rank to FILE (Chrome trace JSON, for Perfetto)");
  app.add_option("--layout", layout,
                 "root: A and B start on rank 0, C is gathered there; distributed: each rank "
                 "starts with its own blocks of A and B (drawn there from the seed, or sent from "
                 "the files before the timing) and ends with its block of C")
      ->check(CLI::IsMember({"root", "distributed"}))
      ->capture_default_str();
  app.add_option("--dtype", dtype,
                 "element type of the whole run: data, communication, multiply, counters")
      ->check(CLI::IsMember({"f32", "f64"}))
      ->capture_default_str();
  app.add_option("--warmup", o.warmup,
                 "untimed executions of each strategy's plan before the timed ones")
      ->check(whole_number(1000000, 0))
      ->capture_default_str();
  app.add_option("--repeat", o.repeat,
                 "timed executions of each strategy's plan (the table shows their median)")
      ->check(whole_number(1000000))
      ->capture_default_str();
  app.add_flag("--dry-run", o.dry_run,
               "move no data: print what each rank would send, receive and hold");
  app.add_option("--timeout", o.timeout_s,
                 "MPI: a rank waiting longer than SECONDS in one communication call reports "
                 "what it waits on and the job ends with exit code 3 (default: no bound)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            char* end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            if (end == v.c_str() || *end != '\0' || !(x > 0) || x > 1e6) {
              return "must be a number of seconds above 0, got " + quote(v);
            }
            return {};
          },
          "SECONDS"));
  app.add_option("--fault", fault,
                 "inject a fault: crash:RANK[:CALL] (fails at its first, or CALL-th, "
                 "communication), skip:RANK "
                 "(skips its first collective), delay:MS[:SEED] (holds every call back up to "
                 "MS ms)");
  app.add_flag("--no-verify", no_verify, "skip the check against single-process A * B");
  app.add_option("--model", o.model_file,
                 "predict each run's time on the machine model in FILE (distmm calibrate writes "
                 "one): a predicted_s column, and predictions in --report; with --dry-run, for "
                 "any shape and rank count");
  rph_opt = app.add_option("--ranks-per-host", ranks_per_host,
                           "with --dry-run --model: ranks per host in the prediction, "
                           "filling hosts in rank order (default: all on one host)")
                ->check(whole_number(1000000));
}

// distmm train: its own options; the ones above (strategy, ranks, shape, files, faults)
// are shared and may be given before or after the word "train".
void Parser::add_subcommands() {
  // distmm train: its own options; the ones above (strategy, ranks, shape, files, faults)
  // are shared and may be given before or after the word "train".
  matmul_cmd = app.add_subcommand("matmul", "C = A @ B by each strategy (the default)");
  train_cmd = app.add_subcommand("train",
                                 "train a linear layer Y = X W by full-batch SGD or Adam "
                                 "with " +
                                     strategy_names(true) + ", with sharded checkpoints");
  calibrate_cmd = app.add_subcommand(
      "calibrate",
      "measure this machine's model for --model: ping-pong on one host and across hosts, "
      "gemm, first touch, copy and reduction rates (about a minute; under mpirun or --ranks "
      "N, at least 2 ranks); writes it to --out FILE, or stdout");
  calibrate_cmd->add_flag("--quick", o.calibrate_quick,
                          "smaller sweeps (messages to 4 MiB, multiplies to 512^3): a few "
                          "seconds, for tests");
  matmul_cmd->fallthrough();
  train_cmd->fallthrough();
  calibrate_cmd->fallthrough();
  app.require_subcommand(0, 1);
}

void Parser::add_train_options() {
  train_cmd->add_option("--steps", t.steps, "SGD steps")
      ->check(whole_number(1000000))
      ->capture_default_str();
  train_cmd->add_option("--lr", t.lr, "learning rate")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            char* end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            if (end == v.c_str() || *end != '\0' || !std::isfinite(x) || !(x > 0)) {
              return "must be a finite number above 0, got " + quote(v);
            }
            return {};
          },
          "LR"))
      ->capture_default_str();
  train_cmd
      ->add_option("--optimizer", optimizer,
                   "sgd, or adam (b1 0.9, b2 0.999, eps 1e-8, bias-corrected; its moments "
                   "follow the parameters: held as the strategy holds W)")
      ->check(CLI::IsMember({"sgd", "adam"}))
      ->capture_default_str();
  train_cmd->add_option("--print-every", t.print_every, "print the loss every K steps")
      ->check(whole_number(1000000))
      ->capture_default_str();
  x_opt = train_cmd->add_option("--x", t.x_file, "read the batch X (m x k) from FILE");
  t_opt = train_cmd->add_option("--t", t.t_file, "read the targets T (m x n) from FILE");
  train_cmd->add_option("--w", t.w_file, "read the initial W (k x n) from FILE (default 0)");
  x_opt->needs(t_opt);
  t_opt->needs(x_opt);
  ck_dir = train_cmd->add_option(
      "--checkpoint-dir", t.checkpoint_dir,
      "save sharded checkpoints (W and the optimizer state) into DIR: every K steps and at the "
      "end, each rank its own file, committed atomically");
  ck_every = train_cmd
                 ->add_option("--checkpoint-every", t.checkpoint_every,
                              "save a checkpoint after every K-th step (and after the last)")
                 ->check(whole_number(1000000));
  ck_keep = train_cmd
                ->add_option("--keep", t.keep,
                             "committed checkpoints to keep (the newest; older ones are "
                             "removed after each save)")
                ->check(whole_number(1000000))
                ->capture_default_str();
  train_cmd->add_option("--resume", t.resume,
                        "continue from DIR's newest committed checkpoint, or from DIR/step-N "
                        "(any rank count and strategy; the same X and T)");
  ck_every->needs(ck_dir);
  ck_keep->needs(ck_dir);
}

void Parser::relate_options() {
  a_opt->needs(b_opt);
  b_opt->needs(a_opt);
  for (auto* opt : {m_opt, k_opt, n_opt, seed_opt}) {
    a_opt->excludes(opt);
    b_opt->excludes(opt);
  }
}

std::string Parser::help_of(CLI::App* sub) const {
  if (sub == nullptr) return app.help();
  std::vector<const CLI::Option*> shared;
  for (const CLI::Option* opt : app.get_options()) {
    const std::string name = opt->get_name();
    if (name == "--help" || name == "--version") continue;
    if (sub == train_cmd && kNotForTrain.count(name) > 0) continue;
    shared.push_back(opt);
  }
  CLI::Formatter format;
  format.column_width(28);
  const std::string group = format.make_group(
      "Options of distmm it accepts too (before or after the word \"" + sub->get_name() + "\")",
      false, shared);
  std::string help = sub->help();
  const std::size_t footer = help.find(kExitCodes);
  help.insert(footer == std::string::npos ? help.size() : footer, group + "\n");
  return help;
}

ParseResult Parser::parse(int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    CLI::App* sub = train_cmd->parsed()       ? train_cmd
                    : matmul_cmd->parsed()    ? matmul_cmd
                    : calibrate_cmd->parsed() ? calibrate_cmd
                                              : nullptr;
    return {std::nullopt, kSuccess, help_of(sub)};
  } catch (const CLI::CallForVersion& e) {
    return {std::nullopt, kSuccess, std::string(e.what()) + "\n"};
  } catch (const CLI::ParseError& e) {
    return fail(e.what());
  }
  return finish();
}

// The checks that span options, once parsed.
ParseResult Parser::finish() {
  ParseResult result;
  if (*rph_opt) {
    if (o.model_file.empty() || !o.dry_run) {
      return fail(
          "--ranks-per-host: only with --dry-run --model (a real run's placement is "
          "where its ranks run)");
    }
    o.ranks_per_host = ranks_per_host;
  }
  if (!o.model_file.empty()) {
    try {
      o.model = load_model(o.model_file);
    } catch (const InputError& e) {
      return fail(e.what());
    }
  }
  if (calibrate_cmd->parsed()) {
    o.mode = Options::Mode::calibrate;
    if (o.dry_run) return fail("--dry-run: calibrate measures; there is nothing to predict");
    if (*ranks_opt) o.ranks = ranks;
    if (!o.out_file.empty()) {
      try {
        check_writable(o.out_file, "--out");
      } catch (const InputError& e) {
        return fail(e.what());
      }
    }
    result.options = o;
    return result;
  }
  if (const auto message = choose_strategies()) return fail(*message);
  if (layout == "distributed") {
    if (const auto message = choose_distributed()) return fail(*message);
  }
  if (const auto message = check_draw()) return fail(*message);
  if (*ranks_opt) o.ranks = ranks;
  for (const auto& [name, owned_by] : option_owners) {
    if (app.count("--" + name) == 0) continue;
    // clang 14 lets no lambda capture a structured binding: a plain reference it can.
    const auto& owners = owned_by;
    const bool taken =
        std::any_of(o.strategies.begin(), o.strategies.end(), [&](const Strategy* s) {
          return std::find(owners.begin(), owners.end(), s->name()) != owners.end();
        });
    if (!taken) {
      std::string who;
      for (std::size_t i = 0; i < owners.size(); ++i) who += (i ? ", " : "") + owners[i];
      return fail("--" + name + ": none of the strategies asked for has it (only " + who + " has)");
    }
    o.strategy_options.set(name, option_values[name]);
  }
  if (!fault.empty()) {
    try {
      o.fault = parse_fault(fault);
    } catch (const InputError& e) {
      result.exit_code = kBadInput;
      result.message = e.what();
      return result;
    }
  }
  o.verify = !no_verify;
  t.adam = optimizer == "adam";
  o.dtype = dtype == "f32" ? DataType::f32 : DataType::f64;
  result.options = o;
  return result;
}

std::optional<std::string> Parser::choose_strategies() {
  if (train_cmd->parsed()) {
    o.mode = Options::Mode::train;
    for (const std::string& flag : kNotForTrain) {
      if (app.count(flag) > 0) {
        return (flag + ": not an option of distmm train" +
                (flag == "--a" || flag == "--b" ? " (use --x and --t)" : ""));
      }
    }
    if (!t.x_file.empty()) {
      for (const char* flag : {"--m", "--k", "--n", "--seed"}) {
        if (app.count(flag) > 0) return (std::string(flag) + " excludes --x");
      }
    }
    // A training problem by default: a batch larger than the layer.
    if (app.count("--m") == 0) o.shape.m = 2048;
    if (app.count("--k") == 0) o.shape.k = 256;
    if (app.count("--n") == 0) o.shape.n = 128;
    if ((!t.checkpoint_dir.empty() || !t.resume.empty()) && strategy == "all" && !o.dry_run) {
      return (std::string(t.resume.empty() ? "--checkpoint-dir" : "--resume") +
              ": give one --strategy (" + strategy_names(true) +
              "): a checkpoint holds one run's state");
    }
    const Strategy* s = find_strategy(strategy);
    if (strategy == "all" || strategy == "auto") {
      for (const Strategy& each : training_strategies()) o.strategies.push_back(&each);
    } else if (s != nullptr && s->trains()) {
      o.strategies = {s};
    } else {
      return ("--strategy: " + quote(strategy) + " is not a training strategy (use " +
              strategy_names(true) + ", all or auto)");
    }
  } else if (strategy == "all" || strategy == "auto") {
    for (const Strategy& a : all_strategies()) o.strategies.push_back(&a);
  } else if (const Strategy* s = find_strategy(strategy)) {
    o.strategies = {s};
  } else {
    return ("--strategy: unknown strategy " + quote(strategy) + " (use " + strategy_names() +
            ", all or auto)");
  }
  if (strategy == "auto") {
    o.auto_strategy = true;
    if (!o.model) {
      return "--strategy auto: needs --model FILE, the machine model that predicts each "
             "strategy's time (distmm calibrate writes one)";
    }
  }
  return std::nullopt;
}

// --draw FILE.svg: one strategy's picture.
std::optional<std::string> Parser::check_draw() const {
  if (o.draw_file.empty()) return std::nullopt;
  const std::string& f = o.draw_file;
  if (f == ".svg" || !f.ends_with(".svg")) {
    return "--draw: " + quote(f) + " must end in .svg (the picture is SVG)";
  }
  if (o.strategies.size() != 1 && !o.auto_strategy) {
    return "--draw: one --strategy at a time (" + strategy_names() + "), not " + quote(strategy);
  }
  return std::nullopt;
}

// --layout distributed: the strategies that have the layout (all: those of them).
std::optional<std::string> Parser::choose_distributed() {
  o.distributed = true;
  const auto has = [](const Strategy* s) {
    return s->distributed_blocks({1, 1, 1}, 1, 0, {}).has_value();
  };
  std::string which;
  for (const Strategy& s : all_strategies()) {
    if (has(&s)) which += (which.empty() ? "" : ", ") + std::string(s.name());
  }
  if (strategy == "all" || strategy == "auto") {
    std::erase_if(o.strategies, [&](const Strategy* s) { return !has(s); });
    return std::nullopt;
  }
  if (!has(o.strategies.front())) {
    return "--layout distributed: " + std::string(o.strategies.front()->name()) +
           " has no distributed layout yet (" + which + " have)";
  }
  return std::nullopt;
}

}  // namespace

ParseResult parse_options(int argc, const char* const* argv) {
  return Parser().parse(argc, argv);
}

}  // namespace distmm::cli
