#include "distmm/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "distmm/report.hpp"

namespace distmm {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "distmm-checkpoint";
constexpr int kVersion = 1;
constexpr const char* kManifest = "manifest.json";
constexpr const char* kPartialPrefix = ".partial-";
constexpr const char* kRemovingPrefix = ".removing-";

std::string step_name(std::size_t step) {
  return "step-" + std::to_string(step);
}

std::string shard_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "shard-%05d.bin", rank);
  return name;
}

// The step of a directory named step-N, if it is one.
std::optional<std::size_t> step_of(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5 || name.size() > 25) return std::nullopt;
  std::size_t step = 0;
  for (char c : name.substr(5)) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + static_cast<std::size_t>(c - '0');
  }
  return step;
}

std::string errno_text() {
  return std::strerror(errno);
}

// Text as doubles and back (the communicator moves numbers), for agreement messages and the
// manifest's broadcast.
std::vector<double> encode_text(const std::string& s) {
  std::vector<double> v;
  v.reserve(s.size() + 1);
  v.push_back(static_cast<double>(s.size()));
  for (char c : s) v.push_back(static_cast<unsigned char>(c));
  return v;
}

std::string decode_text(const std::vector<double>& v) {
  std::string s;
  const auto n = static_cast<std::size_t>(v.at(0));
  for (std::size_t i = 0; i < n && i + 1 < v.size(); ++i) {
    s.push_back(static_cast<char>(static_cast<unsigned char>(v[i + 1])));
  }
  return s;
}

// Broadcasts a string of any length from `root`.
std::string broadcast_text(Communicator& comm, const std::string& mine, int root) {
  if (comm.size() == 1) return mine;
  std::vector<double> length{static_cast<double>(mine.size())};
  comm.broadcast(length, root);
  std::vector<double> text(static_cast<std::size_t>(length[0]) + 1, 0.0);
  if (comm.rank() == root) text = encode_text(mine);
  comm.broadcast(text, root);
  return decode_text(text);
}

// Every rank passes its error ("" for none). If any rank has one, every rank throws E with
// the message of the lowest failing rank.
template <typename E>
void agree(Communicator& comm, const std::string& mine) {
  const auto p = static_cast<std::size_t>(comm.size());
  if (p == 1) {
    if (!mine.empty()) throw E(mine, comm.rank(), "checkpoint");
    return;
  }
  std::vector<double> failing(p, 0.0);
  if (!mine.empty()) failing[static_cast<std::size_t>(comm.rank())] = 1;
  comm.allreduce_sum(failing);
  const auto first = std::find_if(failing.begin(), failing.end(), [](double f) { return f > 0; });
  if (first == failing.end()) return;
  const int who = static_cast<int>(first - failing.begin());
  throw E(broadcast_text(comm, mine, who), comm.rank(), "checkpoint");
}

// A test hook: DISTMM_TEST_CHECKPOINT_CRASH=STAGE:RANK:STEP kills this process (SIGKILL, as a
// machine failure would) at STAGE of the save of step STEP on rank RANK. Stages: shard (its
// shard file written and fsynced, before the ranks agree), manifest (rank 0: manifest written,
// before the rename), renamed (rank 0: renamed, before `latest` is updated).
void test_crash_point(const char* stage, int rank, std::size_t step) {
  const char* spec = std::getenv("DISTMM_TEST_CHECKPOINT_CRASH");
  if (spec == nullptr) return;
  char want[16] = {};
  int who = -1;
  unsigned long long at = 0;
  if (std::sscanf(spec, "%15[a-z]:%d:%llu", want, &who, &at) == 3 &&
      std::strcmp(want, stage) == 0 && who == rank && at == step) {
    std::raise(SIGKILL);
  }
}

void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(dir.string() + ": cannot be opened: " + errno_text());
  const int rc = ::fsync(fd);
  const std::string why = rc != 0 ? errno_text() : std::string();
  ::close(fd);
  if (rc != 0) throw std::runtime_error(dir.string() + ": fsync failed: " + why);
}

