#include "strategy/checkpoint_cases.hpp"
#include "strategy/formulas.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "distmm/checkpoint.hpp"

namespace distmm::testing {
namespace fs = std::filesystem;

TrainData checkpoint_problem() {
  return train_problem(kCheckpointShape.m, kCheckpointShape.k, kCheckpointShape.n, 2024);
}

TrainResult train_with_checkpoints(Communicator& comm, const Strategy& strategy, const TrainData& d,
                                   std::size_t steps, CheckpointConfig checkpoint,
                                   const StrategySettings& settings) {
  const bool root = comm.rank() == 0;
  TrainConfig config{steps, 0.05};
  config.settings = settings;
  config.optimizer = Optimizer::adam;
  if (root) {
    checkpoint.x_crc32 = crc32_of(d.x.memptr(), d.x.n_elem * sizeof(double));
    checkpoint.t_crc32 = crc32_of(d.t.memptr(), d.t.n_elem * sizeof(double));
    checkpoint.w0_crc32 = crc32_of(d.w0.memptr(), d.w0.n_elem * sizeof(double));
  }
  config.checkpoint = checkpoint;
  return train_linear(strategy, comm, kCheckpointShape, root ? d.x : arma::mat{},
                      root ? d.t : arma::mat{}, root ? d.w0 : arma::mat{}, config);
}

SharedDir::SharedDir(Communicator& comm) : comm_(comm) {
  std::vector<double> text(256, 0.0);
  if (comm.rank() == 0) {
    char name[] = "/tmp/distmm-checkpoint-test-XXXXXX";
    if (mkdtemp(name) == nullptr) throw std::runtime_error("mkdtemp failed");
    for (std::size_t i = 0; name[i] != '\0'; ++i) text[i] = static_cast<unsigned char>(name[i]);
  }
  if (comm.size() > 1) comm.broadcast(text, 0);
  std::string name;
  for (double c : text) {
    if (c == 0) break;
    name.push_back(static_cast<char>(c));
  }
  path_ = name;
}

SharedDir::~SharedDir() {
  comm_.barrier();
  if (comm_.rank() == 0) fs::remove_all(path_);
}

namespace {

double relative_difference(const arma::mat& a, const arma::mat& b) {
  return arma::abs(a - b).max() / arma::abs(b).max();
}

// Every rank must throw E whose message contains `needle`.
template <typename E>
void expect_refused(const std::function<void()>& run, const std::string& needle, int rank) {
  try {
    run();
    ADD_FAILURE() << "rank " << rank << ": expected an error containing '" << needle << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "rank " << rank << ": " << e.what();
  }
}

// Saving changes nothing; resuming from a checkpoint with the same strategy and rank count
// continues bitwise as the uninterrupted run, with another strategy within 1e-12; each save
// writes and each resume reads exactly this rank's columns.
void resume_continues_the_run(Communicator& comm) {
  const TrainData d = checkpoint_problem();
  const bool root = comm.rank() == 0;
  const SharedDir dir(comm);
  const auto share = [&](const TrainSetup& setup) {
    return checkpoint_write_bytes(
        expected_checkpoint_block(setup, kCheckpointShape, comm.size(), comm.rank()), 8,
        Optimizer::adam);
  };
  const std::vector<TrainSetup> setups = train_setups(comm.size());
  for (const TrainSetup& saver : setups) {
    const Strategy& s = saver.strategy;
    SCOPED_TRACE("saved by " + name_of(saver));
    const TrainResult full = train_with_checkpoints(comm, s, d, 9, {}, saver.settings());
    CheckpointConfig save;
    save.save_dir = dir.path() / std::to_string(&saver - setups.data());
    save.every = 4;
    save.keep = 5;
    const TrainResult saving = train_with_checkpoints(comm, s, d, 9, save, saver.settings());
    EXPECT_EQ(saving.saved, (std::vector<std::string>{(save.save_dir / "step-4").string(),
                                                      (save.save_dir / "step-8").string(),
                                                      (save.save_dir / "step-9").string()}));
    EXPECT_EQ(saving.bytes_written, 3 * share(saver));
    EXPECT_EQ(saving.losses, full.losses);
    if (root) {
      EXPECT_TRUE(arma::approx_equal(saving.w, full.w, "absdiff", 0.0));
    }

    for (const TrainSetup& resumer : setups) {
      const Strategy& resumed_with = resumer.strategy;
      SCOPED_TRACE("resumed by " + name_of(resumer));
      CheckpointConfig resume;
      resume.resume = save.save_dir / "step-4";
      const TrainResult r =
          train_with_checkpoints(comm, resumed_with, d, 9, resume, resumer.settings());
      EXPECT_EQ(r.first_step, 4u);
      EXPECT_EQ(r.resumed_from, resume.resume.string());
      EXPECT_EQ(r.bytes_read, share(resumer));
      ASSERT_EQ(r.losses.size(), 5u);
      const bool same = same_setup(resumer, saver);
      if (same) {
        EXPECT_EQ(r.losses, std::vector<double>(full.losses.begin() + 4, full.losses.end()));
      }
      if (!root) continue;
      if (same) {
        EXPECT_TRUE(arma::approx_equal(r.w, full.w, "absdiff", 0.0))
            << s.name() << " resumed on " << comm.size() << " ranks differs by "
            << relative_difference(r.w, full.w);
      } else {
        EXPECT_LE(relative_difference(r.w, full.w), 1e-12)
            << s.name() << " saved, " << resumed_with.name() << " resumed";
      }
    }
    // DIR means its newest checkpoint: step 9 of 9 leaves nothing to run.
    CheckpointConfig at_end;
    at_end.resume = save.save_dir;
    expect_refused<InputError>(
        [&] { train_with_checkpoints(comm, s, d, 9, at_end, saver.settings()); },
        "nothing is left to run", comm.rank());
  }
}

// One corruption of a saved checkpoint, the data the run is given, and what the refusal says.
struct Corruption {
  const char* what;
  std::function<void(const fs::path& step_dir)> apply;  // on rank 0
  const char* needle;
  bool other_data = false;  // the run is given other X and T
};

void edit_manifest(const fs::path& step_dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json doc;
  std::ifstream(step_dir / "manifest.json") >> doc;
  edit(doc);
  std::ofstream(step_dir / "manifest.json") << doc.dump(2);
}

// A bad checkpoint is refused on every rank with one message naming the file and the fault,
// and nothing is loaded.
void bad_checkpoints_are_refused(Communicator& comm) {
  const TrainData d = checkpoint_problem();
  const SharedDir dir(comm);
  CheckpointConfig save;
  save.save_dir = dir.path() / "good";
  train_with_checkpoints(comm, strategy("fsdp"), d, 3, save);  // saves step-3 (4 ranks: 2 2 2 1)
  const std::vector<Corruption> corruptions = {
      {"flipped byte",
       [](const fs::path& s) {
         std::fstream f(s / "shard-00000.bin", std::ios::in | std::ios::out | std::ios::binary);
         f.seekg(5);
         const char c = static_cast<char>(f.get() ^ 0x10);
         f.seekp(5);
         f.put(c);
       },
       "shard-00000.bin: checksum mismatch"},
      {"truncated shard", [](const fs::path& s) { fs::resize_file(s / "shard-00000.bin", 40); },
       "shard-00000.bin: truncated"},
      {"missing shard", [](const fs::path& s) { fs::remove(s / "shard-00000.bin"); },
       "shard-00000.bin: missing"},
      {"missing manifest", [](const fs::path& s) { fs::remove(s / "manifest.json"); },
       "manifest.json: missing"},
      {"unparsable manifest",
       [](const fs::path& s) { std::ofstream(s / "manifest.json") << "{\"step\": 3,"; },
       "manifest.json: not valid JSON"},
      {"columns covered twice",
       [](const fs::path& s) {
         std::ofstream(s / "extra.bin") << std::string(6 * 8 * 3, 'x');
         edit_manifest(s, [](nlohmann::json& m) {
           m["shards"].push_back({{"file", "extra.bin"},
                                  {"first_column", 0},
                                  {"columns", 1},
                                  {"bytes", 6 * 8 * 3},
                                  {"crc32", 0}});
         });
       },
       "column 0 is covered twice"},
      {"columns covered by none",
       [](const fs::path& s) {
         edit_manifest(s, [](nlohmann::json& m) {
           nlohmann::json& last = m["shards"][m["shards"].size() - 1];
           last["columns"] = last["columns"].get<int>() - 1;
           last["bytes"] = last["columns"].get<int>() * 6 * 8 * 3;
         });
       },
       "column 6 is covered by no shard"},
      {"negative step",
       [](const fs::path& s) { edit_manifest(s, [](nlohmann::json& m) { m["step"] = -3; }); },
       "field 'step' must be a whole number"},
      {"other shapes",
       [](const fs::path& s) { edit_manifest(s, [](nlohmann::json& m) { m["m"] = 24; }); },
       "saved for X 24x6"},
      {"other dtype",
       [](const fs::path& s) {
         edit_manifest(s, [](nlohmann::json& m) {
           m["dtype"] = "f32";
           for (auto& shard : m["shards"]) shard["bytes"] = shard["bytes"].get<int>() / 2;
         });
       },
       "saved with --dtype f32"},
      {"no committed checkpoint", [](const fs::path& s) { fs::remove_all(s); },
       "holds no committed checkpoint"},
      {"other X and T", [](const fs::path&) {}, "X differs", true},
  };
  const TrainData other =
      train_problem(kCheckpointShape.m, kCheckpointShape.k, kCheckpointShape.n, 7);
  int i = 0;
  for (const Corruption& c : corruptions) {
    const fs::path bad = dir.path() / ("bad-" + std::to_string(i++));
    if (comm.rank() == 0) {
      fs::create_directories(bad);
      fs::copy(save.save_dir / "step-3", bad / "step-3");
      c.apply(bad / "step-3");
    }
    comm.barrier();
    CheckpointConfig resume;
    resume.resume = bad;
    SCOPED_TRACE(c.what);
    expect_refused<BadCheckpoint>(
        [&] { train_with_checkpoints(comm, strategy("dp"), c.other_data ? other : d, 5, resume); },
        c.needle, comm.rank());
  }
}

// A save that cannot be written fails on every rank, and commits nothing.
void failed_save_is_agreed(Communicator& comm) {
  const TrainData d = checkpoint_problem();
  const SharedDir dir(comm);
  if (comm.rank() == 0) std::ofstream(dir.path() / "a-file") << "not a directory\n";
  comm.barrier();
  CheckpointConfig save;
  save.save_dir = dir.path() / "a-file" / "checkpoints";
  expect_refused<CheckpointWriteError>(
      [&] { train_with_checkpoints(comm, strategy("fsdp"), d, 2, save); }, "a-file", comm.rank());
}

// The next save removes what a crash left (a partial save, a half-removed checkpoint); only
// the newest `keep` checkpoints stay; `latest` names the newest; a directory holding
// checkpoints of another run is refused before any step.
void leftovers_removed_and_keep_honoured(Communicator& comm) {
  const TrainData d = checkpoint_problem();
  const SharedDir dir(comm);
  const fs::path ck = dir.path() / "ck";
  if (comm.rank() == 0) {
    fs::create_directories(ck / ".partial-step-2");
    std::ofstream(ck / ".partial-step-2" / "shard-00000.bin") << "half";
    fs::create_directories(ck / ".removing-step-1");
  }
  comm.barrier();
  CheckpointConfig save;
  save.save_dir = ck;
  save.every = 2;
  save.keep = 2;
  const TrainResult r = train_with_checkpoints(comm, strategy("fsdp"), d, 8, save);
  EXPECT_EQ(r.saved.size(), 4u);
  comm.barrier();
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(ck)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step-6", "step-8"}));
  std::ifstream latest(ck / "latest");
  std::string line;
  std::getline(latest, line);
  EXPECT_EQ(line, "step-8");
  expect_refused<BadCheckpoint>([&] { train_with_checkpoints(comm, strategy("dp"), d, 8, save); },
                                "holds " + (ck / "step-8").string(), comm.rank());
}

constexpr CheckpointCase kCheckpointCases[] = {
    {"ResumeContinuesTheRun", resume_continues_the_run},
    {"BadCheckpointsAreRefused", bad_checkpoints_are_refused},
    {"FailedSaveIsAgreed", failed_save_is_agreed},
    {"LeftoversRemovedAndKeepHonoured", leftovers_removed_and_keep_honoured},
};

}  // namespace

std::span<const CheckpointCase> checkpoint_cases() {
  return kCheckpointCases;
}

}  // namespace distmm::testing