// Writes the pieces to a new file (never an existing one), fsyncs and closes it; returns the
// CRC-32 of what was written.
std::uint32_t write_synced(const fs::path& path,
                           const std::vector<std::pair<const void*, std::size_t>>& pieces) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(path.string() + ": cannot be created: " + errno_text());
  uLong crc = crc32_z(0L, Z_NULL, 0);
  std::string error;
  for (const auto& [data, bytes] : pieces) {
    const auto* p = static_cast<const unsigned char*>(data);
    crc = crc32_z(crc, p, bytes);
    for (std::size_t done = 0; done < bytes && error.empty();) {
      const ssize_t n = ::write(fd, p + done, std::min<std::size_t>(bytes - done, 1u << 30));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) error = "write failed: " + errno_text();
      done += n > 0 ? static_cast<std::size_t>(n) : 0;
    }
  }
  if (error.empty() && ::fsync(fd) != 0) error = "fsync failed: " + errno_text();
  if (::close(fd) != 0 && error.empty()) error = "close failed: " + errno_text();
  if (!error.empty()) throw std::runtime_error(path.string() + ": " + error);
  return static_cast<std::uint32_t>(crc);
}

// Removes what failed saves and removals left behind.
void remove_leftovers(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPartialPrefix, 0) == 0 || name.rfind(kRemovingPrefix, 0) == 0) {
      fs::remove_all(entry.path());
    }
  }
}

// Committed checkpoints under `dir`, by step.
std::map<std::size_t, fs::path> committed(const fs::path& dir) {
  std::map<std::size_t, fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto step = step_of(it->path().filename().string());
    if (step && it->is_directory(ec)) out[*step] = it->path();
  }
  return out;
}

// Keeps the newest `keep` committed checkpoints: each older one is renamed away first (one
// atomic step), then removed.
void retire_old(const fs::path& dir, std::size_t keep) {
  auto all = committed(dir);
  while (all.size() > keep) {
    const fs::path old = all.begin()->second;
    const fs::path doomed = dir / (kRemovingPrefix + old.filename().string());
    fs::rename(old, doomed);
    fs::remove_all(doomed);
    all.erase(all.begin());
  }
}

void write_latest(const fs::path& dir, const std::string& name) {
  const fs::path tmp = dir / "latest.tmp";
  fs::remove(tmp);
  const std::string line = name + "\n";
  write_synced(tmp, {{line.data(), line.size()}});
  fs::rename(tmp, dir / "latest");
  fsync_dir(dir);
}

const char* dtype_flag(DataType t) {
  return t == DataType::f32 ? "f32" : "f64";
}

const char* optimizer_name(Optimizer o) {
  return o == Optimizer::adam ? "adam" : "sgd";
}

json manifest_of(const CheckpointMeta& m, const std::vector<CheckpointShard>& shards) {
  json doc{{"format", kFormat},
           {"version", kVersion},
           {"step", m.step},
           {"strategy", m.strategy},
           {"ranks", m.ranks},
           {"m", m.shape.m},
           {"k", m.shape.k},
           {"n", m.shape.n},
           {"dtype", dtype_flag(m.dtype)},
           {"byte_order", "little"},
           {"optimizer",
            {{"name", optimizer_name(m.optimizer)},
             {"lr", m.lr},
             {"beta1", m.beta1},
             {"beta2", m.beta2},
             {"eps", m.eps}}},
           {"sections", m.optimizer == Optimizer::adam ? json{"W", "M", "V"} : json{"W"}},
           {"x_crc32", m.x_crc32},
           {"t_crc32", m.t_crc32},
           {"w0_crc32", m.w0_crc32},
           {"shards", json::array()}};
  for (const CheckpointShard& s : shards) {
    doc["shards"].push_back({{"file", s.file},
                             {"first_row", s.first_row},
                             {"rows", s.rows},
                             {"first_column", s.first_column},
                             {"columns", s.columns},
                             {"bytes", s.bytes},
                             {"crc32", s.crc32}});
  }
  return doc;
}

// Reading a manifest: every problem names the file and the field.
class ManifestReader {
 public:
  explicit ManifestReader(fs::path file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw BadCheckpoint("checkpoint " + file_.string() + ": " + what, -1, "checkpoint");
  }
  const json& field(const json& j, const char* name, const char* where = "") const {
    if (!j.is_object() || !j.contains(name)) {
      fail(std::string("field '") + where + name + "' is missing");
    }
    return j.at(name);
  }
  std::uint64_t whole(const json& j, const char* name, const char* where = "") const {
    const json& v = field(j, name, where);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0)) {
      fail(std::string("field '") + where + name + "' must be a whole number, got " +
           escaped(v.dump()));
    }
    return v.get<std::uint64_t>();
  }
  double positive(const json& j, const char* name, const char* where = "") const {
    const json& v = field(j, name, where);
    if (!v.is_number() || !(v.get<double>() > 0)) {
      fail(std::string("field '") + where + name + "' must be a number above 0, got " +
           escaped(v.dump()));
    }
    return v.get<double>();
  }
  std::string text(const json& j, const char* name, const char* where = "") const {
    const json& v = field(j, name, where);
    if (!v.is_string()) {
      fail(std::string("field '") + where + name + "' must be a string, got " + escaped(v.dump()));
    }
    return v.get<std::string>();
  }

 private:
  fs::path file_;
};

// "column 3 is" or "columns 3-5 are".
std::string columns_are(std::size_t first, std::size_t end) {
  return end == first + 1
             ? "column " + std::to_string(first) + " is"
             : "columns " + std::to_string(first) + "-" + std::to_string(end - 1) + " are";
}

// The shards (sorted by first column) must cover W (k x n) exactly once. Shards of whole
// columns are checked column by column, naming the columns; other blocks pairwise.
void check_tiling(const ManifestReader& r, const std::vector<CheckpointShard>& shards,
                  std::size_t k, std::size_t n) {
  const bool whole_columns = std::all_of(
      shards.begin(), shards.end(), [&](const auto& s) { return s.rows == k || s.columns == 0; });
  if (whole_columns) {
    std::size_t next = 0;
    std::string last_file;
    for (const CheckpointShard& s : shards) {
      if (s.columns == 0) continue;
      if (s.first_column < next) {
        r.fail(columns_are(s.first_column, std::min(next, s.first_column + s.columns)) +
               " covered twice (shards " + last_file + " and " + s.file + ")");
      }
      if (s.first_column > next) {
        r.fail(columns_are(next, s.first_column) + " covered by no shard");
      }
      next = s.first_column + s.columns;
      last_file = s.file;
    }
    if (next != n) r.fail(columns_are(next, n) + " covered by no shard");
    return;
  }
  std::uint64_t covered = 0;
  for (std::size_t a = 0; a < shards.size(); ++a) {
    const CheckpointShard& x = shards[a];
    covered += static_cast<std::uint64_t>(x.rows) * x.columns;
    for (std::size_t b = a + 1; b < shards.size(); ++b) {
      const CheckpointShard& y = shards[b];
      if (y.first_column >= x.first_column + x.columns) break;  // sorted by first column
      const bool rows_meet =
          std::max(x.first_row, y.first_row) < std::min(x.first_row + x.rows, y.first_row + y.rows);
      if (rows_meet && y.columns > 0) {
        r.fail("shards " + x.file + " and " + y.file + " both cover row " +
               std::to_string(std::max(x.first_row, y.first_row)) + " of column " +
               std::to_string(y.first_column));
      }
    }
  }
  if (covered != static_cast<std::uint64_t>(k) * n) {
    r.fail(std::to_string(static_cast<std::uint64_t>(k) * n - covered) + " of W's " +
           std::to_string(static_cast<std::uint64_t>(k) * n) + " elements covered by no shard");
  }
}

Checkpoint parse_manifest(const fs::path& dir, const std::string& content) {
  const fs::path file = dir / kManifest;
  const ManifestReader r(file);
  json doc;
  try {
    doc = json::parse(content);
  } catch (const json::exception& e) {  // a parse error, or a number out of range
    r.fail("not valid JSON (" + escaped(e.what(), 120) + ")");
  }
  if (!doc.is_object()) r.fail("not a JSON object");
  if (r.text(doc, "format") != kFormat)
    r.fail("field 'format' is not \"" + std::string(kFormat) + "\"");
  if (r.whole(doc, "version") != kVersion) {
    r.fail("version " + r.field(doc, "version").dump() + " (this distmm reads version " +
           std::to_string(kVersion) + ")");
  }
  Checkpoint ck;
  ck.dir = dir;
  CheckpointMeta& m = ck.meta;
  m.step = r.whole(doc, "step");
  m.strategy = r.text(doc, "strategy");
  m.ranks = static_cast<int>(r.whole(doc, "ranks"));
  m.shape = {r.whole(doc, "m"), r.whole(doc, "k"), r.whole(doc, "n")};
  if (m.ranks < 1 || m.shape.m == 0 || m.shape.k == 0 || m.shape.n == 0) {
    r.fail("fields 'ranks', 'm', 'k' and 'n' must be at least 1");
  }
  const std::string dtype = r.text(doc, "dtype");
  if (dtype != "f64" && dtype != "f32")
    r.fail("field 'dtype' must be \"f64\" or \"f32\", got \"" + dtype + "\"");
  m.dtype = dtype == "f32" ? DataType::f32 : DataType::f64;
  if (r.text(doc, "byte_order") != "little") r.fail("field 'byte_order' must be \"little\"");
  const json& opt = r.field(doc, "optimizer");
  const std::string name = r.text(opt, "name", "optimizer.");
  if (name != "sgd" && name != "adam") r.fail("field 'optimizer.name' must be \"sgd\" or \"adam\"");
  m.optimizer = name == "adam" ? Optimizer::adam : Optimizer::sgd;
  m.lr = r.positive(opt, "lr", "optimizer.");
  m.beta1 = r.positive(opt, "beta1", "optimizer.");
  m.beta2 = r.positive(opt, "beta2", "optimizer.");
  m.eps = r.positive(opt, "eps", "optimizer.");
  const auto crc_field = [&](const char* key) {
    const std::uint64_t crc = r.whole(doc, key);
    if (crc > 0xffffffffu) r.fail(std::string("field '") + key + "' is above 2^32 - 1");
    return static_cast<std::uint32_t>(crc);
  };
  m.x_crc32 = crc_field("x_crc32");
  m.t_crc32 = crc_field("t_crc32");
  m.w0_crc32 = crc_field("w0_crc32");
  const std::size_t sections = checkpoint_sections(m.optimizer);
  const json& sec = r.field(doc, "sections");
  if (!sec.is_array() || sec.size() != sections) {
    r.fail("field 'sections' must list " + std::to_string(sections) + " matrices for " + name);
  }
  const json& shards = r.field(doc, "shards");
  if (!shards.is_array() || shards.empty()) r.fail("field 'shards' must be a non-empty array");
  const std::uint64_t element_bytes = size_of(m.dtype) * sections;
  for (const json& s : shards) {
    CheckpointShard shard;
    shard.file = r.text(s, "file", "shards[].");
    if (shard.file.empty() || shard.file.find('/') != std::string::npos || shard.file == "." ||
        shard.file == ".." || shard.file == kManifest) {
      r.fail("shard file name \"" + shard.file + "\" is not a file of the checkpoint");
    }
    // Without rows (a manifest of whole columns, as older versions wrote): all k.
    const bool has_rows = s.is_object() && (s.contains("first_row") || s.contains("rows"));
    shard.first_row = has_rows ? r.whole(s, "first_row", "shards[].") : 0;
    shard.rows = has_rows ? r.whole(s, "rows", "shards[].") : m.shape.k;
    shard.first_column = r.whole(s, "first_column", "shards[].");
    shard.columns = r.whole(s, "columns", "shards[].");
    shard.bytes = r.whole(s, "bytes", "shards[].");
    const std::uint64_t crc = r.whole(s, "crc32", "shards[].");
    if (crc > 0xffffffffu) r.fail("shard " + shard.file + ": crc32 above 2^32 - 1");
    shard.crc32 = static_cast<std::uint32_t>(crc);
    if (shard.first_row > m.shape.k || shard.rows > m.shape.k - shard.first_row ||
        shard.first_column > m.shape.n || shard.columns > m.shape.n - shard.first_column) {
      r.fail("shard " + shard.file + ": rows " + std::to_string(shard.first_row) + "+" +
             std::to_string(shard.rows) + ", columns " + std::to_string(shard.first_column) + "+" +
             std::to_string(shard.columns) + " reach outside W (" + std::to_string(m.shape.k) +
             " x " + std::to_string(m.shape.n) + ")");
    }
    const std::uint64_t expected = shard.rows * shard.columns * element_bytes;
    if (shard.bytes != expected) {
      r.fail("shard " + shard.file + ": " + std::to_string(shard.bytes) + " bytes for " +
             std::to_string(shard.rows) + " x " + std::to_string(shard.columns) +
             " elements, expected " + std::to_string(expected));
    }
    for (const CheckpointShard& other : ck.shards) {
      if (other.file == shard.file) r.fail("shard file " + shard.file + " is listed twice");
    }
    ck.shards.push_back(shard);
  }
  std::stable_sort(ck.shards.begin(), ck.shards.end(), [](const auto& a, const auto& b) {
    return std::pair(a.first_column, a.first_row) < std::pair(b.first_column, b.first_row);
  });
  check_tiling(r, ck.shards, m.shape.k, m.shape.n);
  return ck;
}

std::string hex(std::uint32_t crc) {
  char s[16];
  std::snprintf(s, sizeof s, "0x%08x", crc);
  return s;
}

// Whether a run described by `want` may resume from `ck`.
void check_compatible(const Checkpoint& ck, const CheckpointMeta& want) {
  const CheckpointMeta& have = ck.meta;
  const ManifestReader r(ck.dir / kManifest);
  const auto dims = [](const MatmulShape& s) {
    return "X " + std::to_string(s.m) + "x" + std::to_string(s.k) + ", W " + std::to_string(s.k) +
           "x" + std::to_string(s.n);
  };
  if (have.shape != want.shape) {
    r.fail("saved for " + dims(have.shape) + ", this run has " + dims(want.shape));
  }
  if (have.dtype != want.dtype) {
    r.fail(std::string("saved with --dtype ") + dtype_flag(have.dtype) +
           ", this run uses --dtype " + dtype_flag(want.dtype));
  }
  if (have.optimizer != want.optimizer) {
    r.fail(std::string("saved with --optimizer ") + optimizer_name(have.optimizer) +
           ", this run uses --optimizer " + optimizer_name(want.optimizer));
  }
  const auto differs = [](double a, double b) { return a != b; };
  if (differs(have.lr, want.lr)) {
    std::ostringstream s;
    s << "saved with --lr " << have.lr << ", this run uses --lr " << want.lr;
    r.fail(s.str());
  }
  if (have.optimizer == Optimizer::adam &&
      (differs(have.beta1, want.beta1) || differs(have.beta2, want.beta2) ||
       differs(have.eps, want.eps))) {
    r.fail("saved with other Adam settings (beta1, beta2, eps) than this run's");
  }
  if (have.x_crc32 != want.x_crc32) {
    r.fail("X differs from the X this checkpoint was trained on (CRC-32 " + hex(want.x_crc32) +
           ", saved " + hex(have.x_crc32) + "): give the same --x, or --seed, --m, --k and --n");
  }
  if (have.t_crc32 != want.t_crc32) {
    r.fail("T differs from the T this checkpoint was trained on (CRC-32 " + hex(want.t_crc32) +
           ", saved " + hex(have.t_crc32) + "): give the same --t, or --seed, --m, --k and --n");
  }
  if (have.w0_crc32 != want.w0_crc32) {
    r.fail("the initial W differs from the one this checkpoint's run started from (CRC-32 " +
           hex(want.w0_crc32) + ", saved " + hex(have.w0_crc32) +
           "): give the same --w (the result is verified against training from it)");
  }
}

// Every shard file is there with the size the manifest says.
void check_files(const Checkpoint& ck) {
  for (const CheckpointShard& s : ck.shards) {
    const fs::path file = ck.dir / s.file;
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) {
      throw BadCheckpoint("checkpoint " + file.string() + ": missing (" + errno_text() + ")", -1,
                          "checkpoint");
    }
    if (static_cast<std::uint64_t>(st.st_size) != s.bytes) {
      throw BadCheckpoint(
          "checkpoint " + file.string() + ": " +
              (static_cast<std::uint64_t>(st.st_size) < s.bytes ? "truncated: " : "") + "has " +
              std::to_string(st.st_size) + " bytes, the manifest says " + std::to_string(s.bytes),
          -1, "checkpoint");
    }
  }
}

std::string read_text_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw BadCheckpoint(
        "checkpoint " + file.string() + ": " +
            (fs::exists(file) ? "cannot be read"
                              : "missing (no manifest: not a committed checkpoint)"),
        -1, "checkpoint");
  }
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

// DIR/step-N as given, or DIR's newest committed checkpoint.
fs::path resolve(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    throw BadCheckpoint("checkpoint " + escaped_path(path.string()) + ": no such directory", -1,
                        "checkpoint");
  }
  if (fs::exists(path / kManifest, ec) || step_of(path.filename().string())) return path;
  const fs::path newest = newest_checkpoint(path);
  if (newest.empty()) {
    throw BadCheckpoint("checkpoint directory " + escaped_path(path.string()) +
                            " holds no committed checkpoint (no step-N directory)",
                        -1, "checkpoint");
  }
  return newest;
}

}  // namespace

std::uint64_t checkpoint_write_bytes(const Block& block, std::size_t element_bytes, Optimizer o) {
  return static_cast<std::uint64_t>(block.elements()) * element_bytes * checkpoint_sections(o);
}

std::uint32_t crc32_of(const void* data, std::size_t bytes) {
  return static_cast<std::uint32_t>(
      crc32_z(crc32_z(0L, Z_NULL, 0), static_cast<const unsigned char*>(data), bytes));
}

fs::path newest_checkpoint(const fs::path& dir) {
  const auto all = committed(dir);
  return all.empty() ? fs::path() : all.rbegin()->second;
}

void check_save_dir(Communicator& comm, const fs::path& dir, std::size_t start_step) {
  std::string error;
  if (comm.rank() == 0) {
    std::error_code ec;
    if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
      error = "--checkpoint-dir " + dir.string() + ": not a directory";
    } else if (const auto all = committed(dir); !all.empty() && all.rbegin()->first > start_step) {
      error = "--checkpoint-dir " + dir.string() + " holds " + all.rbegin()->second.string() +
              (start_step == 0 ? ": resume from it with --resume " + dir.string() +
                                     ", or save into an empty directory"
                               : ", newer than step " + std::to_string(start_step) +
                                     " resumed from: resume from the newest, or save elsewhere");
    }
  }
  agree<BadCheckpoint>(comm, error);
}

template <Element T>
SaveFigures save_checkpoint(Communicator& comm, const fs::path& dir, const CheckpointMeta& meta,
                            std::span<const T* const> sections, std::size_t keep,
                            const Block& mine) {
  const auto start = std::chrono::steady_clock::now();
  const int rank = comm.rank();
  const fs::path final_dir = dir / step_name(meta.step);
  const fs::path partial = dir / (kPartialPrefix + step_name(meta.step));
  std::string error;
  // 1. A fresh directory for the save.
  if (rank == 0) {
    try {
      fs::create_directories(dir);
      remove_leftovers(dir);
      if (fs::exists(final_dir)) {
        error = "checkpoint " + final_dir.string() +
                " exists already (a committed checkpoint is never written again)";
      } else {
        fs::create_directory(partial);
      }
    } catch (const std::exception& e) {
      error = "checkpoint directory " + dir.string() + ": " + e.what();
    }
  }
  agree<CheckpointWriteError>(comm, error);

  // 2. This rank's shard: its block of W, then of M and V.
  const std::size_t block = mine.elements() * sizeof(T);
  std::vector<std::pair<const void*, std::size_t>> pieces;
  for (const T* s : sections) pieces.emplace_back(s, block);
  std::uint32_t crc = 0;
  try {
    crc = write_synced(partial / shard_name(rank), pieces);
  } catch (const std::exception& e) {
    error = std::string("checkpoint ") + e.what();
  }
  test_crash_point("shard", rank, meta.step);
  agree<CheckpointWriteError>(comm, error);

  // 3. Rank 0 learns every shard's block, size and checksum.
  const std::uint64_t bytes = block * sections.size();
  const auto rows = gather_values(comm,
                                  {static_cast<double>(mine.row0), static_cast<double>(mine.rows),
                                   static_cast<double>(mine.col0), static_cast<double>(mine.cols),
                                   static_cast<double>(bytes), static_cast<double>(crc)},
                                  0);
  // 4. The commit.
  if (rank == 0) {
    try {
      std::vector<CheckpointShard> shards;
      for (std::size_t r = 0; r < rows.size(); ++r) {
        const auto whole = [&](std::size_t i) { return static_cast<std::size_t>(rows[r][i]); };
        shards.push_back({shard_name(static_cast<int>(r)), whole(0), whole(1), whole(2), whole(3),
                          static_cast<std::uint64_t>(rows[r][4]),
                          static_cast<std::uint32_t>(rows[r][5])});
      }
      const std::string text = manifest_of(meta, shards).dump(2) + "\n";
      write_synced(partial / kManifest, {{text.data(), text.size()}});
      fsync_dir(partial);
      test_crash_point("manifest", rank, meta.step);
      fs::rename(partial, final_dir);  // the commit point
      fsync_dir(dir);
      test_crash_point("renamed", rank, meta.step);
      write_latest(dir, final_dir.filename().string());
      retire_old(dir, std::max<std::size_t>(keep, 1));
    } catch (const std::exception& e) {
      error = "checkpoint " + final_dir.string() + ": commit failed: " + e.what();
    }
  }
  agree<CheckpointWriteError>(comm, error);
  return {final_dir, bytes,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

Checkpoint open_checkpoint(Communicator& comm, const fs::path& path,
                           const CheckpointMeta& expected) {
  std::string error, resolved, content;
  Checkpoint ck;
  if (comm.rank() == 0) {
    try {
      const fs::path dir = resolve(path);
      content = read_text_file(dir / kManifest);
      ck = parse_manifest(dir, content);
      check_compatible(ck, expected);
      check_files(ck);
      resolved = dir.string();
    } catch (const BadCheckpoint& e) {
      error = e.what();
    } catch (const std::exception& e) {
      error = "checkpoint " + escaped_path(path.string()) + ": " + e.what();
    }
  }
  agree<BadCheckpoint>(comm, error);
  // The other ranks parse the manifest rank 0 validated.
  resolved = broadcast_text(comm, resolved, 0);
  content = broadcast_text(comm, content, 0);
  return comm.rank() == 0 ? ck : parse_manifest(resolved, content);
}

// Reads `bytes` at `offset` of `fd` into `dest`; an error text naming `file` if it ends first.
std::string pread_all(int fd, const fs::path& file, unsigned char* dest, std::size_t offset,
                      std::size_t bytes, std::uint64_t file_bytes) {
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd, dest + done, std::min<std::size_t>(bytes - done, 1u << 30),
                              static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  if (done == bytes) return {};
  return "checkpoint " + file.string() + ": truncated: ends before byte " +
         std::to_string(offset + bytes) + " of the " + std::to_string(file_bytes) +
         " the manifest says";
}

template <Element T>
std::uint64_t load_block(Communicator& comm, const Checkpoint& ck, const Block& block,
                         std::span<T* const> sections) {
  std::vector<double> pieces;  // per piece: shard index, offset in its file, bytes, CRC-32
  std::uint64_t read = 0;
  std::string error;
  for (std::size_t i = 0; i < ck.shards.size() && error.empty(); ++i) {
    const CheckpointShard& shard = ck.shards[i];
    const std::size_t c_lo = std::max(block.col0, shard.first_column);
    const std::size_t c_hi = std::min(block.col0 + block.cols, shard.first_column + shard.columns);
    const std::size_t r_lo = std::max(block.row0, shard.first_row);
    const std::size_t r_hi = std::min(block.row0 + block.rows, shard.first_row + shard.rows);
    if (c_lo >= c_hi || r_lo >= r_hi) continue;
    const fs::path file = ck.dir / shard.file;
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      error = "checkpoint " + file.string() + ": cannot be opened: " + errno_text();
      break;
    }
    // The wanted rows of a column are one run of the file; whole columns of both the file's
    // block and this one are one run together.
    const std::size_t run_rows = r_hi - r_lo;
    const bool whole = run_rows == shard.rows && run_rows == block.rows;
    const std::size_t per_run = whole ? c_hi - c_lo : 1;
    for (std::size_t s = 0; s < sections.size() && error.empty(); ++s) {
      for (std::size_t c = c_lo; c < c_hi && error.empty(); c += per_run) {
        const std::size_t offset =
            (s * shard.rows * shard.columns + (c - shard.first_column) * shard.rows +
             (r_lo - shard.first_row)) *
            sizeof(T);
        const std::size_t bytes = run_rows * per_run * sizeof(T);
        auto* dest = reinterpret_cast<unsigned char*>(sections[s] + (c - block.col0) * block.rows +
                                                      (r_lo - block.row0));
        error = pread_all(fd, file, dest, offset, bytes, shard.bytes);
        if (!error.empty()) break;
        read += bytes;
        pieces.insert(pieces.end(),
                      {static_cast<double>(i), static_cast<double>(offset),
                       static_cast<double>(bytes), static_cast<double>(crc32_of(dest, bytes))});
      }
    }
    ::close(fd);
  }
  agree<BadCheckpoint>(comm, error);

  // Rank 0 combines the pieces' CRCs, in file order, into every file's CRC-32.
  const auto p = static_cast<std::size_t>(comm.size());
  std::vector<double> per_rank(p, 0.0);
  per_rank[static_cast<std::size_t>(comm.rank())] = static_cast<double>(pieces.size());
  if (p > 1) comm.allreduce_sum(per_rank);
  std::vector<std::size_t> counts;
  std::size_t total = 0;
  for (double c : per_rank) {
    counts.push_back(static_cast<std::size_t>(c));
    total += counts.back();
  }
  std::vector<double> all(comm.rank() == 0 ? total : 0);
  if (p > 1) {
    comm.gatherv(pieces, all, counts, 0);
  } else {
    all = pieces;
  }
  if (comm.rank() == 0) {
    std::vector<std::vector<std::array<std::uint64_t, 3>>> per_file(ck.shards.size());
    for (std::size_t i = 0; i + 3 < all.size(); i += 4) {
      per_file[static_cast<std::size_t>(all[i])].push_back(
          {static_cast<std::uint64_t>(all[i + 1]), static_cast<std::uint64_t>(all[i + 2]),
           static_cast<std::uint64_t>(all[i + 3])});
    }
    for (std::size_t f = 0; f < per_file.size() && error.empty(); ++f) {
      auto& got = per_file[f];
      std::sort(got.begin(), got.end());
      uLong crc = crc32_z(0L, Z_NULL, 0);
      std::uint64_t at = 0;
      for (const auto& [offset, bytes, piece_crc] : got) {
        if (offset != at) break;
        crc = crc32_combine(crc, static_cast<uLong>(piece_crc), static_cast<z_off_t>(bytes));
        at += bytes;
      }
      const CheckpointShard& shard = ck.shards[f];
      const std::string file = (ck.dir / shard.file).string();
      if (at != shard.bytes) {
        error = "checkpoint " + file + ": the ranks read " + std::to_string(at) + " of its " +
                std::to_string(shard.bytes) + " bytes (parts not covered by the new sharding)";
      } else if (static_cast<std::uint32_t>(crc) != shard.crc32) {
        error = "checkpoint " + file + ": checksum mismatch (CRC-32 " +
                hex(static_cast<std::uint32_t>(crc)) + ", the manifest says " + hex(shard.crc32) +
                "): the file is corrupt";
      }
    }
  }
  agree<BadCheckpoint>(comm, error);
  return read;
}

#define DISTMM_INSTANTIATE(T)                                                                 \
  template SaveFigures save_checkpoint(Communicator&, const fs::path&, const CheckpointMeta&, \
                                       std::span<const T* const>, std::size_t, const Block&); \
  template std::uint64_t load_block(Communicator&, const Checkpoint&, const Block&,           \
                                    std::span<T* const>);
DISTMM_INSTANTIATE(double)
DISTMM_INSTANTIATE(float)
#undef DISTMM_INSTANTIATE

}  // namespace distmm
